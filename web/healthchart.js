// The Health tab's layer profile: one small line chart per role, rms and max|w| by layer on a
// log scale (a x100 tensor and a collapsed norm stay on the chart), flagged points ringed in red.
// Canvas work only: every number comes from the worker (tensorloupe.health's report "profile").
// Each chart leaves its points in the canvas's dataset (CSS pixels), which is how the pointer is
// mapped back to a tensor and how tests probe them.

import {hidpi} from "./canvas.js";
import {fmt, num} from "./format.js";

const WIDTH = 300;
const HEIGHT = 150;
const PAD = {left: 48, right: 10, top: 10, bottom: 22};
const SERIES = [
  {key: "rms", label: "rms", colour: "#4e79a7", dash: []},
  {key: "max_abs", label: "max|w|", colour: "#f28e2b", dash: [4, 3]},
];
const FLAG = "#d62728";
const INK = "#1d2230";
const MUTED = "#6b7285";
const LINE = "#e1e4ea";
const FONT = "10.5px system-ui, sans-serif";
const HIT = 7;                // pointer distance (CSS pixels) that picks a point

export const SERIES_LABELS = SERIES.map((s) => s.label);

// Draw `role` ({role, points: [{layer, expert, tensor, rms, max_abs, flags}]}) into `canvas`.
export function drawProfile(canvas, role) {
  const ctx = hidpi(canvas, WIDTH, HEIGHT);
  const layers = role.points.map((p) => p.layer);
  const [x0, x1] = [Math.min(...layers), Math.max(...layers)];
  const values = role.points.flatMap((p) => SERIES.map((s) => num(p[s.key]))).filter((v) => v > 0 && Number.isFinite(v));
  let [lo, hi] = values.length ? [Math.log10(Math.min(...values)), Math.log10(Math.max(...values))] : [-1, 0];
  if (hi - lo < 0.5) [lo, hi] = [lo - 0.25, hi + 0.25];
  const margin = (hi - lo) * 0.08;             // points stay off the frame
  [lo, hi] = [lo - margin, hi + margin];
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const xOf = (layer) => PAD.left + (x1 === x0 ? plotW / 2 : ((layer - x0) / (x1 - x0)) * plotW);
  const yOf = (v) => PAD.top + (1 - (Math.log10(v) - lo) / (hi - lo)) * plotH;
  const bottom = PAD.top + plotH;

  ctx.font = FONT;
  ctx.strokeStyle = LINE;
  ctx.fillStyle = MUTED;
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const tick of ticks(lo, hi)) {
    const y = Math.round(yOf(tick)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(PAD.left, y);
    ctx.lineTo(PAD.left + plotW, y);
    ctx.stroke();
    ctx.fillText(fmt(tick, 2), PAD.left - 4, y);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const step = Math.max(1, Math.ceil((x1 - x0 + 1) / 8));
  for (let layer = x0; layer <= x1; layer += step) ctx.fillText(String(layer), xOf(layer), bottom + 5);
  ctx.strokeStyle = INK;
  ctx.strokeRect(PAD.left + 0.5, PAD.top + 0.5, plotW, plotH);

  const points = [];
  for (const s of SERIES) {
    // The line goes through each layer's median (experts: several points a layer).
    const byLayer = new Map();
    for (const p of role.points) {
      const v = num(p[s.key]);
      if (v > 0 && Number.isFinite(v)) byLayer.set(p.layer, [...(byLayer.get(p.layer) || []), v]);
    }
    ctx.strokeStyle = s.colour;
    ctx.setLineDash(s.dash);
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
    for (const p of role.points) {
      const v = num(p[s.key]);
      const flagged = p.flags.length > 0;
      // A value of 0 (a dead tensor) has no place on a log scale: it sits on the bottom edge.
      const y = v > 0 && Number.isFinite(v) ? yOf(v) : bottom;
      const x = xOf(p.layer);
      ctx.fillStyle = s.colour;
      ctx.beginPath();
      ctx.arc(x, y, 2.5, 0, 2 * Math.PI);
      ctx.fill();
      if (flagged) {
        ctx.strokeStyle = FLAG;
        ctx.lineWidth = 2;
        ctx.beginPath();
        ctx.arc(x, y, 5.5, 0, 2 * Math.PI);
        ctx.stroke();
      }
      points.push({tensor: p.tensor, layer: p.layer, expert: p.expert, series: s.key, value: p[s.key],
                   x: Math.round(x * 10) / 10, y: Math.round(y * 10) / 10, flagged});
    }
  }
  canvas.dataset.points = JSON.stringify(points);
  canvas.dataset.role = role.role;
}

// Gridlines on a log axis from 10^lo to 10^hi: 1-2-5 steps when the range is short, decades else.
function ticks(lo, hi) {
  const out = [];
  for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (Math.log10(v) >= lo && Math.log10(v) <= hi) out.push(v);
    }
  }
  return out.length > 6 ? out.filter((v) => Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9) : out;
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

export const LEGEND = SERIES.map((s) => ({label: s.label, colour: s.colour, dashed: s.dash.length > 0}));
export const FLAG_COLOUR = FLAG;
