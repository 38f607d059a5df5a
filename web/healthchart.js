// The Health tab's layer profile: one small line chart per role (linechart.js), rms and max|w|
// by layer on a log scale (a x100 tensor and a collapsed norm stay on the chart), flagged points
// ringed in red. Every number comes from the worker (tensorloupe.health's report "profile").

import {FLAG_COLOUR, drawLines, pointAt} from "./linechart.js";

const SERIES = [
  {key: "rms", label: "rms", colour: "#4e79a7", dash: []},
  {key: "max_abs", label: "max|w|", colour: "#f28e2b", dash: [4, 3]},
];

// Draw `role` ({role, points: [{layer, expert, tensor, rms, max_abs, flags}]}) into `canvas`.
export function drawProfile(canvas, role) {
  drawLines(canvas, role.points, SERIES, {
    log: true,
    flagged: (p) => p.flags.length > 0,
    extra: (p) => ({tensor: p.tensor, layer: p.layer, expert: p.expert}),
  });
  canvas.dataset.role = role.role;
}

export {FLAG_COLOUR, pointAt};
export const LEGEND = SERIES.map((s) => ({label: s.label, colour: s.colour, dashed: s.dash.length > 0}));
