// The Compare tab (a view module, panels.js): the open checkpoint (A, the reference) against a
// second one (B: "Compare with…" files, or another opened file), tensor by tensor, as
// `tensorloupe diff A B --json` computes it (run in the worker as a job, with progress and
// Cancel; sampled by default, every element on request). Then the summary line and counts, a
// sortable table, SNR by layer per role (linechart.js), and for a selected row A, B and A−B of
// the same tile on one colour scale with both histograms (comparepair.js).

import {breakable, clear, el} from "./dom.js";
import {bytes, fmt, grouped, num, shapeText} from "./format.js";
import {JobRun} from "./jobrun.js";
import {drawLines} from "./linechart.js";
import {ComparePair} from "./comparepair.js";

export const id = "compare";
export const title = "Compare";
const DEFAULT_SAMPLES = 16384;       // tensorloupe.comparison.DEFAULT_SAMPLES, as `diff` samples
const CATEGORIES = {only_in_a: "only in A", only_in_b: "only in B", unreadable: "unreadable",
                    shape_changed: "shape changed", byte_identical: "byte identical",
                    same_values: "same values", values_differ: "values differ"};
// The table's columns: the key of diff --json's tensor record each sorts by.
const COLUMNS = [
  {key: "name", label: "tensor"},
  {key: "category", label: "category"},
  {key: "dtype", label: "dtype A → B"},
  {key: "shape", label: "shape"},
  {key: "max_abs", label: "max|a−b|", numeric: true},
  {key: "rel_error", label: "rel error", numeric: true},
  {key: "cosine", label: "cosine", numeric: true},
  {key: "snr_db", label: "SNR dB", numeric: true},
  {key: "read", label: "read"},
];
// Significant digits shown: a cosine of 0.999986 must not read as 1.
const DIGITS = {max_abs: 4, rel_error: 4, cosine: 7, snr_db: 4};
const SNR_SERIES = [{key: "snr_db", label: "SNR", colour: "#4e79a7"}];

let panel = null;
let ctx = null;
let dom = null;
let pair = null;
let job = null;
let other = null;          // B's facts (compare_ops.other_payload) or null
let candidates = [];       // the opened files the "or an opened file" list offers, as listed
let report = null;         // the finished comparison (diff --json)
let sort = {key: "rel_error", descending: true};

export function mount(container, context) {
  panel = container;
  ctx = context;
  pair = new ComparePair(ctx);
  // Its progress counts A's and B's reads together (the outcome gives each): the card keeps no
  // bytesRead and the Cancelled line names no bytes.
  job = new JobRun(ctx, "compare", {unit: "pairs", bytes: false});
}

export function show(model) {
  job.reset();
  report = null;
  other = null;
  clear(panel);
  pair.close();
  if (ctx.palette) pair.setPalette(ctx.palette.rgba, ctx.palette.levels);
  const input = el("input", {type: "file", id: "compare-input", multiple: true, hidden: true});
  input.addEventListener("change", () => {
    const files = [...input.files].map((file) => ({file, rel: file.webkitRelativePath || file.name, folder: false}));
    input.value = "";
    if (files.length) openFiles(files);
  });
  const d = dom = {
    a: el("span", {id: "compare-a-name", text: model.file}),
    b: el("span", {id: "compare-b-name", class: "muted", text: "nothing chosen yet"}),
    entries: el("select", {id: "compare-entry", "aria-label": "Compare with an opened file"}),
    run: el("button", {type: "button", class: "button primary", id: "compare-run", text: "Compare", disabled: true, onclick: run}),
    exact: el("input", {type: "checkbox", id: "compare-exact"}),
    samples: el("input", {type: "number", id: "compare-samples", min: "1", step: "1", value: String(DEFAULT_SAMPLES)}),
    headline: el("p", {class: "compare-headline", id: "compare-headline"}),
    counts: el("div", {class: "compare-counts", id: "compare-counts"}),
    facts: el("p", {class: "small muted", id: "compare-facts"}),
    head: el("tr"),
    rows: el("tbody", {id: "compare-rows"}),
    charts: el("div", {class: "health-charts compare-charts", id: "compare-chart"}),
  };
  d.entries.addEventListener("focus", fillEntries);
  d.entries.addEventListener("pointerdown", fillEntries);
  d.entries.addEventListener("change", () => {
    const entry = candidates[Number(d.entries.value)];
    d.entries.value = "";
    if (entry) compareWith(entry, {run: false});
  });
  d.exact.addEventListener("change", () => { d.samples.disabled = d.exact.checked; });
  fillEntries();
  d.results = el("div", {id: "compare-results", hidden: true},
    d.headline, d.counts, d.facts,
    el("div", {class: "compare-table-wrap"},
      el("table", {class: "compare-table", id: "compare-table"}, el("thead", {}, d.head), d.rows)),
    el("h3", {class: "health-profile-title", text: "SNR by layer"}),
    el("p", {class: "small muted", text: "Per role, 10·log10 Σa²/Σ(a−b)² pooled over the role's tensors in each layer; "
      + "higher is closer. Points on the top line (∞) are identical."}),
    d.charts, pair.element());
  d.card = el("section", {class: "card compare", id: "compare", dataset: {state: "idle"}},
    el("h3", {text: "Compare two checkpoints"}),
    el("p", {class: "small muted", text: "Tensors are paired by name, and across formats through the name map between "
      + "Hugging Face and GGUF names (undoing the converter's dimension order, Q/K row permutation and stacked experts). "
      + "Byte identity is decided on the bytes; the other statistics are computed on the same element positions of both."}),
    el("div", {class: "compare-sides"},
      el("div", {}, el("span", {class: "side-label", text: "A (reference)"}), d.a),
      el("div", {}, el("span", {class: "side-label", text: "B"}), d.b, " ",
        el("label", {class: "button", for: "compare-input", title: "Choose the checkpoint to compare with (one file, or the shards of one model)", text: "Compare with…"}),
        input, " ", d.entries)),
    el("div", {class: "run-row"}, d.run,
      el("label", {class: "toggle small"}, d.exact, " every element (exact)"),
      el("label", {class: "small muted"}, "elements per tensor when sampling ", d.samples)),
    job.progressRow, job.outcome, d.results);
  panel.append(d.card);
  // B stays open when A changes: say what it now pairs with.
  const mine = job.generation;
  ctx.request("compare_other", {}, {quiet: true})
    .then(({result}) => { if (result && mine === job.generation) showOther(result); }, () => {});
}

// The tab is shown (or resized): the file list may have changed meanwhile.
export function relayout() {
  fillEntries();
  if (report && dom && !dom.results.hidden) drawCharts(report);
}

// The opened files other than A (app.js's list) that can be B.
function fillEntries() {
  if (!dom) return;
  candidates = ctx.entries();
  clear(dom.entries).append(el("option", {value: "", text: candidates.length ? "or an opened file…" : "(no other opened file)"}),
    ...candidates.map((e, i) => el("option", {value: String(i), text: e.name, dataset: {file: e.name}})));
  dom.entries.disabled = !candidates.length;
}

function showOther(b) {
  other = b;
  const via = b.name_map ? ` through the ${b.name_map} name map` : " by name";
  dom.b.textContent = `${b.file} · ${b.format} · ${bytes(b.size)} · ${grouped(b.tensors)} tensors: `
    + `${grouped(b.matched)} pairs with A${via}`;
  dom.b.className = "";
  Object.assign(dom.card.dataset, {b: b.file, matched: String(b.matched)});
  dom.run.disabled = false;
}

async function openOther(op, args, name) {
  const mine = job.generation;
  dom.b.textContent = `opening ${name}…`;
  try {
    const {result} = await ctx.request(op, args, {label: `Opening ${name}…`});
    if (mine === job.generation) showOther(result);
    return mine === job.generation;
  } catch (error) {
    if (mine === job.generation) {
      dom.b.textContent = other ? `${error.message} (${other.file} is still B)` : error.message;
      dom.card.dataset.state = "failed";
    }
    return false;
  }
}

// Files chosen with "Compare with…": mounted and grouped as the page's own opens are
// (worker "mount", tensorloupe.web.files); the first set of shards, else the first file, is B.
async function openFiles(files) {
  try {
    const {result} = await ctx.request("mount", {}, {files, label: "Reading the file list…"});
    const entry = result.entries.find((e) => e.kind === "set") || result.entries[0];
    if (!entry) throw new Error("No checkpoint file was chosen.");
    await openOther("compare_open", {paths: entry.paths}, entry.name);
  } catch (error) {
    dom.b.textContent = error.message;
  }
}

// panels.js open(): B from the page's file list, compared at once.
export const open = (entry) => compareWith(entry);

// B from an entry of the page's file list (app.js: {name, paths, remote}); then, unless
// told not to, run the comparison at once.
async function compareWith(entry, {run: andRun = true} = {}) {
  const ok = await (entry.remote
    ? openOther("compare_open_url", {urls: entry.paths}, entry.name)
    : openOther("compare_open", {paths: entry.paths}, entry.name));
  if (ok && andRun) await run();
}

async function run() {
  if (job.running || !dom || !other) return;
  const d = dom;
  const exact = d.exact.checked;
  const samples = Math.max(1, Math.floor(Number(d.samples.value) || DEFAULT_SAMPLES));
  pair.close();
  await job.run("compare", {exact, samples}, {card: d.card, button: d.run, finished: (result, seconds) => {
    report = result.comparison;
    report.requestedSamples = samples;
    showReport(report);
    return `Compared ${grouped(report.tensors.length)} pairs: read ${bytes(report.bytes_read.a)} of A and `
      + `${bytes(report.bytes_read.b)} of B in ${fmt(seconds, 2)} s.`;
  }});
}

function showReport(r) {
  const d = dom;
  const s = r.summary;
  d.results.hidden = false;
  d.headline.textContent = s.headline;
  clear(d.counts).append(...Object.entries(CATEGORIES).map(([key, label]) =>
    el("span", {class: `chip category ${key}${s.counts[key] ? "" : " none"}`, dataset: {category: key, count: String(s.counts[key])}},
      el("strong", {text: grouped(s.counts[key])}), ` ${label}`)));
  const mode = r.mode === "exact" ? "every element compared" : `up to ${grouped(r.samples_per_tensor)} sampled elements per tensor`;
  d.facts.textContent = `A: ${r.a.name} (${r.a.format}, ${grouped(r.a.tensors)} tensors) · B: ${r.b.name} (${r.b.format}, `
    + `${grouped(r.b.tensors)} tensors) · ${grouped(s.matched)} matched${r.name_map ? ` through the ${r.name_map} name map` : ""} · ${mode}`;
  Object.assign(d.card.dataset, {mode: r.mode, matched: String(s.matched), medianSnr: String(s.median_snr_db)});
  renderTable();
  drawCharts(r);
}

// What a row shows in a column, and what it sorts by.
function cell(t, key) {
  switch (key) {
    case "dtype": return t.a_dtype && t.b_dtype ? (t.dtype_changed ? `${t.a_dtype} → ${t.b_dtype}` : t.a_dtype) : (t.a_dtype || t.b_dtype);
    case "shape": return t.a_shape && t.b_shape && shapeText(t.a_shape) !== shapeText(t.b_shape)
      ? `${shapeText(t.a_shape)} → ${shapeText(t.b_shape)}` : shapeText(t.a_shape || t.b_shape);
    case "read": return t.compared === null ? (t.bytes_checked ? "bytes" : "—") : t.exact ? "exact" : "sampled";
    case "category": return CATEGORIES[t.category];
    default: return t[key];
  }
}

function sortKey(t, column) {
  if (!column.numeric) return String(cell(t, column.key));
  const v = t[column.key];
  return v === null || v === undefined ? null : num(v);
}

function sorted(tensors) {
  const column = COLUMNS.find((c) => c.key === sort.key);
  const sign = sort.descending ? -1 : 1;
  return tensors.map((t, i) => [t, sortKey(t, column), i]).sort(([, x, i], [, y, j]) => {
    if (x === y) return i - j;
    if (x === null || Number.isNaN(x)) return 1;          // nothing to sort by: last, either way
    if (y === null || Number.isNaN(y)) return -1;
    return (x < y ? -1 : 1) * sign;
  }).map(([t]) => t);
}

function renderTable() {
  const d = dom;
  clear(d.head).append(...COLUMNS.map((c) => {
    const active = c.key === sort.key;
    return el("th", {"aria-sort": active ? (sort.descending ? "descending" : "ascending") : "none", class: c.numeric ? "num" : null},
      el("button", {type: "button", class: "sort", dataset: {key: c.key}, text: c.label + (active ? (sort.descending ? " ▾" : " ▴") : ""),
                    onclick: () => {
                      sort = {key: c.key, descending: active ? !sort.descending : c.numeric};
                      renderTable();
                    }}));
  }));
  clear(d.rows);
  const selected = pair.dom.box.dataset.name;
  for (const t of sorted(report.tensors)) {
    const viewable = t.a && t.b && shapeText(t.a_shape) === shapeText(t.b_shape) && t.category !== "unreadable";
    const bName = t.b && t.b !== t.name ? el("div", {class: "small muted", text: `B: ${t.b}`}) : null;
    const row = el("tr", {class: `${viewable ? "viewable" : ""}${t.name === selected ? " selected" : ""}`,
                          dataset: {name: t.name, category: t.category, relError: String(t.rel_error), snrDb: String(t.snr_db),
                                    maxAbs: String(t.max_abs), cosine: String(t.cosine), exact: String(t.exact)},
                          title: t.message || (viewable ? "Show A, B and A − B" : "")},
      el("td", {class: "name"}, ...breakable(t.name), bName),
      el("td", {}, el("span", {class: `badge category ${t.category}`, text: CATEGORIES[t.category]})),
      el("td", {class: "nowrap", text: cell(t, "dtype")}),
      el("td", {class: "mono nowrap", text: cell(t, "shape")}),
      ...["max_abs", "rel_error", "cosine", "snr_db"].map((key) =>
        el("td", {class: "num mono", text: t[key] === null ? "—" : fmt(t[key], DIGITS[key])})),
      el("td", {text: cell(t, "read")}));
    if (viewable) row.addEventListener("click", () => select(t));
    d.rows.append(row);
  }
  d.rows.dataset.order = JSON.stringify(sorted(report.tensors).map((t) => t.name));
}

function select(t) {
  for (const tr of dom.rows.querySelectorAll("tr.selected")) tr.classList.remove("selected");
  dom.rows.querySelector(`tr[data-name="${CSS.escape(t.name)}"]`)?.classList.add("selected");
  // The detail is below the table and the charts: bring it to the reader, now and again once
  // drawn (until then it is too short for its top to reach the top of the panel).
  const bring = () => { if (pair.dom.box.dataset.name === t.name) pair.dom.box.scrollIntoView({block: "start"}); };
  pair.show(t, report.requestedSamples).then(bring);
  bring();
}

function drawCharts(r) {
  clear(dom.charts);
  const all = Object.entries(r.summary.roles);
  if (!all.length) dom.charts.append(el("p", {class: "small muted", text: "No tensor with a layer number was compared."}));
  // A role identical in every layer (∞ dB at each point) would be an empty chart: such roles
  // are named on one line instead, and only roles with something to plot get a chart.
  const identical = all.filter(([, points]) => points.every((p) => p.snr_db === "inf"));
  const roles = all.filter(([, points]) => !points.every((p) => p.snr_db === "inf"));
  if (identical.length) {
    dom.charts.append(el("p", {class: "small muted identical-roles", id: "compare-identical-roles",
                               dataset: {roles: JSON.stringify(identical.map(([role]) => role))},
                               text: `Identical in every layer (∞ dB, not charted): ${identical.map(([role]) => role).join(", ")}`}));
  }
  for (const [role, points] of roles) {
    const canvas = el("canvas", {class: "profile", "aria-label": `${role}: SNR in dB by layer`});
    dom.charts.append(el("figure", {class: "profile", dataset: {role}}, el("figcaption", {text: role}), canvas));
    drawLines(canvas, points, SNR_SERIES, {
      infinite: "∞",
      extra: (p) => ({layer: p.layer, tensors: p.tensors, identical: p.identical}),
    });
    canvas.dataset.role = role;
  }
}
