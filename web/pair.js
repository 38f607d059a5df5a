// Two experts of one layer side by side: the same matrix of each (a picker chooses which) as
// heatmaps on one colour scale, so that equal weights look equal, and their difference.
// Pixels come from the worker (tensorloupe.moe.redundancy.expert_tensor -> grid -> colormap); for
// stacked experts the matrix is that expert's slice of the stacked tensor. The panes are drawn
// as comparepair.js's (heatpair.js).

import {LATTICE, drawColorbar} from "./canvas.js";
import {breakable, clear, el} from "./dom.js";
import {exact, fmt, shapeText} from "./format.js";
import {cellAt, pane, paneSize, scaleLabels, unpack} from "./heatpair.js";

const IDLE = "Point at any of the heatmaps to read both experts' values";

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
    const heat = result.panels.map((meta, k) => unpack(meta, buffers, k));
    const size = paneSize(d.box, result.panels.length + (result.difference ? 1 : 0), heat[0]);
    const figure = (id, h, caption, label) => {
      const [box, canvas] = pane({id, heat: h, size, label, caption, onMove: (c, e) => this.hover(heat, c, e),
                                  onLeave: () => { d.readout.textContent = IDLE; }});
      canvas.dataset.scale = String(result.scale);
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
      const [box] = figure("moe-pair-diff", unpack(result.difference, buffers, heat.length),
        [el("strong", {text: `expert ${b} − expert ${a}`}), el("span", {class: "muted small", text: " · cell by cell, same scale"})],
        `difference of expert ${b} and expert ${a}`);
      figures.push(box);
    }
    clear(d.panels).append(...figures);
    scaleLabels(d.lo, d.hi, result.scale);
    d.readout.textContent = IDLE;
    d.box.dataset.seq = String(Number(d.box.dataset.seq || 0) + 1);
  }

  hover(heat, canvas, event) {
    const {rows, cols, row_index: rowIndex, col_index: colIndex, exact: isExact} = heat[0];
    const cell = cellAt(canvas, event, rows, cols);
    if (!cell) return;
    const [i, j] = cell;
    const show = (v) => (isExact ? exact(v) : fmt(v));
    const [a, b] = heat.map((h) => h.values[i * cols + j]);
    this.dom.readout.textContent = `row ${rowIndex[i]}, col ${colIndex[j]}: expert ${heat[0].expert} = ${show(a)}, `
      + `expert ${heat[1].expert} = ${show(b)}, difference ${fmt(b - a)}`;
  }
}
