// Two experts of one layer side by side: the same matrix of each (a picker chooses which) as
// heatmaps on one colour scale, so that equal weights look equal, and their difference.
// Pixels come from the worker (tensorloupe.redundancy.expert_tensor -> grid -> colormap); for
// stacked experts the matrix is that expert's slice of the stacked tensor.

import {LATTICE, drawColorbar} from "./canvas.js";
import {clear, el} from "./dom.js";
import {exact, fmt, shapeText} from "./format.js";
import {drawLattice, latticeSize} from "./moecharts.js";

const GAP = 24;               // CSS pixels between the heatmaps
const IDLE = "Point at any of the heatmaps to read both experts' values";

// A dotted name that may wrap after its dots (and nowhere else) in a narrow caption.
function breakable(name) {
  const parts = name.split(".");
  return parts.flatMap((part, i) => (i < parts.length - 1 ? [`${part}.`, el("wbr")] : [part]));
}

export class PairView {
  constructor(app) {
    this.app = app;            // the page's ctx (panels.js)
    this.generation = 0;
    this.shown = null;
    const d = this.dom = {
      title: el("div", {class: "pair-title", id: "moe-pair-title"}),
      leaf: el("select", {id: "moe-leaf", "aria-label": "matrix"}),
      panels: el("div", {class: "pair-panels"}),
      bar: el("canvas", {class: "colorbar", id: "moe-pair-colorbar"}),
      lo: el("span", {class: "mono small"}),
      hi: el("span", {class: "mono small"}),
      readout: el("div", {class: "readout mono small", id: "moe-pair-readout", text: IDLE}),
      hint: el("p", {class: "muted small", id: "moe-pair-hint", text: "Click a cell of the similarity matrix to see the two experts' weights side by side."}),
    };
    d.box = el("section", {class: "pair", id: "moe-pair", hidden: true},
      el("div", {class: "pair-head"}, d.title, el("span", {class: "spacer"}),
        el("label", {class: "small muted"}, "matrix ", d.leaf),
        el("button", {type: "button", class: "icon", "aria-label": "Close", text: "×", onclick: () => this.close()})),
      d.panels,
      el("div", {class: "colorbar-row"}, d.lo, d.bar, d.hi,
        el("span", {class: "muted small", text: "one colour scale for all: the largest |value| of either expert"})),
      d.readout);
    d.leaf.addEventListener("change", () => this.load());
  }

  element() {
    return el("div", {}, this.dom.hint, this.dom.box);
  }

  setPalette(palette, levels) {
    drawColorbar(this.dom.bar, palette, levels);
  }

  close() {
    this.generation += 1;
    this.shown = null;
    this.dom.box.hidden = true;
    this.dom.hint.hidden = false;
  }

  // {layer: the analysed layer, experts: [a, b], similarity, refs: expert -> leaf -> {tensor, expert}}
  show(pair) {
    const d = this.dom;
    const leaves = pair.layer.matrices;
    const keep = leaves.includes(d.leaf.value) ? d.leaf.value : leaves[0];
    clear(d.leaf).append(...leaves.map((leaf) => el("option", {value: leaf, text: leaf, selected: leaf === keep})));
    d.leaf.value = keep;
    this.shown = pair;
    const [a, b] = pair.experts;
    d.title.textContent = `Expert ${a} and expert ${b} of layer ${pair.layer.index ?? pair.layer.prefix} · cosine ${fmt(pair.similarity, 4)}`;
    d.box.hidden = false;
    d.hint.hidden = true;
    this.load();
  }

  async load() {
    const pair = this.shown;
    if (!pair) return;
    const generation = ++this.generation;
    const d = this.dom;
    const leaf = d.leaf.value;
    const args = {layer: pair.layer.prefix, experts: pair.experts, leaf, rows: LATTICE, cols: LATTICE};
    d.box.dataset.loading = "true";
    try {
      const {result, buffers} = await this.app.request("expert_heatmaps", args, {label: "Drawing the experts' weights…"});
      if (generation !== this.generation) return;
      this.draw(pair, result, buffers, args);
    } catch (error) {
      if (generation === this.generation) d.readout.textContent = error.message;
    } finally {
      if (generation === this.generation) d.box.dataset.loading = "false";
    }
  }

  draw(pair, result, buffers, args) {
    const d = this.dom;
    const width = d.box.clientWidth || 900;
    const panes = result.panels.length + (result.difference ? 1 : 0);
    const available = Math.max(160, Math.floor((width - GAP * (panes - 1)) / panes));
    const unpack = (meta, k) => ({...meta, pixels: buffers[2 * k],
      values: new Float64Array(buffers[2 * k + 1].buffer, buffers[2 * k + 1].byteOffset, meta.rows * meta.cols)});
    const heat = result.panels.map(unpack);
    const size = latticeSize(heat[0].rows, heat[0].cols, heat[0].view_shape, available);
    const figure = (id, h, caption, label) => {
      const canvas = el("canvas", {class: "pair-heatmap", id, "aria-label": label});
      drawLattice(canvas, h, size);
      Object.assign(canvas.dataset, {rows: String(h.rows), cols: String(h.cols), exact: String(h.exact), scale: String(result.scale)});
      canvas.addEventListener("pointermove", (e) => this.hover(heat, canvas, e));
      canvas.addEventListener("pointerleave", () => { d.readout.textContent = IDLE; });
      const box = el("figure", {class: "pair-panel"}, el("figcaption", {}, ...caption), canvas);
      box.style.width = `${Math.max(size[0], 160)}px`;
      return [box, canvas];
    };
    const figures = heat.map((h, k) => {
      const ref = pair.refs[String(h.expert)][result.leaf];
      const sampled = h.exact ? "every element" : `${h.rows} × ${h.cols} cells sampled`;
      const [box, canvas] = figure(`moe-pair-${"ab"[k]}`, h, [
        el("strong", {text: `expert ${h.expert}`}), " ",
        el("button", {type: "button", class: "link", title: "Open in the Tensor tab",
                      onclick: () => this.app.selectTensor(ref.tensor, {expert: ref.expert})}, ...breakable(h.tensor)),
        el("span", {class: "muted small", text: ` · ${h.dtype} · ${shapeText(h.shape)} · ${sampled}`})],
        `expert ${h.expert}, ${result.leaf}`);
      Object.assign(canvas.dataset, {expert: String(h.expert), tensor: h.tensor, request: JSON.stringify({...args, experts: [h.expert]})});
      return box;
    });
    if (result.difference) {
      const [a, b] = pair.experts;
      const [box] = figure("moe-pair-diff", unpack(result.difference, heat.length),
        [el("strong", {text: `expert ${b} − expert ${a}`}), el("span", {class: "muted small", text: " · cell by cell, same scale"})],
        `difference of expert ${b} and expert ${a}`);
      figures.push(box);
    }
    clear(d.panels).append(...figures);
    d.lo.textContent = `−${fmt(result.scale, 3)}`;
    d.hi.textContent = `+${fmt(result.scale, 3)}`;
    d.readout.textContent = IDLE;
    d.box.dataset.seq = String(Number(d.box.dataset.seq || 0) + 1);
  }

  hover(heat, canvas, event) {
    const rect = canvas.getBoundingClientRect();
    const {rows, cols, row_index: rowIndex, col_index: colIndex, exact: isExact} = heat[0];
    const i = Math.floor(((event.clientY - rect.top) / rect.height) * rows);
    const j = Math.floor(((event.clientX - rect.left) / rect.width) * cols);
    if (i < 0 || j < 0 || i >= rows || j >= cols) return;
    const show = (v) => (isExact ? exact(v) : fmt(v));
    const [a, b] = heat.map((h) => h.values[i * cols + j]);
    this.dom.readout.textContent = `row ${rowIndex[i]}, col ${colIndex[j]}: expert ${heat[0].expert} = ${show(a)}, `
      + `expert ${heat[1].expert} = ${show(b)}, difference ${fmt(b - a)}`;
  }
}
