// The Tensor tab (a view module, panels.js): the tensor's facts, sampled statistics (the CLI's
// numbers: the same `sample` call), exact statistics streamed with progress and cancel, the
// histogram (histogram.js) and the heatmap (heatmap.js).

import {clear, download, el} from "./dom.js";
import {bytes, bytesExact, fmt, grouped, num, percent, product, shapeText} from "./format.js";
import {Heatmap} from "./heatmap.js";
import {Histogram} from "./histogram.js";

const STAT_KEYS = [
  ["min", "min"], ["max", "max"], ["mean", "mean"], ["std", "std"],
  ["zeros", "near-zero", percent], ["nan", "NaN", grouped], ["posinf", "+Inf", grouped], ["neginf", "−Inf", grouped],
];

// A sampled min or max is a bound of the tensor's extreme, said on its label.
const BOUNDS = {min: "≤", max: "≥"};
const BOUND_TITLES = {min: "the smallest sampled value: the tensor's minimum is at most this (exact statistics find it)",
                      max: "the largest sampled value: the tensor's maximum is at least this (exact statistics find it)"};

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
export function show(model) {
  view.setPalette(ctx.palette.rgba, ctx.palette.levels);
  view.clearAll();
  // A file without tensors (a vocab-only GGUF: tokenizer and metadata) says so here.
  const gguf = model?.format === "gguf";
  view.dom.empty.textContent = model && !model.tensors.length
    ? `${model.file} holds no tensors${gguf ? ": a vocab-only GGUF (tokenizer and metadata only; see Summary)" : " (see Summary for what it holds)"}.`
    : "Select a tensor in the outline.";
}

export function select(tensor, {expert = null, heatmap = null} = {}) {
  view.show(tensor, {expert, heatmap});
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
      // A quantised weight's values are computed from its packed parts (quant/logical.py).
      dequantised: el("div", {class: "stats-sub", id: "stats-dequantised", hidden: true}),
      exactButton: button("exact-button", "button", "Exact stats"),
      exactProgress: el("progress", {id: "exact-progress", max: "1", value: "0", hidden: true}),
      exactNote: el("span", {id: "exact-note", class: "muted small"}),
      exactCancel: button("exact-cancel", "button subtle", "Cancel", true),
      exactStats: el("div", {class: "stats exact", id: "exact-stats", hidden: true, "aria-label": "Exact statistics"}),
      percentiles: this.hist.dom.percentiles,
      copyName: button("copy-name", "button subtle", "Copy name"),
      saveNpy: button("save-npy", "button subtle", "Save .npy"),
      saveTile: button("save-tile", "button subtle", "Save visible tile .npy"),
      toolNote: el("span", {id: "tensor-tool-note", class: "muted small", role: "status"}),
    };
    d.tools = el("div", {class: "tensor-tools"}, d.copyName, d.saveNpy, d.saveTile, d.toolNote);
    d.values = el("div", {id: "tensor-values"},
      el("div", {class: "stats-block"}, d.stats, d.statsSub, d.dequantised,
        el("div", {class: "exact-row"}, d.exactButton, d.exactProgress, d.exactNote, d.exactCancel),
        d.exactStats),
      el("div", {class: "viz"}, this.heatmap.element, this.hist.element));
    d.body = el("div", {id: "tensor-body", hidden: true},
      el("div", {class: "tensor-head"}, d.name, d.facts), d.tools, d.problem, d.values);
    this.element = el("div", {}, d.empty, d.body);
    this.tensor = null;
    this.generation = 0;
    this.exactRun = null;
    d.exactButton.addEventListener("click", () => this.runExact());
    d.copyName.addEventListener("click", () => this.copyName());
    d.saveNpy.addEventListener("click", () => this.saveNpy(false));
    d.saveTile.addEventListener("click", () => this.saveNpy(true));
    d.exactCancel.addEventListener("click", () => this.cancelExact());
  }

  setPalette(palette, levels) {
    this.heatmap.setPalette(palette, levels);
    this.hist.setPalette(palette, levels);
  }

  clearAll() {
    this.generation += 1;
    this.resetExact();
    this.tensor = null;
    this.heatmap.clear();
    this.dom.body.hidden = true;
    this.dom.empty.hidden = false;
  }

  // Show `tensor` (a model.js record); `expert` picks a slice of a stacked expert tensor along
  // axis 0.
  async show(tensor, {expert = null, heatmap = null} = {}) {
    const generation = ++this.generation;
    this.resetExact();
    const {name, dtype, shape, nbytes, offset, problem} = tensor;
    this.tensor = tensor;
    const d = this.dom;
    d.empty.hidden = true;
    d.body.hidden = false;
    d.name.textContent = name;
    clear(d.facts).append(...[
      el("span", {class: `dtype dtype-${dtype.toLowerCase()}`, text: dtype}),
      el("span", {class: "chip", title: "shape", text: shapeText(shape)}),
      el("span", {class: "chip", title: "elements", text: `${grouped(product(shape))} elements`}),
      el("span", {class: "chip", title: "bytes in the file", text: bytesExact(nbytes)}),
      // One file of a set (shards, split GGUF): which one holds this tensor.
      tensor.file && this.app.modelFile && tensor.file !== this.app.modelFile()
        ? el("span", {class: "chip file", id: "tensor-file", title: "the file that holds this tensor", text: `in ${tensor.file}`}) : null,
      // A view whose storage is not row-major (a transposed torch tensor, a Fortran .npy): its
      // strides; sampled views read it in its storage's order (sampler/layout.py).
      tensor.strides ? el("span", {class: "chip strides", id: "tensor-strides",
                                   title: "element strides: the storage is not in row-major order; samples are read in the storage's order",
                                   text: `strides ${tensor.strides.join(", ")} (non-contiguous)`}) : null,
      el("span", {class: "chip offset", title: "absolute byte offset of the first element",
                  text: offset === null ? "at byte …" : `at byte ${grouped(offset)}`}),
    ].filter(Boolean));
    d.toolNote.textContent = "";
    delete d.toolNote.dataset.file;
    d.saveNpy.hidden = d.saveTile.hidden = Boolean(problem);
    d.problem.hidden = !problem;
    d.problem.textContent = problem ? `The values of this tensor cannot be read: ${problem}` : "";
    d.values.hidden = Boolean(problem);
    d.exactStats.hidden = true;
    d.exactNote.textContent = `reads all ${bytesExact(nbytes)}`;
    d.exactButton.disabled = false;
    clear(d.stats).append(el("span", {class: "muted", text: "Sampling…"}));
    clear(d.statsSub);
    d.dequantised.hidden = true;
    clear(d.percentiles);
    this.hist.show(null);
    if (problem) return this.heatmap.clear();
    // The statistics are asked for first: the worker answers in order, so the stats line does
    // not wait behind the heatmap's lattice. A large tensor's first answer is a first look (a
    // part of the sample's windows, labelled as such); the whole sample is asked for when it
    // arrives, so it comes after the heatmap's own first look and replaces the first look here.
    const first = this.app.request("tensor", {name, first_look: true}, {label: `Sampling ${name}…`});
    this.heatmap.show(tensor, expert, heatmap);
    try {
      let {result} = await first;
      if (generation !== this.generation) return;
      // torch ZIP storages are positioned when first read: the offset arrives with the values.
      d.facts.querySelector(".chip.offset").textContent = `at byte ${grouped(result.tensor.offset)}`;
      this.renderStats(result);
      if (!result.sample?.first_look) return;
      ({result} = await this.app.request("tensor", {name}, {label: `Sampling ${name}…`}));
      if (generation !== this.generation) return;
      this.renderStats(result);
    } catch (error) {
      if (generation !== this.generation) return;
      clear(d.stats).append(el("span", {class: "error-text", text: error.message}));
    }
  }

  renderStats(result) {
    const d = this.dom;
    const s = result.sample.stats;
    const sample = result.sample;
    // A sample's min and max bound the tensor's (min ≤, max ≥), as the CLI prints them.
    this.fillStats(d.stats, s, !sample.exhaustive);
    d.stats.dataset.extremes = sample.extremes || (sample.exhaustive ? "exact" : "sampled");
    const look = Boolean(sample.first_look);
    d.stats.dataset.samples = String(sample.samples);
    d.stats.dataset.firstLook = String(look);
    if (sample.cost_bytes !== undefined) d.stats.dataset.costBytes = String(sample.cost_bytes);
    else delete d.stats.dataset.costBytes;
    // A sample's min and max are not the tensor's: every sampled figure says it is sampled, and
    // a first look says it is one until the whole sample replaces it.
    const kind = sample.exhaustive ? "all elements" : look ? `sampled: ${grouped(sample.samples)}, a first look` : "sampled";
    d.stats.dataset.kind = sample.exhaustive ? "exact" : "sampled";
    d.stats.prepend(el("span", {class: "stat-kind", text: kind}));
    this.hist.element.querySelector(".toolbar-title").textContent =
      sample.exhaustive ? "Histogram" : look ? "Histogram (sampled, a first look)" : "Histogram (sampled)";
    const from = result.tensor?.info?.["dequantised from"];
    const computed = result.tensor?.info?.["computed as"];   // an adapter's ΔW (adapters/)
    d.dequantised.hidden = !from && !computed;
    d.dequantised.textContent = from ? `dequantised from ${from}` : computed || "";
    d.statsSub.textContent = sample.exhaustive
      ? `all ${grouped(sample.numel)} elements`
      : look ? `a first look at ${grouped(sample.samples)} of ${grouped(sample.numel)} elements, spread over the whole tensor: the full sample follows`
      : `${grouped(sample.samples)} of ${grouped(sample.numel)} elements sampled (${percent(sample.samples / sample.numel)}) in evenly spread windows`
        + (sample.cost_bytes !== undefined && !look ? `, reading ${bytes(sample.cost_bytes)}` : "");
    clear(d.percentiles);
    const pct = Object.entries(s.percentiles || {});
    if (pct.length) {
      d.percentiles.append(el("table", {class: "kv compact"}, el("tbody", {},
        pct.map(([k, v]) => el("tr", {dataset: {key: k}}, el("th", {text: k}), el("td", {class: "mono", text: fmt(v)}))))));
    }
    this.hist.show(result.histogram);
    if (look) return;    // the colour range follows the full sample only (one heatmap request)
    this.heatmap.setRobustScale(Math.max(Math.abs(num(s.percentiles?.p1 ?? 0)), Math.abs(num(s.percentiles?.p99 ?? 0))));
  }

  fillStats(container, s, bounds = false) {
    clear(container);
    for (const [key, label, format] of STAT_KEYS) {
      const value = s[key];
      const cls = ["stat"];
      if ((key === "nan" || key === "posinf" || key === "neginf") && value > 0) cls.push("alert");
      const bound = bounds && BOUNDS[key];
      container.append(el("div", {class: cls.join(" "), dataset: {key, value: String(value)},
                                  title: bound ? BOUND_TITLES[key] : null},
        el("span", {class: "stat-label", text: bound ? `${label} ${bound}` : label}),
        el("span", {class: "stat-value mono", text: (format || fmt)(value)})));
    }
    container.dataset.count = String(s.count);
  }

  // --- exact statistics ----------------------------------------------------------------------

  // Each run of exact statistics is a token: only the current run's progress and result reach
  // the page; a cancelled or superseded run's late messages are dropped.
  async runExact() {
    if (!this.tensor || this.exactRun) return;
    const d = this.dom;
    const run = this.exactRun = {id: null};
    const mine = () => this.exactRun === run;
    d.exactButton.disabled = true;
    d.exactProgress.hidden = false;
    d.exactProgress.value = 0;
    d.exactCancel.hidden = false;
    d.exactNote.textContent = "reading every element…";
    try {
      const {result} = await this.app.request("exact", {name: this.tensor.name}, {
        quiet: true,
        onId: (id) => { run.id = id; },
        onProgress: ({done, total}) => {
          if (!mine()) return;
          d.exactProgress.value = total ? done / total : 1;
          d.exactNote.textContent = `${grouped(done)} of ${grouped(total)} elements`;
        },
      });
      if (!mine()) return;
      d.exactProgress.value = 1;
      d.exactNote.textContent = `exact, over all ${grouped(result.total)} elements`;
      this.fillStats(d.exactStats, result.stats);
      d.exactStats.prepend(el("span", {class: "stat-kind", text: "exact"}));
      d.exactStats.hidden = false;
    } catch (error) {
      if (!mine()) return;
      d.exactNote.textContent = error.kind === "Cancelled" ? "cancelled" : error.message;
    } finally {
      if (mine()) {
        this.exactRun = null;
        this.idleExact();
      }
    }
  }

  cancelExact() {
    if (this.exactRun?.id) this.app.cancel(this.exactRun.id);
  }

  idleExact() {
    const d = this.dom;
    d.exactButton.disabled = false;
    d.exactCancel.hidden = true;
    d.exactProgress.hidden = true;
    d.exactProgress.value = 0;
  }

  // Another tensor (or none): the running exact statistics are cancelled and forgotten, and
  // the controls are those of a tensor on which nothing has run.
  resetExact() {
    this.cancelExact();
    this.exactRun = null;
    this.idleExact();
    this.dom.exactStats.hidden = true;
    clear(this.dom.exactStats);
    this.dom.exactNote.textContent = "";
  }

  // --- export: the name, the values as .npy (written by the library, tensorloupe.npy) ---------

  async copyName() {
    const name = this.tensor?.name;
    if (!name) return;
    try {
      await navigator.clipboard.writeText(name);
      this.dom.toolNote.textContent = "name copied";
    } catch {
      this.dom.toolNote.textContent = name;
    }
  }

  async saveNpy(tile) {
    const t = this.tensor;
    if (!t) return;
    const view = this.heatmap.view;
    const args = tile ? {name: t.name, region: this.heatmap.integerRegion(), plane: view.plane, index: view.index}
                      : {name: t.name};
    const note = this.dom.toolNote;
    try {
      const {result, buffers} = await this.app.request("export_npy", args, {label: "Writing the .npy file…"});
      download(new Blob([buffers[0]], {type: "application/octet-stream"}), result.file);
      note.textContent = `${result.file}: ${result.shape.join("×")} ${result.descr}` +
        (result.exact_dtype ? "" : ` (NumPy has no ${t.dtype}: float32, which holds every value exactly)`);
      note.dataset.file = result.file;
    } catch (error) {
      note.textContent = error.message;
    }
  }

  // The panel became visible or changed size.
  relayout() {
    this.heatmap.relayout();
    this.hist.draw();
  }
}
