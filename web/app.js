// The page glue: starts the Python worker, mounts the panels (panels.js), opens what the user
// gives (input.js, the URL box, ?url=) and keeps the list of opened files. It owns layout and
// input only; every number on the page comes from the tensorloupe library running in the worker.

import {busy} from "./busy.js";
import {$, clear, el} from "./dom.js";
import {bytes} from "./format.js";
import {listenForFiles} from "./input.js";
import {decodeModel, firstTensor} from "./model.js";
import {registerServiceWorker} from "./offline.js";
import {mountAll, selectTensor, showModel, showTab, updateIo} from "./panels.js";
import {startWorker} from "./worker-client.js";

const DEMO = {name: "demo-moe.safetensors", size: null, path: null, demo: true};

const state = {model: null, files: [DEMO], current: null};

const {request, cancel} = startWorker({
  busy,
  status: (message) => busy.stage(message),
  ready({info, palette, timings}) {
    ctx.palette = {rgba: new Uint8Array(palette.buffer), levels: info.palette_levels};
    busy.ready();
    document.body.dataset.python = "ready";
    document.body.dataset.jspi = info.jspi ? "on" : "off";   // many reads at once, or one at a time
    document.body.dataset.boot = timings.boot;                // "snapshot" or "fresh"
    document.body.dataset.readyMs = String(Math.round(performance.now()));
    document.body.dataset.bootMs = String(Math.round(timings.ready_ms));
    $("build-info").textContent = `Python ${info.python} · build ${info.build}`;
    registerServiceWorker();   // only now: the first visit does not download the app twice at once
  },
  snapshot({stored}) {
    document.body.dataset.snapshot = stored ? "stored" : "failed";
  },
  fatal(message) {
    document.body.dataset.python = "failed";
    busy.failed();
    showError("Python could not start.", message);
  },
  io(io) {
    ctx.io = io;
    updateIo(io);
  },
});

// What every view gets (the contract is at the top of panels.js).
const ctx = {
  request, cancel, palette: null, io: null,
  selectTensor(name, {expert = null, switchTab = true} = {}) {
    const record = state.model?.tensor(name);
    if (!record) return;
    if (switchTab) showTab("tensor");
    selectTensor(record, {expert});
  },
};

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
  const model = decodeModel(payload);
  state.model = model;
  state.current = entry;
  entry.failed = false;
  hideError();
  clear($("current-file")).append(el("strong", {text: model.file}),
    el("span", {class: "muted", text: ` · ${model.format} · ${bytes(model.size)}`}));
  document.body.dataset.openBytes = String(ctx.io ? ctx.io.bytes_read : 0);
  showModel(model);
  renderFiles();
  // Every view works at once: the first matrix is shown in the Tensor tab.
  const first = firstTensor(model);
  if (first) ctx.selectTensor(first.name, {switchTab: false});
  document.body.dataset.model = model.file;
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
    if (entry.remote && entry.size === null) entry.size = result.size;
    adopt(entry, result, startedAt);
  } catch (error) {
    entry.failed = true;
    renderFiles();
    const kept = state.model ? `${state.model.file} is still open.` : "";
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

// --- the list of opened files ----------------------------------------------------------------

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

// --- start -----------------------------------------------------------------------------------

mountAll(ctx);
listenForFiles({open: openFiles, failed: showError});
// For the console and the benchmark: the same requests the page makes.
window.tensorloupe = {request, openFiles, openUrls};

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
