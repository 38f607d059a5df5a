// What the two "heatmaps side by side on one colour scale" views share: the experts' pair (pair.js)
// and the Compare tab's A, B and A−B (comparepair.js). The worker sends each heatmap as metadata
// plus two buffers, its pixels and its values (Float64, rows × cols); the panes are laid out in a
// row at one size, and the pointer over any of them names a cell, the same cell in all.
//
//   unpack(meta, buffers, k)       heatmap k of a reply: meta with `pixels` and `values`
//   paneSize(box, panes, heat)     the CSS size of each of `panes` heatmaps shaped like `heat` in `box`
//   pane({id, heat, size, label, caption, onMove, onLeave})
//                                  [figure, canvas]: the heatmap drawn at `size` under a caption (nodes);
//                                  the canvas's dataset has rows, cols, exact; onMove(canvas, event)
//   cellAt(canvas, event, rows, cols)   [i, j] of the cell under the pointer, or null
//   scaleLabels(lo, hi, scale)     the colour bar's ends: −scale and +scale

import {el} from "./dom.js";
import {fmt} from "./format.js";
import {drawLattice, latticeSize} from "./moecharts.js";

const GAP = 24;               // CSS pixels between the heatmaps
const MIN_WIDTH = 160;        // CSS pixels: a pane is never narrower, even in a narrow box

export function unpack(meta, buffers, k) {
  const values = buffers[2 * k + 1];
  return {...meta, pixels: buffers[2 * k], values: new Float64Array(values.buffer, values.byteOffset, meta.rows * meta.cols)};
}

export function paneSize(box, panes, heat) {
  const width = box.clientWidth || 900;
  const available = Math.max(MIN_WIDTH, Math.floor((width - GAP * (panes - 1)) / panes));
  return latticeSize(heat.rows, heat.cols, heat.view_shape, available);
}

export function pane({id, heat, size, label, caption, onMove, onLeave}) {
  const canvas = el("canvas", {class: "pair-heatmap", id, "aria-label": label});
  drawLattice(canvas, heat, size);
  Object.assign(canvas.dataset, {rows: String(heat.rows), cols: String(heat.cols), exact: String(heat.exact)});
  canvas.addEventListener("pointermove", (event) => onMove(canvas, event));
  canvas.addEventListener("pointerleave", onLeave);
  const figure = el("figure", {class: "pair-panel"}, el("figcaption", {}, ...caption), canvas);
  figure.style.width = `${Math.max(size[0], MIN_WIDTH)}px`;
  return [figure, canvas];
}

export function cellAt(canvas, event, rows, cols) {
  const rect = canvas.getBoundingClientRect();
  const i = Math.floor(((event.clientY - rect.top) / rect.height) * rows);
  const j = Math.floor(((event.clientX - rect.left) / rect.width) * cols);
  return i < 0 || j < 0 || i >= rows || j >= cols ? null : [i, j];
}

export function scaleLabels(lo, hi, scale) {
  lo.textContent = `−${fmt(scale, 3)}`;
  hi.textContent = `+${fmt(scale, 3)}`;
}
