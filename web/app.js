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

async function openEntry(entry) {
  const startedAt = performance.now();
  try {
    const {result} = entry.demo
      ? await request("open_demo", {}, {label: "Building the demo model…"})
      : await request("open", {path: entry.path, name: entry.name}, {label: `Opening ${entry.name}…`});
    adopt(entry, result, startedAt);
  } catch (error) {
    entry.failed = true;
    renderFiles();
    const kept = state.model ? `${state.model.summary.name} is still open.` : "";
    showError(`Could not open ${entry.name}.`, error.message, kept);
    document.body.dataset.lastError = error.kind || "Error";
  }
}

async function openFiles(fileList) {
  const files = [...fileList];
  if (!files.length) return;
  const startedAt = performance.now();
  document.body.dataset.selectedAt = String(startedAt);
  try {
    const {result} = await request("mount", {}, {files, label: "Reading the file list…"});
    const entries = result.files;
    // Newest first, after the demo: the list is also how you switch between dropped files.
    state.files.splice(1, 0, ...entries);
    renderFiles();
    await openEntry(entries[0]);
  } catch (error) {
    showError("Could not read the dropped files.", error.message);
  }
}

function renderFiles() {
  const list = clear($("file-list"));
  for (const entry of state.files) {
    const current = entry === state.current;
    list.append(el("li", {},
      el("button", {
        type: "button", class: `file${current ? " current" : ""}${entry.failed ? " failed" : ""}`,
        title: entry.demo ? "The built-in synthetic MoE model" : entry.name,
        "aria-current": current ? "true" : null,
        dataset: {file: entry.name},
        onclick: () => { if (!current) openEntry(entry); },
      },
      el("span", {class: "entry-name", text: entry.demo ? "Demo model" : entry.name}),
      el("span", {class: "entry-size", text: entry.demo ? "synthetic MoE" : entry.failed ? "cannot open" : bytes(entry.size)}))));
  }
}

// --- input: picker, drag and drop anywhere, keyboard -------------------------------------------

$("file-input").addEventListener("change", (event) => {
  const input = event.target;
  openFiles(input.files);
  input.value = "";
});

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
  if (event.dataTransfer?.files?.length) openFiles(event.dataTransfer.files);
});

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
window.tensorloupe = {request, openFiles};

// --- start -----------------------------------------------------------------------------------

renderFiles();
busy.render();
openEntry(DEMO);
