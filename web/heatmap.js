// The heatmap: a lattice of a 2-D view of the tensor, drawn from pixels Python computes
// (tensorloupe.colormap), with zoom and pan that ask the worker for the visible region only, so
// zooming into a 40 GB tensor reads a tile's bytes. Once the region is no larger than the lattice
// every cell is one element and the readout under the pointer is that element's exact value.
// 3-D+ tensors get an axis picker: which two axes form the view, and the index along the others.

import {defaultView, renderAxisPicker, tensorIndex, viewShape} from "./axes.js";
import {LATTICE, bitmap, drawColorbar, hidpi} from "./canvas.js";
import {clear, el} from "./dom.js";
import {exact, fmt, grouped} from "./format.js";

const MAX_SIDE = 640;         // CSS pixels
const MAX_HEIGHT = 512;
const MIN_HEIGHT = 64;
const MIN_WIDTH = 160;
const MAX_CELL = 24;          // CSS pixels per element at most: tiny tensors stay small
const ZOOM_STEP = 1.6;
const IDLE = "Point at the heatmap to read values · scroll to zoom · drag to pan";

export class Heatmap {
  constructor(app) {
    this.app = app;
    const button = (id, cls, text, title) => el("button", {type: "button", class: cls, id, title, "aria-label": title, text});
    const d = this.dom = {
      axis: el("div", {class: "axis-picker", id: "axis-picker", hidden: true}),
      zoomIn: button("zoom-in", "icon", "+", "Zoom in (+)"),
      zoomOut: button("zoom-out", "icon", "−", "Zoom out (−)"),
      zoomReset: button("zoom-reset", "button subtle", "Fit", "Show the whole tensor (0)"),
      canvas: el("canvas", {id: "heatmap", tabindex: "0", "aria-label": "Heatmap of the tensor's values: scroll to zoom, drag to pan"}),
      region: el("div", {class: "region", id: "region-label"}),
      readout: el("div", {class: "readout mono", id: "readout", text: IDLE}),
      cbLo: el("span", {id: "cb-lo", class: "mono small"}),
      colorbar: el("canvas", {id: "colorbar"}),
      cbHi: el("span", {id: "cb-hi", class: "mono small"}),
      scaleMode: el("select", {id: "scale-mode", "aria-label": "Colour range"},
        el("option", {value: "max", text: "range: max |value| in view"}),
        el("option", {value: "p99", text: "range: 1st–99th percentile"})),
      swatches: ["nan", "posinf", "neginf"].map((key) => el("span", {class: "swatch", id: `sw-${key}`})),
    };
    d.wrap = el("div", {class: "heatmap-wrap", id: "heatmap-wrap"}, d.canvas);
    const [nan, posinf, neginf] = d.swatches;
    this.element = el("div", {class: "heatmap-box"},
      el("div", {class: "toolbar"}, el("span", {class: "toolbar-title", text: "Heatmap"}), d.axis,
        el("span", {class: "spacer"}), d.zoomOut, d.zoomIn, d.zoomReset),
      // The colour bar above the picture: a tall tensor's heatmap would push it below the fold.
      el("div", {class: "colorbar-row"}, d.cbLo, d.colorbar, d.cbHi, d.scaleMode,
        el("span", {class: "legend"}, nan, "NaN ", posinf, "+Inf ", neginf, "−Inf")),
      d.wrap, d.region, d.readout);
    this.css = null;           // the canvas's size in CSS pixels
    this.tensor = null;
    this.generation = 0;
    this.view = null;
    this.heat = null;          // the last lattice drawn: {meta, args, image, values}
    this.inflight = false;
    this.again = false;
    this.refine = false;       // the lattice drawn is a first look: the full one is asked next
    this.robustScale = null;
    this.drawSeq = 0;
    this.bind();
  }

  // The colour bar and the swatches of the special values (NaN, ±Inf follow the gradient).
  setPalette(palette, levels) {
    drawColorbar(this.dom.colorbar, palette, levels);
    this.dom.swatches.forEach((swatch, k) => {
      const p = palette.subarray((levels + k) * 4, (levels + k) * 4 + 3);
      swatch.style.background = `rgb(${p[0]}, ${p[1]}, ${p[2]})`;
    });
  }

  bind() {
    this.dom.zoomIn.addEventListener("click", () => this.zoomAt(0.5, 0.5, 1 / ZOOM_STEP));
    this.dom.zoomOut.addEventListener("click", () => this.zoomAt(0.5, 0.5, ZOOM_STEP));
    this.dom.zoomReset.addEventListener("click", () => this.resetZoom());
    this.dom.scaleMode.addEventListener("change", () => this.requestHeatmap());
    const c = this.dom.canvas;
    c.addEventListener("wheel", (e) => {
      e.preventDefault();
      const [fx, fy] = this.fraction(e);
      // At most one step per wheel event: a mouse notch (deltaY ~100, or several hundred in some
      // browsers) is one step, a trackpad's small deltas a fraction of one. Scaling by the delta
      // made six notches go from the whole tensor to 2x2 elements.
      this.zoomAt(fx, fy, Math.pow(ZOOM_STEP, Math.sign(e.deltaY) * Math.min(1, Math.abs(e.deltaY) / 100)));
    }, {passive: false});
    c.addEventListener("dblclick", (e) => {
      const [fx, fy] = this.fraction(e);
      this.zoomAt(fx, fy, e.shiftKey ? 2 : 0.5);
    });
    c.addEventListener("pointerdown", (e) => {
      if (!this.view || e.button !== 0) return;
      c.setPointerCapture(e.pointerId);
      this.drag = {x: e.clientX, y: e.clientY, region: [...this.view.region]};
    });
    c.addEventListener("pointermove", (e) => {
      this.pointer = {clientX: e.clientX, clientY: e.clientY};
      return this.drag ? this.pan(e) : this.readout(e);
    });
    const stop = () => { this.drag = null; };
    c.addEventListener("pointerup", stop);
    c.addEventListener("pointercancel", stop);
    c.addEventListener("pointerleave", () => {
      this.pointer = null;
      if (!this.drag) this.readoutIdle();
    });
    c.addEventListener("keydown", (e) => this.key(e));
  }

  // Show `tensor` ({name, shape, ...}); `expert` picks a slice of a stacked expert tensor (axis 0).
  // `linked`: a view named by the page's address ({plane, index, region}), applied if it fits.
  show(tensor, expert = null, linked = null) {
    this.generation += 1;
    this.tensor = tensor;
    this.robustScale = null;
    this.setupView(tensor.shape, expert);
    if (linked) this.applyView(linked);
    this.requestHeatmap();
  }

  applyView({plane = null, index = {}, region = null}) {
    const shape = this.tensor.shape;
    const axis = (a) => Number.isInteger(a) && a >= 0 && a < shape.length;
    if (plane && !(plane.length === 2 && plane.every(axis) && plane[0] !== plane[1])) return;
    const kept = {};
    for (const [a, i] of Object.entries(index || {})) {
      if (axis(Number(a)) && Number.isInteger(i) && i >= 0 && i < shape[Number(a)]) kept[a] = i;
    }
    Object.assign(this.view, plane ? {plane, index: kept} : {plane: null, index: {}});
    this.renderAxisPicker();
    this.resetZoom({request: false});
    const [height, width] = this.view.viewShape;
    if (region && region.length === 4) {
      const [r0, r1, c0, c1] = region.map(Number);
      if (0 <= r0 && r0 < r1 && r1 <= height && 0 <= c0 && c0 < c1 && c1 <= width) this.view.region = [r0, r1, c0, c1];
    }
  }

  clear() {
    this.generation += 1;
    this.tensor = null;
    this.view = null;
    this.heat = null;
  }

  // The sample's 1st/99th percentile magnitude, for the "percentile" colour range.
  setRobustScale(scale) {
    this.robustScale = scale || null;
    if (this.dom.scaleMode.value === "p99") this.requestHeatmap();
  }

  // --- view ----------------------------------------------------------------------------------

  setupView(shape, expert) {
    this.view = {...defaultView(shape, expert), region: null, viewShape: null};
    this.renderAxisPicker();
    this.resetZoom({request: false});
  }

  renderAxisPicker() {
    renderAxisPicker(this.dom.axis, this.view, {onView: () => this.resetZoom(), onIndex: () => this.requestHeatmap()});
  }

  // Show the whole view again.
  resetZoom({request = true} = {}) {
    if (!this.view) return;
    const [height, width] = viewShape(this.view);
    this.view.viewShape = [height, width];
    this.view.region = [0, height, 0, width];
    this.heat = null;
    this.layout();
    if (request) this.requestHeatmap();
  }

  // Size the canvas for the view. An element is drawn as wide as tall wherever the panel
  // allows (the one scale that fits both the width and the height); where every element is a
  // cell, cells are whole pixels (crisp); a sampled lattice takes the exact size, cells of
  // fractional pixels. A view too thin for one scale (64 columns of 4,096 rows) is widened to
  // MIN_WIDTH and said to be stretched (draw). Returns whether anything changed.
  layout() {
    const available = this.dom.wrap.clientWidth;
    if (!this.view || !available) return false;   // hidden tab: done when it is shown
    const [height, width] = this.view.viewShape;
    const side = Math.max(200, Math.min(MAX_SIDE, available));
    const perElement = Math.min(side / width, MAX_HEIGHT / height);   // CSS px, both ways
    const axis = (n, least) => {        // [cells, CSS px] along an axis of n elements
      const px = Math.max(perElement * n, least);
      if (n > LATTICE) return [LATTICE, Math.max(LATTICE, Math.round(px))];   // a cell at least a pixel
      return [n, n * Math.max(Math.ceil(least / n), Math.max(1, Math.min(MAX_CELL, Math.floor(px / n))))];
    };
    const [cols, cssW] = axis(width, Math.min(MIN_WIDTH, width * MAX_CELL));
    const [rows, cssH] = axis(height, Math.min(MIN_HEIGHT, height * MAX_CELL));
    const changed = String(this.css) !== String([cssW, cssH]) || String(this.view.lattice) !== String([rows, cols]);
    hidpi(this.dom.canvas, cssW, cssH);
    this.css = [cssW, cssH];
    this.view.lattice = [rows, cols];
    this.draw();
    return changed;
  }

  // The panel became visible or changed size.
  relayout() {
    if (this.view && this.layout() && !this.heat) this.requestHeatmap();
  }

  integerRegion() {
    const [r0, r1, c0, c1] = this.view.region;
    const [height, width] = this.view.viewShape;
    const ir0 = Math.max(0, Math.floor(r0 + 1e-9));
    const ic0 = Math.max(0, Math.floor(c0 + 1e-9));
    const ir1 = Math.min(height, Math.max(ir0 + 1, Math.ceil(r1 - 1e-9)));
    const ic1 = Math.min(width, Math.max(ic0 + 1, Math.ceil(c1 - 1e-9)));
    return [ir0, ir1, ic0, ic1];
  }

  requestHeatmap() {
    if (!this.view || !this.view.lattice) return;
    if (this.inflight) {
      this.again = true;
      return;
    }
    const generation = this.generation;
    const [rows, cols] = this.view.lattice;
    const args = {name: this.tensor.name, rows, cols, region: this.integerRegion(),
                  plane: this.view.plane, index: this.view.index};
    this.app.viewChanged?.({plane: args.plane, index: args.index, region: args.region});   // the address
    // Colour range: the largest |value| in view (default), or the sample's 1st/99th percentile
    // so that a few outliers do not wash out the rest.
    if (this.dom.scaleMode.value === "p99" && this.robustScale) args.scale = this.robustScale;
    // Nothing drawn for this view yet: ask for a first look. The worker makes one where the
    // lattice's rows are many separate reads (every 8th row and column, labelled), and the full
    // lattice is asked for as soon as it is drawn; the two read each byte once (staged.py).
    if (!this.heat) args.first_look = true;
    this.inflight = true;
    this.dom.canvas.dataset.loading = "true";
    this.app.request("heatmap", args, {label: "Drawing the heatmap…"}).then(({result, buffers}) => {
      if (generation !== this.generation) return;
      const [pixels, cells] = buffers;
      const image = bitmap(pixels, result.rows, result.cols);
      this.heat = {meta: result, args, image, values: new Float64Array(cells.buffer, cells.byteOffset, cells.byteLength / 8)};
      this.refine = Boolean(result.first_look);
      // the bytes the whole lattice reads, as the worker planned them (bench/strided_reads.py)
      if (result.cost_bytes !== undefined) this.dom.canvas.dataset.costBytes = String(result.cost_bytes);
      else delete this.dom.canvas.dataset.costBytes;
      this.draw();
      // A zoom by wheel leaves the pointer still: read the new tile under it, not the old one.
      if (this.pointer && !this.drag) this.readout(this.pointer);
    }).catch((error) => {
      if (generation !== this.generation) return;
      this.dom.readout.textContent = error.message;
    }).finally(() => {
      this.inflight = false;
      if (this.again || this.refine) {
        this.again = this.refine = false;
        this.requestHeatmap();
      } else {
        this.dom.canvas.dataset.loading = "false";
      }
    });
  }

  draw() {
    const canvas = this.dom.canvas;
    if (!this.css) return;             // not laid out yet (a hidden tab)
    const [cssW, cssH] = this.css;
    const ctx = canvas.getContext("2d");    // drawing in CSS pixels (canvas.js hidpi)
    ctx.imageSmoothingEnabled = false;
    ctx.fillStyle = "#e9ebf0";
    ctx.fillRect(0, 0, cssW, cssH);
    if (!this.heat || !this.view) return;
    const [r0, r1, c0, c1] = this.view.region;
    const [ir0, ir1, ic0, ic1] = this.heat.meta.region;
    const sx = cssW / (c1 - c0);
    const sy = cssH / (r1 - r0);
    // While a new tile is on its way the last one is drawn where it belongs: instant feedback.
    ctx.drawImage(this.heat.image, (ic0 - c0) * sx, (ir0 - r0) * sy, (ic1 - ic0) * sx, (ir1 - ir0) * sy);
    const m = this.heat.meta;
    Object.assign(canvas.dataset, {rows: String(m.rows), cols: String(m.cols), exact: String(m.exact),
      firstLook: String(Boolean(m.first_look)),
      scale: String(m.scale), region: JSON.stringify(m.region), request: JSON.stringify(this.heat.args),
      view: JSON.stringify(this.view.region),
      seq: String(++this.drawSeq)});
    this.dom.cbLo.textContent = `−${fmt(m.scale, 3)}`;
    this.dom.cbHi.textContent = `+${fmt(m.scale, 3)}`;
    const [height, width] = this.view.viewShape;
    const sampled = m.exact ? "every element" : `1 cell ≈ ${fmt((ir1 - ir0) / m.rows, 3)} × ${fmt((ic1 - ic0) / m.cols, 3)} elements`;
    const look = m.first_look ? " · a first look: the full lattice follows" : "";
    // An element is drawn sx wide and sy tall: a long thin tensor fitted to the panel is
    // stretched, which is said rather than shown as if to scale.
    const stretch = sy / sx;
    const scaleNote = stretch > 1.1 || stretch < 1 / 1.1
      ? ` · not to scale: elements drawn ${fmt(stretch > 1 ? stretch : 1 / stretch, 3)}× ${stretch > 1 ? "taller than wide" : "wider than tall"}`
      : "";
    Object.assign(canvas.dataset, {stretch: String(stretch)});
    this.dom.region.textContent = `rows ${grouped(ir0)}–${grouped(ir1 - 1)} of ${grouped(height)} · cols ${grouped(ic0)}–${grouped(ic1 - 1)} of ${grouped(width)} · ${m.rows}×${m.cols} cells, ${sampled}${scaleNote}${look}`;
  }

  // --- zoom, pan, readout --------------------------------------------------------------------

  fraction(event) {
    const rect = this.dom.canvas.getBoundingClientRect();
    return [Math.min(1, Math.max(0, (event.clientX - rect.left) / rect.width)),
            Math.min(1, Math.max(0, (event.clientY - rect.top) / rect.height))];
  }

  zoomAt(fx, fy, factor) {
    if (!this.view) return;
    const [r0, r1, c0, c1] = this.view.region;
    const [height, width] = this.view.viewShape;
    const h = Math.min(height, Math.max(Math.min(height, 1), (r1 - r0) * factor));
    const w = Math.min(width, Math.max(Math.min(width, 1), (c1 - c0) * factor));
    const pr = r0 + fy * (r1 - r0);
    const pc = c0 + fx * (c1 - c0);
    const nr0 = Math.min(height - h, Math.max(0, pr - fy * h));
    const nc0 = Math.min(width - w, Math.max(0, pc - fx * w));
    this.view.region = [nr0, nr0 + h, nc0, nc0 + w];
    this.draw();
    this.requestHeatmap();
  }

  pan(event) {
    const rect = this.dom.canvas.getBoundingClientRect();
    const [r0, r1, c0, c1] = this.drag.region;
    const [height, width] = this.view.viewShape;
    const dr = ((event.clientY - this.drag.y) / rect.height) * (r1 - r0);
    const dc = ((event.clientX - this.drag.x) / rect.width) * (c1 - c0);
    const nr0 = Math.min(height - (r1 - r0), Math.max(0, r0 - dr));
    const nc0 = Math.min(width - (c1 - c0), Math.max(0, c0 - dc));
    this.view.region = [nr0, nr0 + (r1 - r0), nc0, nc0 + (c1 - c0)];
    this.draw();
    this.requestHeatmap();
  }

  key(event) {
    const moves = {
      "+": () => this.zoomAt(0.5, 0.5, 1 / ZOOM_STEP), "=": () => this.zoomAt(0.5, 0.5, 1 / ZOOM_STEP),
      "-": () => this.zoomAt(0.5, 0.5, ZOOM_STEP), "0": () => this.resetZoom(),
      ArrowLeft: () => this.shift(0, -0.1), ArrowRight: () => this.shift(0, 0.1),
      ArrowUp: () => this.shift(-0.1, 0), ArrowDown: () => this.shift(0.1, 0),
    };
    if (moves[event.key]) {
      event.preventDefault();
      moves[event.key]();
    }
  }

  shift(fr, fc) {
    const [r0, r1, c0, c1] = this.view.region;
    const [height, width] = this.view.viewShape;
    const nr0 = Math.min(height - (r1 - r0), Math.max(0, r0 + fr * (r1 - r0)));
    const nc0 = Math.min(width - (c1 - c0), Math.max(0, c0 + fc * (c1 - c0)));
    this.view.region = [nr0, nr0 + (r1 - r0), nc0, nc0 + (c1 - c0)];
    this.draw();
    this.requestHeatmap();
  }

  readout(event) {
    const heat = this.heat;
    if (!heat || !this.view) return;
    const [fx, fy] = this.fraction(event);
    const [r0, r1, c0, c1] = this.view.region;
    const [ir0, ir1, ic0, ic1] = heat.meta.region;
    const vr = r0 + fy * (r1 - r0);
    const vc = c0 + fx * (c1 - c0);
    const i = Math.floor(((vr - ir0) / (ir1 - ir0)) * heat.meta.rows);
    const j = Math.floor(((vc - ic0) / (ic1 - ic0)) * heat.meta.cols);
    if (i < 0 || j < 0 || i >= heat.meta.rows || j >= heat.meta.cols) return this.readoutIdle();
    const row = heat.meta.row_index[i];
    const col = heat.meta.col_index[j];
    const [vr0, vr1, vc0, vc1] = this.integerRegion();
    if (String(heat.meta.region) !== String([vr0, vr1, vc0, vc1]) || row < vr0 || row >= vr1 || col < vc0 || col >= vc1) {
      // The tile drawn is the last view's (the new one is on its way): its cells may lie outside
      // this view and be sampled where the new tile is exact. Say so instead of reading it.
      const out = clear(this.dom.readout);
      delete out.dataset.value;
      out.dataset.pending = "true";
      out.append(el("span", {class: "muted", text: "reading this view…"}));
      return;
    }
    const value = heat.values[i * heat.meta.cols + j];
    const where = `[${tensorIndex(this.view, row, col).join(", ")}]`;
    const out = clear(this.dom.readout);
    delete out.dataset.pending;
    Object.assign(out.dataset, {row: String(row), col: String(col), value: String(value), exact: String(heat.meta.exact)});
    if (heat.meta.exact) {
      out.append(`row ${row}, col ${col}  ${where} = `, el("strong", {class: "value", text: exact(value)}),
                 el("span", {class: "muted", text: "  exact element"}));
    } else {
      out.append(`row ${row}, col ${col}  ${where} ≈ `, el("strong", {class: "value", text: fmt(value)}),
                 el("span", {class: "muted", text: "  sampled cell: zoom in for every element"}));
    }
  }

  readoutIdle() {
    const out = clear(this.dom.readout);
    delete out.dataset.value;
    out.textContent = IDLE;
  }
}
