// One compared pair of the Compare tab: A, B and A−B heatmaps of the same tile (the same
// positions of both files, after the name map's row permutation and value shift) on one
// symmetric colour scale, as the experts' side-by-side view shows two experts, and both
// histograms overlaid on the same bins. Pixels, values and bins come from the worker
// (tensorloupe.compare.views through web/compare_ops.py); this module only draws them (the
// heatmap panes as pair.js's: heatpair.js).

import {LATTICE, drawColorbar, hidpi} from "./canvas.js";
import {clear, el} from "./dom.js";
import {exact, fmt, grouped, num, shapeText} from "./format.js";
import {cellAt, pane, paneSize, scaleLabels, unpack} from "./heatpair.js";

const HIST_HEIGHT = 140;
const IDLE = "Point at any of the heatmaps to read A, B and A−B at that element";
export const COLOURS = {a: "#4e79a7", b: "#f28e2b"};
const PANELS = [
  {key: "a", id: "compare-a", title: "A"},
  {key: "b", id: "compare-b", title: "B"},
  {key: "diff", id: "compare-diff", title: "A − B"},
];

export class ComparePair {
  constructor(app) {
    this.app = app;            // the page's ctx (panels.js)
    this.generation = 0;
    this.heat = null;
    this.shown = null;         // [row, samples] on show
    const d = this.dom = {
      title: el("div", {class: "pair-title", id: "compare-pair-title"}),
      notes: el("div", {class: "small muted", id: "compare-pair-notes"}),
      panels: el("div", {class: "pair-panels"}),
      bar: el("canvas", {class: "colorbar", id: "compare-colorbar"}),
      lo: el("span", {class: "mono small", id: "compare-cb-lo"}),
      hi: el("span", {class: "mono small", id: "compare-cb-hi"}),
      readout: el("div", {class: "readout mono small", id: "compare-readout", text: IDLE}),
      own: el("input", {type: "checkbox", id: "compare-diff-own"}),
      scaleNote: el("span", {class: "muted small", id: "compare-scale-note"}),
      hist: el("canvas", {class: "compare-histogram", id: "compare-histogram"}),
      histLo: el("span", {class: "mono small"}),
      histHi: el("span", {class: "mono small"}),
      histNote: el("span", {class: "small muted", id: "compare-histogram-note"}),
    };
    d.box = el("section", {class: "pair compare-pair", id: "compare-pair", hidden: true},
      el("div", {class: "pair-head"}, d.title, el("span", {class: "spacer"}),
        el("button", {type: "button", class: "icon", "aria-label": "Close", text: "×", onclick: () => this.close()})),
      d.notes, d.panels,
      el("div", {class: "colorbar-row"}, d.lo, d.bar, d.hi, d.scaleNote,
        el("label", {class: "toggle"}, d.own, " A − B on its own scale")),
      d.readout,
      el("div", {class: "compare-hist-head small"},
        el("strong", {text: "Histograms"}), " ",
        el("span", {class: "key"}, el("span", {class: "swatch-a"}), "A"), " ",
        el("span", {class: "key"}, el("span", {class: "swatch-b"}), "B"), " ", d.histNote),
      d.hist, el("div", {class: "hist-axis mono small"}, d.histLo, d.histHi));
    d.own.addEventListener("change", () => { if (this.shown) this.show(...this.shown); });
  }

  element() {
    return this.dom.box;
  }

  setPalette(palette, levels) {
    drawColorbar(this.dom.bar, palette, levels);
  }

  close() {
    this.generation += 1;
    this.shown = null;
    this.dom.box.hidden = true;
    delete this.dom.box.dataset.name;
  }

  // `row`: one of diff --json's "tensors" records (both sides present, same shape).
  async show(row, samples) {
    const generation = ++this.generation;
    this.shown = [row, samples];
    const d = this.dom;
    d.box.hidden = false;
    d.box.dataset.loading = "true";
    d.box.dataset.name = row.name;
    d.title.textContent = row.name;
    d.notes.textContent = `A: ${row.a} · ${row.a_dtype} · ${shapeText(row.a_shape)} — B: ${row.b} · ${row.b_dtype} · `
      + `${shapeText(row.b_shape)}${row.notes.length ? ` · ${row.notes.join("; ")}` : ""}`;
    const args = {name: row.name, rows: LATTICE, cols: LATTICE, samples, diff_scale: d.own.checked ? "own" : "shared"};
    try {
      const {result, buffers} = await this.app.request("compare_view", args, {label: "Drawing A, B and A − B…"});
      if (generation !== this.generation) return;
      this.draw(result, buffers);
    } catch (error) {
      if (generation !== this.generation) return;
      clear(d.panels);
      d.readout.textContent = error.message;
    } finally {
      if (generation === this.generation) d.box.dataset.loading = "false";
    }
  }

  draw(result, buffers) {
    const d = this.dom;
    const heat = PANELS.map(({key}, k) => ({...unpack(result.panels[key], buffers, k), key}));
    this.heat = heat;
    const size = paneSize(d.box, PANELS.length, heat[0]);
    const sampled = heat[0].exact ? "every element" : `${heat[0].rows} × ${heat[0].cols} cells sampled`;
    const figures = PANELS.map((panel, k) => {
      const h = heat[k];
      const own = panel.key === "diff" && num(h.scale) !== num(result.scale) ? ` · its own scale ±${fmt(h.scale, 3)}` : "";
      const name = panel.key === "a" ? result.row.a : panel.key === "b" ? result.row.b : `cell by cell${own}`;
      const [box, canvas] = pane({id: panel.id, heat: h, size, label: `${panel.title} of ${result.name}`,
        caption: [el("strong", {text: panel.title}), el("span", {class: "muted small", text: ` · ${name} · ${sampled}`})],
        onMove: (c, e) => this.hover(c, e), onLeave: () => { d.readout.textContent = IDLE; }});
      Object.assign(canvas.dataset, {scale: String(h.scale), css: JSON.stringify(size)});
      return box;
    });
    clear(d.panels).append(...figures);
    scaleLabels(d.lo, d.hi, result.scale);
    d.scaleNote.textContent = d.own.checked
      ? "A and B on one scale; A − B on its own, stated above it"
      : "one colour scale for all three: the largest |value| of A, B and A − B";
    d.readout.textContent = IDLE;
    this.drawHistograms(result.histograms);
    d.box.dataset.seq = String(Number(d.box.dataset.seq || 0) + 1);
  }

  // Both histograms on the same bins: A as filled bars, B as a step line over them.
  drawHistograms({a, b}) {
    const d = this.dom;
    const canvas = d.hist;
    const width = Math.max(240, Math.min(900, d.box.clientWidth || 600));
    const ctx = hidpi(canvas, width, HIST_HEIGHT);
    const bins = a.counts.length;
    const top = Math.max(...a.counts, ...b.counts) || 1;
    const w = width / bins;
    const y = (c) => HIST_HEIGHT - (c / top) * (HIST_HEIGHT - 4);
    ctx.fillStyle = "rgba(78, 121, 167, 0.45)";
    a.counts.forEach((c, i) => { if (c) ctx.fillRect(i * w, y(c), Math.max(1, w - 0.5), HIST_HEIGHT - y(c)); });
    ctx.strokeStyle = COLOURS.b;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    b.counts.forEach((c, i) => {
      if (i === 0) ctx.moveTo(0, y(c));
      else ctx.lineTo(i * w, y(c));
      ctx.lineTo((i + 1) * w, y(c));
    });
    ctx.stroke();
    const edges = a.edges.map(num);
    d.histLo.textContent = fmt(edges[0], 4);
    d.histHi.textContent = fmt(edges[edges.length - 1], 4);
    const total = (counts) => counts.reduce((s, c) => s + c, 0);
    d.histNote.textContent = `· ${bins} bins from ${fmt(edges[0], 4)} to ${fmt(edges[edges.length - 1], 4)}, `
      + `${grouped(total(a.counts))} values of each, at the same positions`;
    Object.assign(canvas.dataset, {bins: String(bins), a: JSON.stringify(a.counts), b: JSON.stringify(b.counts),
                                   edges: JSON.stringify(a.edges)});
  }

  // The readout names the element (view row and column) and the three values there; its dataset
  // carries them exactly (the shortest text of each double).
  hover(canvas, event) {
    if (!this.heat) return;
    const [a, b, diff] = this.heat;
    const {rows, cols, row_index: rowIndex, col_index: colIndex} = a;
    const cell = cellAt(canvas, event, rows, cols);
    if (!cell) return;
    const [i, j] = cell;
    const at = (h) => h.values[i * cols + j];
    const show = (v) => (a.exact ? exact(v) : fmt(v));
    const r = this.dom.readout;
    r.textContent = `row ${rowIndex[i]}, col ${colIndex[j]}: A = ${show(at(a))}, B = ${show(at(b))}, A − B = ${fmt(at(diff))}`;
    Object.assign(r.dataset, {row: String(rowIndex[i]), col: String(colIndex[j]),
                              a: String(at(a)), b: String(at(b)), diff: String(at(diff))});
  }
}
