// The Experts tab's pictures: the experts x experts similarity matrix (pixels from Python, labels,
// cluster outlines), the bar chart of scores, and lattices of expert weights. Canvas work only:
// every number comes from the worker. Each drawing leaves its geometry in the canvas's dataset
// (CSS pixels), which is how the pointer is mapped back to cells, and how tests probe them.

import {bitmap, hidpi} from "./canvas.js";
import {fmt} from "./format.js";

// Categorical colours for clusters (Tableau 10), in the order the library lists the clusters.
export const CLUSTER_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const INK = "#1d2230";
const MUTED = "#6b7285";
const LINE = "#e1e4ea";
const FONT = "11px system-ui, sans-serif";
const VALUE_CELL = 36;        // cells at least this big (CSS pixels) show their value

export function clusterColour(index) {
  return CLUSTER_COLOURS[index % CLUSTER_COLOURS.length];
}

// Label every k-th item so that labels are at least `room` pixels apart.
function labelStep(cell, room) {
  return [1, 2, 4, 8, 16, 32].find((k) => k * cell >= room) || 64;
}

// --- the similarity matrix ------------------------------------------------------------------------

// `pixels`: RGBA, n x n; `values`: the similarities (written in cells big enough); `experts`:
// expert numbers (axis labels); `clusters`: lists of experts outlined together; `selected`:
// [i, j] positions to mark (the pair on show), or null. A cell's colour is clean at its
// lower-left (away from the number and the outline): (0.2, 0.8) of the cell.
export function drawSimilarity(canvas, {pixels, values, experts, clusters, selected}) {
  const n = experts.length;
  const cell = Math.max(5, Math.min(44, Math.floor(400 / n)));
  const left = 30;
  const top = 22;
  const side = n * cell;
  const ctx = hidpi(canvas, left + side + 6, top + side + 6);
  ctx.drawImage(bitmap(pixels, n, n), left, top, side, side);
  if (cell >= 14) {           // hairlines between cells when cells are big enough to need them
    ctx.strokeStyle = "rgba(255, 255, 255, 0.55)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let k = 1; k < n; k++) {
      ctx.moveTo(left + k * cell + 0.5, top);
      ctx.lineTo(left + k * cell + 0.5, top + side);
      ctx.moveTo(left, top + k * cell + 0.5);
      ctx.lineTo(left + side, top + k * cell + 0.5);
    }
    ctx.stroke();
  }
  if (values && cell >= VALUE_CELL) {     // the numbers themselves, as the CLI prints them
    ctx.font = "10.5px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) {
        const v = values[i][j];
        ctx.fillStyle = Math.abs(v) > 0.55 ? "#ffffff" : INK;
        ctx.fillText(v.toFixed(2), left + (j + 0.5) * cell, top + (i + 0.45) * cell);
      }
    }
  }
  // Pairs in one cluster are outlined in the cluster's colour (the colours of the bar chart).
  const position = new Map(experts.map((e, i) => [e, i]));
  if (cell >= 7) {
    ctx.lineWidth = cell >= 14 ? 3 : 1;
    const inset = ctx.lineWidth / 2 + 0.5;
    clusters.forEach((cluster, k) => {
      ctx.strokeStyle = clusterColour(k);
      for (const a of cluster) {
        for (const b of cluster) {
          if (a === b) continue;
          const [i, j] = [position.get(a), position.get(b)];
          ctx.strokeRect(left + j * cell + inset, top + i * cell + inset, cell - 2 * inset, cell - 2 * inset);
        }
      }
    });
  }
  if (selected) {            // the pair on show, and its mirror: a ring outside the cells
    ctx.strokeStyle = INK;
    ctx.lineWidth = 2;
    const [i, j] = selected;
    for (const [r, c] of [[i, j], [j, i]]) ctx.strokeRect(left + c * cell - 2, top + r * cell - 2, cell + 4, cell + 4);
  }
  ctx.fillStyle = MUTED;
  ctx.font = FONT;
  const step = labelStep(cell, 16);
  ctx.textAlign = "center";
  ctx.textBaseline = "bottom";
  for (let k = 0; k < n; k += step) ctx.fillText(String(experts[k]), left + (k + 0.5) * cell, top - 4);
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let k = 0; k < n; k += step) ctx.fillText(String(experts[k]), left - 5, top + (k + 0.5) * cell);
  Object.assign(canvas.dataset, {n: String(n), cell: String(cell), left: String(left), top: String(top)});
}

// The (row, col) cell under a pointer event, or null.
export function similarityCell(canvas, event) {
  const rect = canvas.getBoundingClientRect();
  const {n, cell, left, top} = canvas.dataset;
  const x = event.clientX - rect.left - Number(left);
  const y = event.clientY - rect.top - Number(top);
  const i = Math.floor(y / Number(cell));
  const j = Math.floor(x / Number(cell));
  return i >= 0 && j >= 0 && i < Number(n) && j < Number(n) ? [i, j] : null;
}

// --- the scores -----------------------------------------------------------------------------------

// One bar per expert. `cluster`: expert -> cluster index (absent: in no cluster); `dropped`: the
// experts the recommendation drops (drawn faded, in their cluster's colour).
export function drawScores(canvas, {experts, cluster, dropped, width}) {
  const height = 168;
  const ctx = hidpi(canvas, width, height);
  const left = 46;
  const right = 8;
  const top = 10;
  const bottom = 22;
  const scores = experts.map((e) => e.score);
  const max = Math.max(...scores);
  const min = Math.min(...scores);
  // The scores of one layer sit close together (a ratio near 0.8): the axis spans their range,
  // with room below, and says where it starts.
  const pad = Math.max((max - min) * 0.6, 0.002);
  const lo = Math.max(0, min - pad);
  const hi = max + (max - min) * 0.1 + 0.0005;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const y = (v) => top + plotH * (1 - (v - lo) / (hi - lo));
  ctx.font = FONT;
  ctx.strokeStyle = LINE;
  ctx.fillStyle = MUTED;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let k = 0; k <= 3; k++) {
    const v = lo + ((hi - lo) * k) / 3;
    ctx.beginPath();
    ctx.moveTo(left, Math.round(y(v)) + 0.5);
    ctx.lineTo(width - right, Math.round(y(v)) + 0.5);
    ctx.stroke();
    ctx.fillText(fmt(v, 3), left - 5, y(v));
  }
  const n = experts.length;
  const slot = plotW / n;
  const gap = slot >= 8 ? Math.max(1, Math.round(slot * 0.18)) : 0;
  for (let k = 0; k < n; k++) {
    const e = experts[k].expert;
    const x = left + k * slot + gap / 2;
    const barTop = y(scores[k]);
    const c = cluster.get(e);
    const colour = c === undefined ? "#b9bfcc" : clusterColour(c);
    ctx.globalAlpha = dropped.has(e) ? 0.35 : 1;
    ctx.fillStyle = colour;
    ctx.fillRect(x, barTop, Math.max(1, slot - gap), top + plotH - barTop);
    ctx.globalAlpha = 1;
    if (dropped.has(e) && slot >= 6) {
      ctx.strokeStyle = colour;
      ctx.lineWidth = 1;
      ctx.strokeRect(x + 0.5, barTop + 0.5, Math.max(1, slot - gap) - 1, top + plotH - barTop - 1);
    }
  }
  ctx.strokeStyle = INK;
  ctx.beginPath();
  ctx.moveTo(left, top + plotH + 0.5);
  ctx.lineTo(width - right, top + plotH + 0.5);
  ctx.stroke();
  ctx.fillStyle = MUTED;
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const step = labelStep(slot, 16);
  for (let k = 0; k < n; k += step) ctx.fillText(String(experts[k].expert), left + (k + 0.5) * slot, top + plotH + 4);
  Object.assign(canvas.dataset, {left: String(left), slot: String(slot), n: String(n),
                                 axisFrom: String(lo), axisTo: String(hi)});
}

export function scoreIndex(canvas, event) {
  const rect = canvas.getBoundingClientRect();
  const k = Math.floor((event.clientX - rect.left - Number(canvas.dataset.left)) / Number(canvas.dataset.slot));
  return k >= 0 && k < Number(canvas.dataset.n) ? k : null;
}

// --- lattices of weights, and colour bars ---------------------------------------------------------

// The CSS size of a rows x cols lattice within `available` pixels: the width fills what is
// available up to 24 pixels a cell, in whole pixels per cell where that still fills two thirds
// of it (crisp), the height following the view's aspect within limits.
export function latticeSize(rows, cols, viewShape, available) {
  const fit = (cells, room) => {
    const cell = Math.min(24, room / cells);
    return cells * (cell >= 2 ? Math.floor(cell) : cell);
  };
  const cssW = Math.max(cols, Math.round(fit(cols, available)));
  const targetH = Math.max(Math.min(64, rows * 24), Math.min(420, Math.round((cssW * viewShape[0]) / viewShape[1])));
  return [cssW, Math.max(rows, Math.round(fit(rows, targetH)))];
}

export function drawLattice(canvas, {pixels, rows, cols}, [cssW, cssH]) {
  const ctx = hidpi(canvas, cssW, cssH);
  ctx.drawImage(bitmap(pixels, rows, cols), 0, 0, cssW, cssH);
}
