// The Experts tab (a view module, panels.js): the map of the MoE structure (moegrid.js), then the
// redundancy analysis (tensorloupe.moe.redundancy, run in the worker): what it will read, said before
// it runs; the run, with progress and Cancel; the threshold; every layer's verdict in one table
// (readable for 32 layers of 64 experts); a layer picker for the detailed view of one layer
// (layer.js) and two experts' weights side by side (pair.js).

import {clear, el} from "./dom.js";
import {bytes, fmt, grouped, percent} from "./format.js";
import {JobRun} from "./jobrun.js";
import {LayerView, braces, swatch} from "./layer.js";
import {renderMoE} from "./moegrid.js";

const DEFAULT_THRESHOLD = 0.9;       // tensorloupe.moe.redundancy.DEFAULT_THRESHOLD

export const id = "moe";
export const title = "Experts";
let panel = null;
let ctx = null;
let analysis = null;

export function mount(container, context) {
  panel = container;
  ctx = context;
  analysis = new ExpertAnalysis(ctx);
}

export function available(model) {
  return Boolean(model.moe && model.moe.detected);
}

export function show(model) {
  renderMoE(panel, model.moe, {onTensor: (name, expert) => ctx.selectTensor(name, {expert})});
  analysis.setPalette(ctx.palette.rgba, ctx.palette.levels);
  analysis.render(panel, model.moe);
}

export const details = show;   // the MoE structure is one of the model's details (model.js)

export function relayout() {
  analysis.relayout();
}

class ExpertAnalysis {
  constructor(app) {
    this.app = app;                  // the page's ctx (panels.js)
    this.job = new JobRun(app, "moe", {unit: "experts"});
    this.layerView = new LayerView(app);
  }

  setPalette(palette, levels) {
    this.layerView.setPalette(palette, levels);
  }

  // Start over for the open checkpoint's MoE structure `moe`: the section goes at the end of `panel`.
  render(panel, moe) {
    this.job.reset();
    this.layerView.reset();
    Object.assign(this, {moe, measured: null, clustered: null, layer: 0, dom: null, wanted: undefined, thresholdBusy: false});
    if (!moe || !moe.detected) return;
    const d = this.dom = {
      run: el("button", {type: "button", class: "button primary", id: "moe-run", text: "Find redundant experts", onclick: () => this.run()}),
      cost: el("span", {class: "cost", id: "moe-cost", text: "Working out what it will read…"}),
      range: el("input", {type: "range", id: "moe-threshold-range", min: "-1", max: "1", step: "0.001", value: String(DEFAULT_THRESHOLD), "aria-label": "threshold"}),
      number: el("input", {type: "number", id: "moe-threshold", min: "-1", max: "1", step: "0.001", value: String(DEFAULT_THRESHOLD), "aria-label": "threshold value"}),
      verdict: el("span", {id: "moe-verdict"}),
      summary: el("tbody"),
      allRecs: el("ol", {id: "moe-all-recs-list"}),
      allCount: el("span"),
      layerSelect: el("select", {id: "moe-layer", "aria-label": "layer"}),
    };
    const [facts, ...rest] = this.layerView.elements();
    d.results = el("div", {id: "moe-results", hidden: true},
      el("div", {class: "threshold-row"},
        el("label", {class: "threshold", for: "moe-threshold"}, "Near-duplicate threshold", el("span", {class: "muted small", text: "cosine ≥"})),
        d.range, d.number, d.verdict,
        d.thresholdError = el("span", {class: "error-text small", id: "moe-threshold-error", role: "alert"})),
      el("table", {class: "moe-summary", id: "moe-summary"},
        el("thead", {}, el("tr", {}, el("th", {text: "layer"}), el("th", {text: "near-duplicate clusters"}),
          el("th", {text: "drop"}), el("th", {text: "keep"}))), d.summary),
      el("details", {class: "all-recs", id: "moe-all-recs"}, el("summary", {}, d.allCount), d.allRecs),
      el("div", {class: "layer-head"},
        el("button", {type: "button", class: "icon", id: "moe-layer-prev", "aria-label": "Previous layer", text: "‹", onclick: () => this.showLayer(this.layer - 1)}),
        el("label", {class: "layer-pick"}, "Layer ", d.layerSelect),
        el("button", {type: "button", class: "icon", id: "moe-layer-next", "aria-label": "Next layer", text: "›", onclick: () => this.showLayer(this.layer + 1)}),
        facts),
      ...rest);
    d.card = el("section", {class: "card redundancy", id: "redundancy", dataset: {state: "idle"}},
      el("h3", {text: "Redundant experts"}),
      el("p", {class: "small muted", text: "From the weights alone, no data: every expert's matrices are sampled at the same positions, "
        + "experts are compared by the cosine similarity of those samples, and experts at least as similar as the threshold "
        + "form a cluster; all but one of each cluster could be dropped (the one most like the rest is kept)."}),
      el("div", {class: "run-row"}, d.run, d.cost), this.job.progressRow, this.job.outcome, d.results);
    panel.append(d.card);
    this.bind();
    this.plan();
  }

  bind() {
    const d = this.dom;
    d.range.addEventListener("input", () => this.setThreshold(Number(d.range.value), d.number));
    d.number.addEventListener("input", () => {
      const v = Number(d.number.value);
      const ok = d.number.value !== "" && Number.isFinite(v) && v >= -1 && v <= 1;
      // A cosine similarity is within -1..1: anything else is refused, and said so.
      d.number.classList.toggle("invalid", !ok);
      d.number.toggleAttribute("aria-invalid", !ok);
      d.thresholdError.textContent = ok ? "" : "The threshold is a cosine similarity: a number from −1 to 1.";
      d.run.disabled = !ok || this.job.running;
      if (ok) this.setThreshold(v, d.range);
    });
    d.layerSelect.addEventListener("change", () => this.showLayer(Number(d.layerSelect.value)));
  }

  // --- cost and run (the progress row and Cancel: jobrun.js) ---------------------------------------

  async plan() {
    const generation = this.job.generation;
    try {
      const {result: c} = await this.app.request("moe_plan", {}, {quiet: true});
      if (generation !== this.job.generation) return;
      const matrices = c.matrices.length;
      const all = c.elements_per_expert === c.samples_per_matrix * matrices;
      const share = c.file_size ? percent(c.total_bytes / c.file_size) : "";
      this.dom.cost.textContent = `${c.exact ? "Reads" : "Reads about"} ${all ? "" : "at most "}${grouped(c.samples_per_matrix)} elements `
        + `of each matrix of every expert (${c.matrices.join(", ")}): ${bytes(c.bytes_per_expert)} per expert, `
        + `${bytes(c.total_bytes)} in all for ${grouped(c.experts)} experts in ${grouped(c.layers)} layers (${share} of the file).`;
      Object.assign(this.dom.cost.dataset, {bytesPerExpert: String(c.bytes_per_expert), totalBytes: String(c.total_bytes)});
    } catch (error) {
      if (generation === this.job.generation) this.dom.cost.textContent = error.message;
    }
  }

  async run() {
    if (this.job.running || !this.dom) return;
    const d = this.dom;
    await this.job.run("moe", {threshold: Number(d.number.value)}, {card: d.card, button: d.run, finished: (result, seconds) => {
      const a = result.analysis;
      const experts = a.layers.reduce((n, layer) => n + layer.experts.length, 0);
      // helped: layers the second Python compared (web/compute.mjs)
      Object.assign(d.card.dataset, {done: String(experts), total: String(experts), bytesRead: String(a.bytes_read),
                                     ms: String(Math.round(seconds * 1000)), helped: String(result.helped || 0)});
      this.measured = a;
      this.layerView.reset();
      this.showResults(a);
      this.setThreshold(Number(d.number.value), d.range);   // moved while it ran
      return `Measured ${grouped(experts)} experts in ${grouped(a.layers.length)} layers: `
        + `read ${bytes(a.bytes_read)} (${bytes(a.bytes_read / Math.max(1, experts))} per expert) in ${fmt(seconds, 2)} s.`;
    }});
  }

  // --- results ------------------------------------------------------------------------------------

  showResults(a) {
    const d = this.dom;
    clear(d.layerSelect).append(...a.layers.map((layer, i) => el("option", {value: String(i), text: String(layer.index ?? layer.prefix)})));
    d.results.hidden = false;
    this.layer = Math.min(this.layer, a.layers.length - 1);
    this.applyClusters({threshold: a.threshold, layers: a.layers, recommendations: a.recommendations});
  }

  setThreshold(value, other) {
    other.value = String(value);
    this.wanted = value;
    if (!this.measured || this.thresholdBusy) return;
    this.sendThreshold();
  }

  // One request at a time; a slider dragged meanwhile is caught up with when it returns.
  async sendThreshold() {
    const generation = this.job.generation;
    this.thresholdBusy = true;
    try {
      while (this.wanted !== undefined && this.wanted !== this.clustered.threshold) {
        const {result} = await this.app.request("moe_threshold", {threshold: this.wanted}, {quiet: true});
        if (generation !== this.job.generation) return;
        this.applyClusters(result);
      }
    } catch (error) {
      if (generation === this.job.generation) this.dom.verdict.textContent = error.message;
    } finally {
      if (generation === this.job.generation) this.thresholdBusy = false;
    }
  }

  // Clusters and recommendations at a threshold: {threshold, layers: [{clusters, recommendations}], recommendations}.
  applyClusters(clustered) {
    this.clustered = clustered;
    const d = this.dom;
    const layers = this.measured.layers;
    const total = layers.reduce((n, layer) => n + layer.experts.length, 0);
    const count = clustered.recommendations.length;
    d.verdict.textContent = count
      ? `${grouped(count)} of ${grouped(total)} experts could be dropped`
      : "no expert is redundant at this threshold";
    clear(d.summary).append(...layers.map((layer, i) => {
      const {clusters, recommendations: recs} = clustered.layers[i];
      const drop = recs.map((r) => r.drop).sort((a, b) => a - b);
      const keep = [...new Set(recs.map((r) => r.keep))].sort((a, b) => a - b);
      return el("tr", {dataset: {layer: layer.prefix, index: String(i)}, class: i === this.layer ? "shown" : "",
                       onclick: () => this.showLayer(i)},
        el("th", {scope: "row", title: layer.prefix, text: String(layer.index ?? layer.prefix)}),
        el("td", {class: "clusters"}, clusters.length
          ? clusters.map((c, k) => el("span", {class: "cluster-chip", dataset: {cluster: c.join(",")}}, swatch(k), braces(c)))
          : el("span", {class: "muted", text: "none"})),
        el("td", {class: "mono", text: drop.join(", ") || "—"}),
        el("td", {class: "mono", text: keep.join(", ") || "—"}));
    }));
    d.allCount.textContent = `All ${grouped(count)} recommendation${count === 1 ? "" : "s"}, as text`;
    clear(d.allRecs).append(...clustered.recommendations.map((r) => el("li", {text: r.text})));
    [...d.layerSelect.options].forEach((option, i) => {
      const n = clustered.layers[i].recommendations.length;
      option.textContent = `${layers[i].index ?? layers[i].prefix}${n ? ` · ${n} to drop` : ""}`;
    });
    this.markGrid();
    d.results.dataset.threshold = String(clustered.threshold);
    d.results.dataset.seq = String(Number(d.results.dataset.seq || 0) + 1);
    this.showLayer(this.layer);
  }

  // The layers x experts grid above: experts the recommendation drops are marked.
  markGrid() {
    this.measured.layers.forEach((layer, i) => {
      const recs = this.clustered.layers[i].recommendations;
      for (const button of document.querySelectorAll(`#moe-grid tr[data-layer="${CSS.escape(layer.prefix)}"] button.expert-cell`)) {
        const r = recs.find((rec) => String(rec.drop) === button.dataset.expert);
        button.classList.toggle("drop", Boolean(r));
        button.title = `${layer.prefix} · expert ${button.dataset.expert}${r ? `\n${r.text}` : ""}`;
      }
    });
  }

  // --- one layer in detail -----------------------------------------------------------------------

  showLayer(i) {
    if (!this.measured) return;
    const layers = this.measured.layers;
    this.layer = Math.max(0, Math.min(layers.length - 1, i));
    this.dom.layerSelect.value = String(this.layer);
    const layer = layers[this.layer];
    for (const row of this.dom.summary.children) row.classList.toggle("shown", row.dataset.layer === layer.prefix);
    const refs = this.moe.layers.find((l) => l.prefix === layer.prefix).experts;
    this.layerView.show(layer, this.clustered.layers[this.layer], refs);
  }

  // The tab became visible or changed size: canvases sized from the layout are drawn again.
  relayout() {
    if (this.measured && this.dom) this.layerView.draw();
  }
}
