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
    // The plot leaves room for a count axis on the left and value ticks below.
    const ink = getComputedStyle(canvas).color || "#6b7285";
    ctx.font = "10px ui-monospace, monospace";
    const yTicks = log ? logTicks(Math.max(...h.counts)) : niceTicks(0, Math.max(...h.counts), 3);
    const left = 6 + Math.max(...yTicks.map((t) => ctx.measureText(grouped(t)).width));
    const plot = {x: left + 4, y: 6, w: width - left - 8, h: height - 22};
    const yOf = (count) => plot.y + plot.h - ((log ? Math.log10(1 + count) : count) / top) * plot.h;
    const xOf = (value) => plot.x + ((value - lo) / (hi - lo || 1)) * plot.w;
    const w = plot.w / bins;
    for (let i = 0; i < bins; i++) {
      if (!heights[i]) continue;
      const bar = (heights[i] / top) * plot.h;
      ctx.fillStyle = this.colour((edges[i] + edges[i + 1]) / 2, scale);
      ctx.fillRect(plot.x + i * w + 0.5, plot.y + plot.h - bar, Math.max(1, w - 1), bar);
      ctx.strokeStyle = "rgba(30, 35, 50, 0.35)";
      ctx.strokeRect(plot.x + i * w + 0.5, plot.y + plot.h - bar + 0.5, Math.max(1, w - 1), bar);
    }
    if (lo < 0 && hi > 0) {
      const x = xOf(0);
      ctx.strokeStyle = "rgba(30, 35, 50, 0.6)";
      ctx.setLineDash([3, 3]);
      ctx.beginPath();
      ctx.moveTo(x, plot.y);
      ctx.lineTo(x, plot.y + plot.h);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    // Axes: counts (linear or log) on the left, values below, both with their ticks.
    ctx.strokeStyle = ink;
    ctx.fillStyle = ink;
    ctx.globalAlpha = 0.8;
    ctx.beginPath();
    ctx.moveTo(plot.x, plot.y);
    ctx.lineTo(plot.x, plot.y + plot.h);
    ctx.lineTo(plot.x + plot.w, plot.y + plot.h);
    ctx.stroke();
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const t of yTicks) {
      const y = yOf(t);
      ctx.fillText(grouped(t), plot.x - 4, y);
      ctx.beginPath();
      ctx.moveTo(plot.x - 2, y);
      ctx.lineTo(plot.x, y);
      ctx.stroke();
    }
    const xTicks = niceTicks(lo, hi, Math.max(2, Math.floor(plot.w / 70)));
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const t of xTicks) {
      const x = xOf(t);
      ctx.fillText(fmt(t, 3), Math.min(width - 14, Math.max(plot.x + 10, x)), plot.y + plot.h + 4);
      ctx.beginPath();
      ctx.moveTo(x, plot.y + plot.h);
      ctx.lineTo(x, plot.y + plot.h + 3);
      ctx.stroke();
    }
    ctx.globalAlpha = 1;
    d.lo.textContent = `min bin edge ${fmt(lo, 4)}`;
    d.hi.textContent = `${fmt(hi, 4)} max bin edge`;
    Object.assign(canvas.dataset, {bins: String(bins), log: String(log), lo: String(lo), hi: String(hi), plotWidth: String(plot.w),
      yTicks: JSON.stringify(yTicks), xTicks: JSON.stringify(xTicks)});
    this.plot = plot;
  }

  hover(event) {
    const h = this.histogram;
    if (!h) return;
    const rect = this.dom.canvas.getBoundingClientRect();
    const plot = this.plot || {x: 0, w: rect.width};
    const i = Math.min(h.counts.length - 1, Math.max(0, Math.floor(((event.clientX - rect.left - plot.x) / plot.w) * h.counts.length)));
    this.dom.readout.textContent = `[${fmt(h.edges[i], 4)}, ${fmt(h.edges[i + 1], 4)}): ${grouped(h.counts[i])} values`;
  }
}

// About `count` round values from lo to hi (1, 2 or 5 times a power of ten apart), all inside;
// at least two where the range allows.
export function niceTicks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const steps = [0.5, 1, 2, 5, 10].map((m) => m * power);
  // the step nearest the raw one (on a log scale), smaller ones if it leaves fewer than two ticks
  let k = steps.reduce((best, s, i) => (Math.abs(Math.log(s / raw)) < Math.abs(Math.log(steps[best] / raw)) ? i : best), 0);
  for (;; k--) {
    const step = steps[k];
    const ticks = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
      ticks.push(Math.abs(t) < step * 1e-9 ? 0 : Number(t.toPrecision(12)));
    }
    if (ticks.length >= 2 || k === 0) return ticks;
  }
}

// Counts on a log axis: 0 and the powers of ten up to the largest count.
function logTicks(largest) {
  const ticks = [0];
  for (let t = 1; t <= largest; t *= 10) ticks.push(t);
  return ticks.length > 5 ? ticks.filter((t, k) => k === 0 || k % 2 === 1) : ticks;
}
