// A small line chart by layer, shared by the Health tab's layer profile (rms and max|w|, log
// scale) and the Compare tab's SNR by layer (dB, linear): one canvas per role, a line per series
// through each layer's median (experts: several points a layer), every point drawn, flagged
// points ringed. Canvas work only: every number comes from the worker. Each chart leaves its
// points in the canvas's dataset (CSS pixels), which is how the pointer is mapped back to a
// point and how tests probe them.

import {hidpi} from "./canvas.js";
import {fmt, num} from "./format.js";

export const WIDTH = 300;
export const HEIGHT = 150;
const PAD = {left: 48, right: 10, top: 10, bottom: 22};
export const FLAG_COLOUR = "#d62728";
const INK = "#1d2230";
const MUTED = "#6b7285";
const LINE = "#e1e4ea";
const FONT = "10.5px system-ui, sans-serif";
const HIT = 7;                // pointer distance (CSS pixels) that picks a point

// Draw `points` ([{layer, ...}]) into `canvas`, one line per entry of `series` ({key, colour,
// dash}: the point's value is point[key]). Options: `log` (a log10 axis; values <= 0 sit on the
// bottom edge), `infinite` (a label: +Inf values sit on the top edge under it, e.g. SNR of
// identical tensors; otherwise on the bottom edge), `flagged(point)` (ringed in red), `extra(point)`
// (fields copied into the dataset's point records).
export function drawLines(canvas, points, series, {log = false, infinite = null, flagged = () => false,
                                                   extra = (p) => ({layer: p.layer})} = {}) {
  const ctx = hidpi(canvas, WIDTH, HEIGHT);
  const placed = (v) => Number.isFinite(v) && (!log || v > 0);
  const axis = (v) => (log ? Math.log10(v) : v);
  const layers = points.map((p) => p.layer);
  const [x0, x1] = [Math.min(...layers), Math.max(...layers)];
  const values = points.flatMap((p) => series.map((s) => num(p[s.key]))).filter(placed).map(axis);
  let [lo, hi] = values.length ? [Math.min(...values), Math.max(...values)] : [log ? -1 : 0, log ? 0 : 1];
  const least = log ? 0.5 : Math.max(1, Math.abs(hi) * 0.02);
  if (hi - lo < least) [lo, hi] = [lo - least / 2, hi + least / 2];
  const margin = (hi - lo) * 0.08;             // points stay off the frame
  [lo, hi] = [lo - margin, hi + margin];
  const top = PAD.top + (infinite ? 10 : 0);   // room for the +Inf row
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - top - PAD.bottom;
  const bottom = top + plotH;
  const xOf = (layer) => PAD.left + (x1 === x0 ? plotW / 2 : ((layer - x0) / (x1 - x0)) * plotW);
  const yOf = (v) => top + (1 - (axis(v) - lo) / (hi - lo)) * plotH;
  const yAt = (v) => (placed(v) ? yOf(v) : v === Infinity && infinite ? PAD.top : bottom);

  ctx.font = FONT;
  ctx.strokeStyle = LINE;
  ctx.fillStyle = MUTED;
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  // Only +Inf values (identical tensors): no finite axis to label.
  const ticks = !values.length && infinite ? [] : log ? logTicks(lo, hi) : linearTicks(lo, hi);
  for (const tick of ticks) {
    const y = Math.round(yOf(tick)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(PAD.left, y);
    ctx.lineTo(PAD.left + plotW, y);
    ctx.stroke();
    ctx.fillText(fmt(tick, log ? 2 : 3), PAD.left - 4, y);
  }
  if (infinite) ctx.fillText(infinite, PAD.left - 4, PAD.top);
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const step = Math.max(1, Math.ceil((x1 - x0 + 1) / 8));
  for (let layer = x0; layer <= x1; layer += step) ctx.fillText(String(layer), xOf(layer), bottom + 5);
  ctx.strokeStyle = INK;
  ctx.strokeRect(PAD.left + 0.5, top + 0.5, plotW, plotH);

  const records = [];
  for (const s of series) {
    const byLayer = new Map();
    for (const p of points) {
      const v = num(p[s.key]);
      if (placed(v)) byLayer.set(p.layer, [...(byLayer.get(p.layer) || []), v]);
    }
    ctx.strokeStyle = s.colour;
    ctx.setLineDash(s.dash || []);
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    [...byLayer.keys()].sort((a, b) => a - b).forEach((layer, i) => {
      const vs = byLayer.get(layer).sort((a, b) => a - b);
      const y = yOf(vs[Math.floor((vs.length - 1) / 2)]);
      if (i === 0) ctx.moveTo(xOf(layer), y);
      else ctx.lineTo(xOf(layer), y);
    });
    ctx.stroke();
    ctx.setLineDash([]);
    for (const p of points) {
      const v = num(p[s.key]);
      const x = xOf(p.layer);
      const y = yAt(v);
      const ringed = flagged(p);
      ctx.fillStyle = s.colour;
      ctx.beginPath();
      ctx.arc(x, y, 2.5, 0, 2 * Math.PI);
      ctx.fill();
      if (ringed) {
        ctx.strokeStyle = FLAG_COLOUR;
        ctx.lineWidth = 2;
        ctx.beginPath();
        ctx.arc(x, y, 5.5, 0, 2 * Math.PI);
        ctx.stroke();
      }
      records.push({...extra(p), series: s.key, value: p[s.key],
                    x: Math.round(x * 10) / 10, y: Math.round(y * 10) / 10, flagged: ringed});
    }
  }
  canvas.dataset.points = JSON.stringify(records);
}

// Gridlines on a log axis from 10^lo to 10^hi: 1-2-5 steps when the range is short, decades else.
function logTicks(lo, hi) {
  const out = [];
  for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (Math.log10(v) >= lo && Math.log10(v) <= hi) out.push(v);
    }
  }
  return out.length > 6 ? out.filter((v) => Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9) : out;
}

// Gridlines on a linear axis: a 1-2-5 step giving 3 to 6 lines.
function linearTicks(lo, hi) {
  const raw = (hi - lo) / 4;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => (hi - lo) / s <= 6);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(Math.round(v / step) * step);
  return out;
}

// The point of `canvas` under CSS pixel (x, y), or null.
export function pointAt(canvas, x, y) {
  let best = null;
  let bestDistance = HIT;
  for (const p of JSON.parse(canvas.dataset.points || "[]")) {
    const d = Math.hypot(p.x - x, p.y - y);
    if (d <= bestDistance) [best, bestDistance] = [p, d];
  }
  return best;
}
