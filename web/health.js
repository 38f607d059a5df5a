// The Health tab (a view module, panels.js): which tensors look broken (tensorloupe.health, run in
// the worker as a job). What the scan reads is said before it runs; it runs with progress and
// Cancel; then the flags, most severe first, each with its evidence (a click opens the tensor),
// and the layer profile: per role, rms and max|w| by layer (healthchart.js; a click on a point
// opens that tensor). The numbers are `tensorloupe health FILE --json`'s.

import {clear, el} from "./dom.js";
import {bytes, fmt, grouped, percent} from "./format.js";
import {FLAG_COLOUR, LEGEND, drawProfile, pointAt} from "./healthchart.js";
import {JobRun} from "./jobrun.js";

export const id = "health";
export const title = "Health";
let panel = null;
let ctx = null;
let dom = null;
let job = null;

export function mount(container, context) {
  panel = container;
  ctx = context;
  job = new JobRun(ctx, "health", {unit: "tensors",
    what: (p, count) => (p.phase === "scan" ? count : "confirming on the bytes")});
}

export function show() {
  job.reset();
  clear(panel);
  const d = dom = {
    run: el("button", {type: "button", class: "button primary", id: "health-run", text: "Check health", onclick: run}),
    cost: el("span", {class: "cost", id: "health-cost", text: "Working out what it will read…"}),
    flags: el("tbody", {id: "health-flags"}),
    charts: el("div", {class: "health-charts", id: "health-profile"}),
  };
  d.results = el("div", {id: "health-results", hidden: true},
    el("table", {class: "health-flags"},
      el("thead", {}, el("tr", {}, ...["severity", "flag", "tensor", "evidence", "read"].map((t) => el("th", {text: t})))),
      d.flags),
    el("h3", {class: "health-profile-title", text: "Layer profile"}),
    el("p", {class: "small muted health-legend"},
      ...LEGEND.map((s) => el("span", {class: "key"}, coloured(el("span", {class: s.dashed ? "line-key dashed" : "line-key"}), s.colour), s.label)),
      el("span", {class: "key"}, coloured(el("span", {class: "ring-key"}), FLAG_COLOUR), "flagged"),
      " · log scale · click a point to open its tensor"),
    d.charts);
  d.card = el("section", {class: "card health", id: "health", dataset: {state: "idle"}},
    el("h3", {text: "Model health"}),
    el("p", {class: "small muted", text: "Every tensor is read in a few windows within a byte budget (whole if it fits) and compared "
      + "with its siblings: the same role in the other layers. Flags: NaN or Inf values, dead (all zero) or constant tensors, "
      + "an rms off its role's layer trend, max|w| far above its siblings', exact copies (confirmed on the bytes), untrained "
      + "or collapsed norms."}),
    el("div", {class: "run-row"}, d.run, d.cost), job.progressRow, job.outcome, d.results);
  panel.append(d.card);
  plan();
}

// Colours come from the chart's table; set through the CSSOM (the page's CSP forbids style="").
function coloured(node, colour) {
  node.style.borderColor = colour;
  return node;
}

async function plan() {
  const mine = job.generation;
  try {
    const {result: c} = await ctx.request("health_plan", {}, {quiet: true});
    if (mine !== job.generation) return;
    const share = c.file_size ? ` (${percent(c.scan_bytes / c.file_size)} of the file)` : "";
    const skipped = c.skipped ? `; ${grouped(c.skipped)} without weight values skipped` : "";
    dom.cost.textContent = `${c.exact ? "Reads" : "Reads about"} ${bytes(c.scan_bytes)}${share}: at most `
      + `${bytes(c.budget)} of each of ${grouped(c.tensors)} tensors${skipped}. Copies and constant tensors `
      + `are then confirmed on their bytes (at most ${bytes(c.confirm_bytes)} each).`;
    Object.assign(dom.cost.dataset, {scanBytes: String(c.scan_bytes), tensors: String(c.tensors)});
  } catch (error) {
    if (mine === job.generation) dom.cost.textContent = error.message;
  }
}

async function run() {
  if (job.running || !dom) return;
  const d = dom;
  await job.run("health", {}, {card: d.card, button: d.run, finished: (result, seconds) => {
    const r = result.report;
    const c = r.counts;
    Object.assign(d.card.dataset, {bytesRead: String(r.bytes_read), errors: String(c.error), warnings: String(c.warning)});
    showReport(r);
    return `Checked ${grouped(r.tensors.length)} tensors: read ${bytes(r.bytes_read)} in ${fmt(seconds, 2)} s. `
      + `${plural(c.error, "error")}, ${plural(c.warning, "warning")}, ${plural(c.info, "note")}.`;
  }});
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function evidence(flag) {
  const e = flag.evidence;
  if (e.shared_storage) return "the same bytes in the file";
  if (String(e.statistic).endsWith("sha256")) return `${e.statistic} ${String(e.value).slice(0, 12)}…`;
  const siblings = e.siblings_median === null || e.siblings_median === undefined ? "" : ` vs siblings' median ${fmt(e.siblings_median, 4)}`;
  return `${e.statistic} ${fmt(e.value, 4)}${siblings}`;
}

function showReport(r) {
  const d = dom;
  d.results.hidden = false;
  clear(d.flags);
  if (!r.flags.length) d.flags.append(el("tr", {}, el("td", {colspan: "5", class: "muted", text: "No flags: nothing looks broken."})));
  for (const f of r.flags) {
    const open = el("button", {type: "button", class: "link", text: f.tensor, onclick: () => ctx.selectTensor(f.tensor)});
    const e = f.evidence;
    d.flags.append(el("tr", {class: `severity-${f.severity}`, dataset: {kind: f.kind, tensor: f.tensor, severity: f.severity,
                                                                       value: String(e.value), siblings: String(e.siblings_median)}},
      el("td", {}, el("span", {class: `badge ${f.severity}`, text: f.severity})),
      el("td", {text: f.kind}),
      el("td", {}, open, el("div", {class: "small muted", text: f.message})),
      el("td", {class: "evidence", text: evidence(f)}),
      el("td", {text: f.exact ? "exact" : "sampled"})));
  }
  clear(d.charts);
  for (const role of r.profile) {
    const canvas = el("canvas", {class: "profile", "aria-label": `${role.role}: rms and max|w| by layer`});
    canvas.addEventListener("click", (event) => {
      const box = canvas.getBoundingClientRect();
      const point = pointAt(canvas, event.clientX - box.left, event.clientY - box.top);
      if (point) ctx.selectTensor(point.tensor);
    });
    const flagged = role.points.some((p) => p.flags.length);
    d.charts.append(el("figure", {class: flagged ? "profile flagged" : "profile", dataset: {role: role.role}},
      el("figcaption", {text: role.role}), canvas));
    drawProfile(canvas, role);
  }
}
