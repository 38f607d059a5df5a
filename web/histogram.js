// The Tensor tab's histogram of the sampled values (tensorloupe.sampler.sampling.histogram), bars tinted
// with the heatmap's palette, with a log-count toggle and a readout of the bin under the pointer.

import {hidpi} from "./canvas.js";
import {el} from "./dom.js";
import {fmt, grouped, num} from "./format.js";

export class Histogram {
  constructor() {
    const d = this.dom = {
      canvas: el("canvas", {id: "histogram"}),
      log: el("input", {type: "checkbox", id: "hist-log"}),
      lo: el("span", {id: "hist-lo"}),
      hi: el("span", {id: "hist-hi"}),
      readout: el("div", {class: "readout mono small", id: "hist-readout", text: "\u00a0"}),
      percentiles: el("div", {class: "percentiles", id: "percentiles"}),
    };
    this.element = el("div", {class: "histogram-box"},
      el("div", {class: "toolbar"}, el("span", {class: "toolbar-title", text: "Histogram"}), el("span", {class: "spacer"}),
        el("label", {class: "toggle"}, d.log, " log counts")),
      d.canvas,
      el("div", {class: "hist-axis mono small"}, d.lo, d.hi),
      d.readout, d.percentiles);
    this.histogram = null;
    this.palette = null;
    d.log.addEventListener("change", () => this.draw());
    d.canvas.addEventListener("pointermove", (e) => this.hover(e));
    d.canvas.addEventListener("pointerleave", () => { d.readout.textContent = "\u00a0"; });
  }

  setPalette(palette, levels) {
    this.palette = palette;
    this.levels = levels;
  }

  // {counts, edges} from the worker, or null (nothing to show).
  show(histogram) {
    this.histogram = histogram;
    this.draw();
  }

  // The palette colour of a value (the same arithmetic as tensorloupe.colormap.indices); only
  // tints the bars: the heatmap's pixels come from Python.
  colour(value, scale) {
    const centre = (this.levels - 1) / 2;
    const k = scale > 0 && Number.isFinite(scale) ? centre / scale : 0;
    const i = Math.max(0, Math.min(this.levels - 1, Math.floor(value * k + centre + 0.5)));
    const p = this.palette;
    return `rgb(${p[i * 4]}, ${p[i * 4 + 1]}, ${p[i * 4 + 2]})`;
  }

  draw() {
    const d = this.dom;
    const canvas = d.canvas;
    const width = canvas.clientWidth || 320;
    const height = canvas.clientHeight || 150;
    const ctx = hidpi(canvas, width, height, {styled: true});
    const h = this.histogram;
    if (!h || !this.palette) {
      d.lo.textContent = d.hi.textContent = "";
      return;
    }
    const log = d.log.checked;
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
    d.lo.textContent = fmt(lo, 4);
    d.hi.textContent = fmt(hi, 4);
    canvas.dataset.bins = String(bins);
    canvas.dataset.log = String(log);
  }

  hover(event) {
    const h = this.histogram;
    if (!h) return;
    const rect = this.dom.canvas.getBoundingClientRect();
    const i = Math.min(h.counts.length - 1, Math.max(0, Math.floor(((event.clientX - rect.left) / rect.width) * h.counts.length)));
    this.dom.readout.textContent = `[${fmt(h.edges[i], 4)}, ${fmt(h.edges[i + 1], 4)}): ${grouped(h.counts[i])} values`;
  }
}
