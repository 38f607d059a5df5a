// The tensor view: sampled statistics (the CLI's numbers: the same `sample` call), exact statistics
// streamed with progress and cancel, a histogram with a log toggle, and the heatmap (heatmap.js).

import {Heatmap} from "./heatmap.js";
import {bytes, clear, el, fmt, grouped, num, percent, shapeText} from "./util.js";

const STAT_KEYS = [
  ["min", "min"], ["max", "max"], ["mean", "mean"], ["std", "std"],
  ["zeros", "near-zero", percent], ["nan", "NaN", grouped], ["posinf", "+Inf", grouped], ["neginf", "−Inf", grouped],
];

function product(list) {
  return list.reduce((a, b) => a * b, 1);
}

export class TensorView {
  constructor(app) {
    this.app = app;
    const $ = (id) => document.getElementById(id);
    this.dom = {
      empty: $("tensor-empty"), body: $("tensor-body"), name: $("tensor-name"), facts: $("tensor-facts"),
      problem: $("tensor-problem"), values: $("tensor-values"), stats: $("stats"), statsSub: $("stats-sub"),
      exactButton: $("exact-button"), exactProgress: $("exact-progress"), exactNote: $("exact-note"),
      exactCancel: $("exact-cancel"), exactStats: $("exact-stats"), colorbar: $("colorbar"),
      hist: $("histogram"), histLog: $("hist-log"), histLo: $("hist-lo"), histHi: $("hist-hi"),
      histReadout: $("hist-readout"), percentiles: $("percentiles"),
    };
    this.heatmap = new Heatmap(app);
    this.tensor = null;
    this.generation = 0;
    this.histogram = null;
    this.exactId = null;
    this.bind();
  }

  bind() {
    const d = this.dom;
    d.exactButton.addEventListener("click", () => this.runExact());
    d.exactCancel.addEventListener("click", () => this.cancelExact());
    d.histLog.addEventListener("change", () => this.drawHistogram());
    d.hist.addEventListener("pointermove", (e) => this.histHover(e));
    d.hist.addEventListener("pointerleave", () => { d.histReadout.textContent = "\u00a0"; });
  }

  setPalette(palette, levels) {
    this.palette = palette;
    this.levels = levels;
    const ctx = this.dom.colorbar.getContext("2d");
    const image = ctx.createImageData(levels, 1);
    image.data.set(palette.subarray(0, levels * 4));
    ctx.putImageData(image, 0, 0);
    for (const [id, index] of [["sw-nan", levels], ["sw-posinf", levels + 1], ["sw-neginf", levels + 2]]) {
      const p = palette.subarray(index * 4, index * 4 + 3);
      document.getElementById(id).style.background = `rgb(${p[0]}, ${p[1]}, ${p[2]})`;
    }
  }

  // The palette colour of a value (the same arithmetic as tensorloupe.colormap.indices); used only
  // to tint histogram bars, the heatmap's pixels come from Python.
  colour(value, scale) {
    const centre = (this.levels - 1) / 2;
    const k = scale > 0 && Number.isFinite(scale) ? centre / scale : 0;
    const i = Math.max(0, Math.min(this.levels - 1, Math.floor(value * k + centre + 0.5)));
    const p = this.palette;
    return `rgb(${p[i * 4]}, ${p[i * 4 + 1]}, ${p[i * 4 + 2]})`;
  }

  clearAll() {
    this.generation += 1;
    this.cancelExact();
    this.tensor = null;
    this.heatmap.clear();
    this.dom.body.hidden = true;
    this.dom.empty.hidden = false;
  }

  // Show tensor `row` ([name, dtype, shape, nbytes, offset, problem]); `expert` picks a slice of
  // a stacked expert tensor along axis 0.
  async show(row, {expert = null} = {}) {
    const generation = ++this.generation;
    this.cancelExact();
    const [name, dtype, shape, nbytes, offset, problem] = row;
    this.tensor = {name, dtype, shape, nbytes, offset, problem};
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
    this.histogram = null;
    this.drawHistogram();
    if (problem) return this.heatmap.clear();
    this.heatmap.show(this.tensor, expert);
    try {
      const {result} = await this.app.request("tensor", {name}, {label: `Sampling ${name}…`});
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
    this.histogram = result.histogram;
    this.drawHistogram();
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

  // --- histogram -----------------------------------------------------------------------------

  drawHistogram() {
    const d = this.dom;
    const canvas = d.hist;
    const width = canvas.clientWidth || 320;
    const height = canvas.clientHeight || 150;
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const h = this.histogram;
    if (!h || !this.palette) {
      d.histLo.textContent = d.histHi.textContent = "";
      return;
    }
    const log = d.histLog.checked;
    const heights = h.counts.map((c) => (log ? Math.log10(1 + c) : c));
    const top = Math.max(...heights) || 1;
    const edges = h.edges.map(num);
    const lo = edges[0];
    const hi = edges[edges.length - 1];
    const scale = Math.max(Math.abs(lo), Math.abs(hi));
    const bins = h.counts.length;
    const w = width / bins;
    for (let i = 0; i < bins; i++) {
      if (!heights[i]) continue;
      const bar = (heights[i] / top) * (height - 4);
      ctx.fillStyle = this.colour((edges[i] + edges[i + 1]) / 2, scale);
      ctx.fillRect(i * w + 0.5, height - bar, Math.max(1, w - 1), bar);
      ctx.strokeStyle = "rgba(30, 35, 50, 0.35)";
      ctx.strokeRect(i * w + 0.5, height - bar + 0.5, Math.max(1, w - 1), bar);
    }
    if (lo < 0 && hi > 0) {
      const x = ((0 - lo) / (hi - lo)) * width;
      ctx.strokeStyle = "rgba(30, 35, 50, 0.6)";
      ctx.setLineDash([3, 3]);
      ctx.beginPath();
      ctx.moveTo(x, 0);
      ctx.lineTo(x, height);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    d.histLo.textContent = fmt(lo, 4);
    d.histHi.textContent = fmt(hi, 4);
    canvas.dataset.bins = String(bins);
    canvas.dataset.log = String(log);
  }

  histHover(event) {
    const h = this.histogram;
    if (!h) return;
    const rect = this.dom.hist.getBoundingClientRect();
    const i = Math.min(h.counts.length - 1, Math.max(0, Math.floor(((event.clientX - rect.left) / rect.width) * h.counts.length)));
    this.dom.histReadout.textContent = `[${fmt(h.edges[i], 4)}, ${fmt(h.edges[i + 1], 4)}): ${grouped(h.counts[i])} values`;
  }

  // The panel became visible or changed size.
  relayout() {
    this.heatmap.relayout();
    this.drawHistogram();
  }
}
