// The page: starts the Python worker at once (so Pyodide boots while the user picks a file), hands
// it files, and shows what it sends back. It owns layout and input only; every number on the page
// comes from the tensorloupe library running in the worker.

import {ExpertAnalysis} from "./experts.js";
import {Outline} from "./tree.js";
import {TensorView} from "./tensor.js";
import {renderMoE, renderSummary, updateIo} from "./summary.js";
import {bytes, clear, el} from "./util.js";

const $ = (id) => document.getElementById(id);
const BUSY_DELAY_MS = 200;
const DEMO = {name: "demo-moe.safetensors", size: null, path: null, demo: true};

// --- the worker and its requests -------------------------------------------------------------

const worker = new Worker(new URL("./worker.mjs", import.meta.url), {type: "module"});
const pending = new Map();
let nextId = 1;

class RequestError extends Error {
  constructor(error) {
    super(error.message);
    this.kind = error.kind;
    this.detail = error.detail;
  }
}

function request(op, args = {}, {files, label = "Working…", quiet = false, onProgress, onId} = {}) {
  const id = nextId++;
  onId?.(id);
  return new Promise((resolve, reject) => {
    pending.set(id, {resolve, reject, onProgress});
    document.body.dataset.pending = String(pending.size);
    if (!quiet) busy.start(id, label);
    worker.postMessage(files ? {id, op, args, files} : {id, op, args});
  });
}

function cancel(id) {
  worker.postMessage({type: "cancel", id});
}

worker.onmessage = ({data}) => {
  if (data.type === "status") return boot.stage(data.message);
  if (data.type === "ready") return boot.ready(data);
  if (data.type === "fatal") return boot.failed(data.message);
  const entry = pending.get(data.id);
  if (!entry) return;
  if (data.io) {
    state.io = data.io;
    updateIo(data.io);
  }
  if (data.progress) return entry.onProgress?.(data.progress);
  pending.delete(data.id);
  document.body.dataset.pending = String(pending.size);
  busy.stop(data.id);
  if (data.ok) entry.resolve({result: data.result, buffers: data.buffers || []});
  else entry.reject(new RequestError(data.error));
};
worker.onerror = (event) => boot.failed(`The Python worker failed: ${event.message || "unknown error"}`);

// --- progress indicator: boot stages, and any request slower than BUSY_DELAY_MS ----------------

const busy = {
  timers: new Map(),
  shown: new Map(),
  booting: "Starting Python…",
  start(id, label) {
    this.timers.set(id, setTimeout(() => {
      this.timers.delete(id);
      this.shown.set(id, label);
      this.render();
    }, BUSY_DELAY_MS));
  },
  stop(id) {
    clearTimeout(this.timers.get(id));
    this.timers.delete(id);
    if (this.shown.delete(id)) this.render();
  },
  render() {
    const status = $("status");
    const labels = [...this.shown.values()];
    let state = "idle";
    let text = "Ready";
    if (this.booting) [state, text] = ["booting", this.booting];
    else if (labels.length) [state, text] = ["busy", labels[labels.length - 1]];
    status.dataset.state = state;
    $("status-text").textContent = text;
    $("busy-bar").hidden = state === "idle" || state === "failed";
  },
};

const boot = {
  started: performance.now(),
  stage(message) {
    busy.booting = message;
    busy.render();
  },
  ready({info, palette, timings}) {
    busy.booting = null;
    busy.render();
    const readyMs = performance.now();
    document.body.dataset.python = "ready";
    document.body.dataset.readyMs = String(Math.round(readyMs));
    document.body.dataset.bootMs = String(Math.round(timings.ready_ms));
    $("build-info").textContent = `Python ${info.python} · build ${info.build}`;
    tensorView.setPalette(new Uint8Array(palette.buffer), info.palette_levels);
    experts.setPalette(new Uint8Array(palette.buffer), info.palette_levels);
  },
  failed(message) {
    busy.booting = null;
    document.body.dataset.python = "failed";
    const status = $("status");
    status.dataset.state = "failed";
    $("status-text").textContent = "Python failed to start";
    $("busy-bar").hidden = true;
    showError("Python could not start.", message);
  },
};

// --- state -----------------------------------------------------------------------------------

const state = {model: null, files: [DEMO], current: null, tab: "summary", io: null};

const outline = new Outline({
  container: $("tree"), filter: $("filter"), regex: $("filter-regex"), counter: $("tree-count"),
  onSelect: (name) => selectTensor(name, {switchTab: true}),
});
const tensorView = new TensorView({request, cancel});
const experts = new ExpertAnalysis({
  request, cancel, onTensor: (name, expert) => selectTensor(name, {switchTab: true, expert}),
});

function tensorRow(name) {
  return state.model?.tensors.find((t) => t[0] === name) || null;
}

function selectTensor(name, {switchTab = false, expert = null} = {}) {
  const row = tensorRow(name);
  if (!row) return;
  outline.reveal(name);
  if (switchTab) showTab("tensor");
  tensorView.show(row, {expert});
}

function showTab(tab) {
  state.tab = tab;
  for (const button of document.querySelectorAll("[role=tab]")) {
    const selected = button.dataset.tab === tab;
    button.setAttribute("aria-selected", String(selected));
    $(`panel-${button.dataset.tab}`).hidden = !selected;
  }
  if (tab === "tensor") tensorView.relayout();
  if (tab === "moe") experts.relayout();
}

for (const button of document.querySelectorAll("[role=tab]")) {
  button.addEventListener("click", () => showTab(button.dataset.tab));
}
new ResizeObserver(() => { if (state.tab === "tensor") tensorView.relayout(); }).observe($("panel-tensor"));

// --- errors ----------------------------------------------------------------------------------

function showError(title, message, note = "") {
  $("error-title").textContent = title;
  $("error-message").textContent = message;
  $("error-note").textContent = note;
  $("error").hidden = false;
}

function hideError() {
  $("error").hidden = true;
}

$("error-close").addEventListener("click", hideError);

// --- opening ---------------------------------------------------------------------------------

// Make a successfully opened checkpoint the page's model. A failed open never gets here: the
// previous model stays on screen and usable.
function adopt(entry, payload, startedAt) {
  state.model = payload;
  state.current = entry;
  entry.failed = false;
  hideError();
  const {summary} = payload;
  $("current-file").textContent = "";
  $("current-file").append(el("strong", {text: summary.name}), el("span", {class: "muted", text: ` · ${summary.format} · ${bytes(summary.size)}`}));
  renderSummary($("panel-summary"), summary, state.io);
  document.body.dataset.openBytes = String(state.io ? state.io.bytes_read : 0);
  outline.setModel(payload.tensors);
  const moe = payload.moe;
  $("tab-moe").hidden = !(moe && moe.detected);
  renderMoE($("panel-moe"), moe, {
    onTensor: (name, expert) => selectTensor(name, {switchTab: true, expert}),
  });
  experts.render($("panel-moe"), moe);
  if (state.tab === "moe" && !(moe && moe.detected)) showTab("summary");
  renderFiles();
  tensorView.clearAll();
  // Every view works at once: the first matrix is shown in the Tensor tab.
  const first = payload.tensors.find((t) => t[2].length >= 2 && !t[5]) || payload.tensors[0];
  if (first) selectTensor(first[0]);
  document.body.dataset.model = summary.name;
  document.body.dataset.openMs = String(Math.round(performance.now() - startedAt));
  document.body.dataset.openedAt = String(performance.now());
  document.body.dataset.opened = String(Number(document.body.dataset.opened || 0) + 1);
}

// An entry is the demo, or what tensorloupe.web.files grouped: {kind: "file" | "set", name,
// paths, files, size, config} where paths are mounted files or (remote: true) URLs. A set (shards,
// their index) opens as one checkpoint; config is a config.json that came with it.
async function openEntry(entry) {
  const startedAt = performance.now();
  try {
    const {result} = entry.demo
      ? await request("open_demo", {}, {label: "Building the demo model…"})
      : entry.remote
        ? await request("open_url", {urls: entry.paths, config: entry.config}, {label: `Reading ${entry.name} from its server…`})
        : await request("open", {paths: entry.paths, config: entry.config}, {label: `Opening ${entry.name}…`});
    if (entry.remote && entry.size === null) entry.size = result.summary.size;
    adopt(entry, result, startedAt);
  } catch (error) {
    entry.failed = true;
    renderFiles();
    const kept = state.model ? `${state.model.summary.name} is still open.` : "";
    showError(`Could not open ${entry.name}.`, error.message, kept);
    document.body.dataset.lastError = error.kind || "Error";
  }
}

// New entries go first, after the demo (the list is also how you switch between them); the
// first set of shards opens, or else the first file.
async function addEntries(entries, emptyMessage) {
  if (!entries.length) return showError("Nothing to open.", emptyMessage);
  state.files.splice(1, 0, ...entries);
  renderFiles();
  await openEntry(entries.find((e) => e.kind === "set") || entries[0]);
}

// `given`: File objects, or {file, rel, folder} for files found in a dropped folder.
async function openFiles(given) {
  const files = [...given].map((item) => item instanceof File
    ? {file: item, rel: item.webkitRelativePath || item.name, folder: Boolean(item.webkitRelativePath)}
    : item);
  if (!files.length) return;
  document.body.dataset.selectedAt = String(performance.now());
  try {
    const {result} = await request("mount", {}, {files, label: "Reading the file list…"});
    await addEntries(result.entries, "The folder holds no checkpoint files (.safetensors, .gguf, .pt, .pth, .bin, .ckpt).");
  } catch (error) {
    showError("Could not read the dropped files.", error.message);
  }
}

// URLs typed in the box (several, separated by spaces, for shards) or given as ?url= in the
// page's address; relative ones are relative to the page. The page never fetches them itself:
// the worker reads them by Range requests, and they are the only other server it contacts.
async function openUrls(texts) {
  const urls = [];
  for (const text of texts) {
    let url;
    try {
      url = new URL(text, location.href);
    } catch {
      return showError(`Could not open ${text}.`, "This is not a URL.");
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      return showError(`Could not open ${text}.`, "Only http: and https: URLs can be read.");
    }
    url.hash = "";
    urls.push(url.href);
  }
  if (!urls.length) return;
  const known = state.files.find((e) => e.remote && e.paths.join(" ") === urls.join(" "));
  if (known) return openEntry(known);
  try {
    const files = urls.map((url) => ({rel: url, path: url, size: null, folder: false}));
    const {result} = await request("group", {files}, {quiet: true});
    for (const entry of result.entries) entry.remote = true;
    await addEntries(result.entries, "No URL was given.");
  } catch (error) {
    showError("Could not open the URL.", error.message);
  }
}

$("url-form").addEventListener("submit", (event) => {
  event.preventDefault();
  openUrls($("url-input").value.trim().split(/\s+/).filter(Boolean));
});

function renderFiles() {
  const list = clear($("file-list"));
  for (const entry of state.files) {
    const current = entry === state.current;
    list.append(el("li", {},
      el("button", {
        type: "button", class: `file${current ? " current" : ""}${entry.failed ? " failed" : ""}`,
        title: entry.demo ? "The built-in synthetic MoE model"
          : [...(entry.remote ? entry.paths : entry.files), ...(entry.config ? ["config.json"] : [])].join("\n"),
        "aria-current": current ? "true" : null,
        dataset: {file: entry.name},
        onclick: () => { if (!current) openEntry(entry); },
      },
      el("span", {class: "entry-name", text: entry.demo ? "Demo model" : entry.name}),
      el("span", {class: "entry-size", text: entryNote(entry)}))));
  }
}

function entryNote(entry) {
  if (entry.demo) return "synthetic MoE";
  const parts = [];
  if (entry.remote) parts.push(new URL(entry.paths[0]).host);   // the same name on two servers
  if (entry.failed) return [...parts, "cannot open"].join(" · ");
  if (entry.files.length > 1) parts.push(`${entry.files.length} files`);
  if (entry.config) parts.push("+ config.json");
  parts.push(entry.size === null ? "URL" : bytes(entry.size));
  return parts.join(" · ");
}

// --- input: picker, drag and drop anywhere, keyboard -------------------------------------------

for (const id of ["file-input", "folder-input"]) {
  $(id).addEventListener("change", (event) => {
    const input = event.target;
    openFiles(input.files);
    input.value = "";
  });
}

let dragDepth = 0;
const carriesFiles = (event) => [...(event.dataTransfer?.types || [])].includes("Files");
window.addEventListener("dragenter", (event) => {
  if (!carriesFiles(event)) return;
  event.preventDefault();
  dragDepth += 1;
  $("drop-overlay").hidden = false;
});
window.addEventListener("dragover", (event) => {
  if (!carriesFiles(event)) return;
  event.preventDefault();
  event.dataTransfer.dropEffect = "copy";
});
window.addEventListener("dragleave", () => {
  dragDepth = Math.max(0, dragDepth - 1);
  if (!dragDepth) $("drop-overlay").hidden = true;
});
window.addEventListener("drop", (event) => {
  event.preventDefault();
  dragDepth = 0;
  $("drop-overlay").hidden = true;
  const transfer = event.dataTransfer;
  if (!transfer) return;
  // The entries must be taken now: a drop's items are gone once this handler returns.
  const entries = [...transfer.items].filter((item) => item.kind === "file")
    .map((item) => item.webkitGetAsEntry?.()).filter(Boolean);
  if (entries.some((entry) => entry.isDirectory)) {
    droppedFiles(entries).then(openFiles, (error) => showError("Could not read the dropped folder.", error.message));
  } else if (transfer.files.length) {
    openFiles(transfer.files);
  }
});

// Every file under the dropped entries, with its path in the drop ("/folder/sub/name").
async function droppedFiles(entries) {
  const out = [];
  const walk = async (entry, inFolder) => {
    if (entry.isFile) {
      const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
      out.push({file, rel: entry.fullPath, folder: inFolder});
      return;
    }
    const reader = entry.createReader();
    const children = [];
    for (;;) {   // readEntries answers in batches (100 in Chromium) until an empty one
      const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
      if (!batch.length) break;
      children.push(...batch);
    }
    children.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const child of children) await walk(child, true);
  };
  for (const entry of entries) await walk(entry, false);
  return out;
}

document.addEventListener("keydown", (event) => {
  const typing = event.target.closest("input, select, textarea");
  if (event.key === "/" && !typing) {
    event.preventDefault();
    $("filter").focus();
  } else if (event.key === "Escape" && event.target === $("filter")) {
    $("filter").value = "";
    $("filter").dispatchEvent(new Event("input"));
    $("tree").focus();
  }
});

// Installed as an app, files opened with it from the desktop arrive here (manifest file_handlers).
if ("launchQueue" in window) {
  window.launchQueue.setConsumer(async (params) => {
    if (params.files?.length) openFiles(await Promise.all(params.files.map((handle) => handle.getFile())));
  });
}

// --- offline: the service worker precaches the whole app, Pyodide included -----------------

if ("serviceWorker" in navigator) {
  const updating = Boolean(navigator.serviceWorker.controller);
  navigator.serviceWorker.register("sw.js").then(() => navigator.serviceWorker.ready).then(() => {
    $("offline").hidden = false;
    document.body.dataset.offlineReady = "true";
  }).catch(() => { /* no offline support (e.g. a private window): the app still works online */ });
  // A new version took over the cache while this one runs: offer a reload rather than mix them.
  navigator.serviceWorker.addEventListener("controllerchange", () => {
    if (!updating) return;
    const chip = $("offline");
    chip.textContent = "new version: reload";
    chip.classList.add("update");
    chip.addEventListener("click", () => location.reload(), {once: true});
  });
}

// For the console and the benchmark: the same requests the page makes.
window.tensorloupe = {request, openFiles, openUrls};

// --- start -----------------------------------------------------------------------------------

renderFiles();
busy.render();
// `?url=<url>` (repeatable: shards) opens that checkpoint instead of the demo
// (`python3 build.py serve FILE` prints such an address).
const startUrls = new URLSearchParams(location.search).getAll("url").filter(Boolean);
if (startUrls.length) {
  $("url-input").value = startUrls.join(" ");
  openUrls(startUrls);
} else {
  openEntry(DEMO);
}
