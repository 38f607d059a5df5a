// The Tensor tab (a view module, panels.js): the tensor's facts, sampled statistics (the CLI's
// numbers: the same `sample` call), exact statistics streamed with progress and cancel, the
// histogram (histogram.js) and the heatmap (heatmap.js).

import {clear, el} from "./dom.js";
import {bytes, fmt, grouped, num, percent, product, shapeText} from "./format.js";
import {Heatmap} from "./heatmap.js";
import {Histogram} from "./histogram.js";

const STAT_KEYS = [
  ["min", "min"], ["max", "max"], ["mean", "mean"], ["std", "std"],
  ["zeros", "near-zero", percent], ["nan", "NaN", grouped], ["posinf", "+Inf", grouped], ["neginf", "−Inf", grouped],
];

export const id = "tensor";
export const title = "Tensor";
let view = null;
let ctx = null;

export function mount(container, context) {
  ctx = context;
  view = new TensorView(ctx);
  container.append(view.element);
}

// A new checkpoint: nothing is selected until select() (the page selects its first matrix).
export function show() {
  view.setPalette(ctx.palette.rgba, ctx.palette.levels);
  view.clearAll();
}

export function select(tensor, {expert = null} = {}) {
  view.show(tensor, {expert});
}

export function relayout() {
  view.relayout();
}

class TensorView {
  constructor(app) {
    this.app = app;
    this.heatmap = new Heatmap(app);
    this.hist = new Histogram();
    const button = (id, cls, text, hidden = false) => el("button", {type: "button", class: cls, id, text, hidden});
    const d = this.dom = {
      empty: el("p", {class: "muted", id: "tensor-empty", text: "Select a tensor in the outline."}),
      name: el("h2", {id: "tensor-name", class: "mono"}),
      facts: el("div", {id: "tensor-facts", class: "chips"}),
      problem: el("div", {class: "problem", id: "tensor-problem", hidden: true}),
      stats: el("div", {class: "stats", id: "stats", "aria-label": "Sampled statistics"}),
      statsSub: el("div", {class: "stats-sub", id: "stats-sub"}),
      exactButton: button("exact-button", "button", "Exact stats"),
      exactProgress: el("progress", {id: "exact-progress", max: "1", value: "0", hidden: true}),
      exactNote: el("span", {id: "exact-note", class: "muted small"}),
      exactCancel: button("exact-cancel", "button subtle", "Cancel", true),
      exactStats: el("div", {class: "stats exact", id: "exact-stats", hidden: true, "aria-label": "Exact statistics"}),
      percentiles: this.hist.dom.percentiles,
    };
    d.values = el("div", {id: "tensor-values"},
      el("div", {class: "stats-block"}, d.stats, d.statsSub,
        el("div", {class: "exact-row"}, d.exactButton, d.exactProgress, d.exactNote, d.exactCancel),
        d.exactStats),
      el("div", {class: "viz"}, this.heatmap.element, this.hist.element));
    d.body = el("div", {id: "tensor-body", hidden: true},
      el("div", {class: "tensor-head"}, d.name, d.facts), d.problem, d.values);
    this.element = el("div", {}, d.empty, d.body);
    this.tensor = null;
    this.generation = 0;
    this.exactId = null;
    d.exactButton.addEventListener("click", () => this.runExact());
    d.exactCancel.addEventListener("click", () => this.cancelExact());
  }

  setPalette(palette, levels) {
    this.heatmap.setPalette(palette, levels);
    this.hist.setPalette(palette, levels);
  }

  clearAll() {
    this.generation += 1;
    this.cancelExact();
    this.tensor = null;
    this.heatmap.clear();
    this.dom.body.hidden = true;
    this.dom.empty.hidden = false;
  }

  // Show `tensor` (a model.js record); `expert` picks a slice of a stacked expert tensor along
  // axis 0.
  async show(tensor, {expert = null} = {}) {
    const generation = ++this.generation;
    this.cancelExact();
    const {name, dtype, shape, nbytes, offset, problem} = tensor;
    this.tensor = tensor;
    const d = this.dom;
    d.empty.hidden = true;
    d.body.hidden = false;
    d.name.textContent = name;
    clear(d.facts).append(
      el("span", {class: `dtype dtype-${dtype.toLowerCase()}`, text: dtype}),
      el("span", {class: "chip", title: "shape", text: shapeText(shape)}),
      el("span", {class: "chip", title: "elements", text: `${grouped(product(shape))} elements`}),
      el("span", {class: "chip", title: "bytes in the file", text: bytes(nbytes)}),
      el("span", {class: "chip offset", title: "absolute byte offset of the first element",
                  text: offset === null ? "@ …" : `@ ${grouped(offset)}`}));
    d.problem.hidden = !problem;
    d.problem.textContent = problem ? `The values of this tensor cannot be read: ${problem}` : "";
    d.values.hidden = Boolean(problem);
    d.exactStats.hidden = true;
    d.exactNote.textContent = `reads all ${bytes(nbytes)}`;
    d.exactButton.disabled = false;
    clear(d.stats).append(el("span", {class: "muted", text: "Sampling…"}));
    clear(d.statsSub);
    clear(d.percentiles);
    this.hist.show(null);
    if (problem) return this.heatmap.clear();
    // The statistics are asked for first: the worker answers in order, so the stats line does
    // not wait behind the heatmap's lattice.
    const stats = this.app.request("tensor", {name}, {label: `Sampling ${name}…`});
    this.heatmap.show(tensor, expert);
    try {
      const {result} = await stats;
      if (generation !== this.generation) return;
      // torch ZIP storages are positioned when first read: the offset arrives with the values.
      d.facts.querySelector(".chip.offset").textContent = `@ ${grouped(result.tensor.offset)}`;
      this.renderStats(result);
    } catch (error) {
      if (generation !== this.generation) return;
      clear(d.stats).append(el("span", {class: "error-text", text: error.message}));
    }
  }

  renderStats(result) {
    const d = this.dom;
    const s = result.sample.stats;
    this.fillStats(d.stats, s);
    const sample = result.sample;
    d.stats.dataset.samples = String(sample.samples);
    d.statsSub.textContent = sample.exhaustive
      ? `all ${grouped(sample.numel)} elements`
      : `${grouped(sample.samples)} of ${grouped(sample.numel)} elements sampled (${percent(sample.samples / sample.numel)}) in evenly spread windows`;
    clear(d.percentiles);
    const pct = Object.entries(s.percentiles || {});
    if (pct.length) {
      d.percentiles.append(el("table", {class: "kv compact"}, el("tbody", {},
        pct.map(([k, v]) => el("tr", {dataset: {key: k}}, el("th", {text: k}), el("td", {class: "mono", text: fmt(v)}))))));
    }
    this.hist.show(result.histogram);
    this.heatmap.setRobustScale(Math.max(Math.abs(num(s.percentiles?.p1 ?? 0)), Math.abs(num(s.percentiles?.p99 ?? 0))));
  }

  fillStats(container, s) {
    clear(container);
    for (const [key, label, format] of STAT_KEYS) {
      const value = s[key];
      const cls = ["stat"];
      if ((key === "nan" || key === "posinf" || key === "neginf") && value > 0) cls.push("alert");
      container.append(el("div", {class: cls.join(" "), dataset: {key, value: String(value)}},
        el("span", {class: "stat-label", text: label}),
        el("span", {class: "stat-value mono", text: (format || fmt)(value)})));
    }
    container.dataset.count = String(s.count);
  }

  // --- exact statistics ----------------------------------------------------------------------

  async runExact() {
    if (!this.tensor || this.exactId) return;
    const d = this.dom;
    const generation = this.generation;
    d.exactButton.disabled = true;
    d.exactProgress.hidden = false;
    d.exactProgress.value = 0;
    d.exactCancel.hidden = false;
    d.exactNote.textContent = "reading every element…";
    try {
      const {result} = await this.app.request("exact", {name: this.tensor.name}, {
        quiet: true,
        onId: (id) => { this.exactId = id; },
        onProgress: ({done, total}) => {
          d.exactProgress.value = total ? done / total : 1;
          d.exactNote.textContent = `${grouped(done)} of ${grouped(total)} elements`;
        },
      });
      if (generation !== this.generation) return;
      d.exactProgress.value = 1;
      d.exactNote.textContent = `exact, over all ${grouped(result.total)} elements`;
      this.fillStats(d.exactStats, result.stats);
      d.exactStats.hidden = false;
    } catch (error) {
      if (generation !== this.generation) return;
      d.exactNote.textContent = error.kind === "Cancelled" ? "cancelled" : error.message;
    } finally {
      this.exactId = null;
      if (generation === this.generation) {
        d.exactButton.disabled = false;
        d.exactCancel.hidden = true;
        d.exactProgress.hidden = true;
      }
    }
  }

  cancelExact() {
    if (this.exactId) this.app.cancel(this.exactId);
  }

  // The panel became visible or changed size.
  relayout() {
    this.heatmap.relayout();
    this.hist.draw();
  }
}
