// The page glue: starts the Python worker, mounts the panels (panels.js), opens what the user
// gives (input.js, the URL box, ?url=) and keeps the list of opened files. It owns layout and
// input only; every number on the page comes from the tensorloupe library running in the worker.

import {busy} from "./busy.js";
import {$, clear, el} from "./dom.js";
import {bytes} from "./format.js";
import {listenForFiles} from "./input.js";
import {readLink, writeLink} from "./link.js";
import {decodeModel, firstTensor, withDetails} from "./model.js";
import {registerServiceWorker} from "./offline.js";
import {currentTab, mountAll, onTab, openInTab, selectTensor, showDetails, showModel, showTab, updateIo} from "./panels.js";
import {startWorker} from "./worker-client.js";

const DEMO = {name: "demo-moe.safetensors", size: null, path: null, demo: true};

const state = {model: null, files: [DEMO], current: null, tensor: null, linked: readLink()};

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
    // The worker's stages, and when it started after this page's navigation (bench/browser_open.py).
    document.body.dataset.bootStages = JSON.stringify({...timings, worker_start_ms: timings.worker_origin - performance.timeOrigin});
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
  // B candidates for the Compare tab: opened (not failed) files, not the demo, not the current one.
  entries: () => state.files.filter((e) => !e.demo && !e.failed && e !== state.current && !e.hub),
  modelFile: () => state.model?.file ?? null,     // the checkpoint's name (a set's, for shards)
  viewChanged(view) {                             // the heatmap's view, for the address
    state.view = view;
    link(false);
  },
  selectTensor(name, {expert = null, switchTab = true, history = "push", heatmap = null} = {}) {
    const record = state.model?.tensor(name);
    if (!record) return;
    state.tensor = name;
    state.view = null;
    if (history) link(history === "push");   // before the views replace it with the heatmap's view
    // The views learn the selection before the Tensor tab is shown: showing it first would draw
    // the previous tensor's heatmap, whose lattice the worker would read before the new stats.
    selectTensor(record, {expert, heatmap});
    if (switchTab) showTab("tensor");
    if (PHONE.matches) foldSidebar(false);    // a phone: the tensor chosen, the tree folds away
  },
};

// Phones fold the sidebar under a button (style.css); it opens and closes by that button.
const PHONE = window.matchMedia("(max-width: 600px)");
function foldSidebar(open) {
  $("sidebar").dataset.open = String(open);
  $("sidebar-toggle").setAttribute("aria-expanded", String(open));
}
$("sidebar-toggle").addEventListener("click", () => foldSidebar($("sidebar").dataset.open !== "true"));

// --- the address: what is shown (link.js) ----------------------------------------------------

// The URLs that reopen the current entry: its URLs (and config.json), the Hub model as typed;
// none for the demo and for files from the disk.
function entryUrls(entry) {
  if (!entry || entry.demo) return [];
  if (entry.hub) return [entry.hub];
  if (entry.remote) return [...entry.paths, ...(entry.config ? [entry.config] : [])];
  return null;     // a local file: not linkable
}

function link(push) {
  const urls = entryUrls(state.current);
  writeLink({urls: urls || [], tensor: state.tensor, tab: currentTab(), view: state.view}, push);
}

onTab(() => link(false));

// Back / forward: the selection (and tab) the address names, without a new history entry.
window.addEventListener("popstate", () => {
  const {tensor, tab, view} = readLink();
  if (tensor && tensor !== state.tensor) ctx.selectTensor(tensor, {switchTab: false, history: null, heatmap: view});
  if (tab && tab !== currentTab() && $(`tab-${tab}`) && !$(`tab-${tab}`).hidden) showTab(tab);
});

$("copy-link").addEventListener("click", async () => {
  const note = $("copy-link-note");
  if (entryUrls(state.current) === null) {
    note.textContent = `${state.current.name} is a file on this computer: a link cannot open it (only URLs can be linked).`;
    return;
  }
  link(false);
  try {
    await navigator.clipboard.writeText(location.href);
    note.textContent = "Link copied.";
  } catch {
    note.textContent = `Copy this link: ${location.href}`;
  }
  note.dataset.href = location.href;
});

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
  const parts = filesNote(model);
  entry.opened = parts;          // the file list says the same (entryNote)
  clear($("current-file")).append(el("strong", {text: model.file}),
    el("span", {class: "muted", text: ` · ${model.format}${parts ? ` · ${parts}` : ""} · ${bytes(model.size)}`}));
  document.body.dataset.openBytes = String(ctx.io ? ctx.io.bytes_read : 0);
  showModel(model);
  renderFiles();
  // Every view works at once: the first matrix is shown in the Tensor tab.
  // A link names a tensor and a tab: the first open shows them.
  const wanted = state.linked;
  state.linked = null;
  const first = (wanted?.tensor && model.tensor(wanted.tensor)) || firstTensor(model);
  state.tensor = null;
  const linkedView = wanted?.tensor && first?.name === wanted.tensor ? wanted.view : null;
  if (first) ctx.selectTensor(first.name, {switchTab: false, history: null, heatmap: linkedView});
  if (wanted?.tab && $(`tab-${wanted.tab}`) && !$(`tab-${wanted.tab}`).hidden) showTab(wanted.tab);
  link(false);
  document.body.dataset.model = model.file;
  document.body.dataset.openMs = String(Math.round(performance.now() - startedAt));
  document.body.dataset.openedAt = String(performance.now());
  document.body.dataset.opened = String(Number(document.body.dataset.opened || 0) + 1);
  loadDetails(model, wanted?.tab);
}

// The MoE structure and the architecture block, asked for once the tree is drawn (the worker
// works them out from every tensor name: a second or more for a large shard set).
async function loadDetails(model, tab) {
  try {
    const {result} = await request("model_details", {}, {label: "Working out the architecture…"});
    if (state.model !== model) return;          // another checkpoint was opened meanwhile
    showDetails(withDetails(model, result));
    if (tab === "moe" && !$("tab-moe").hidden && currentTab() !== "moe") showTab("moe");
  } catch (error) {
    if (state.model === model) showError("Could not work out the architecture.", error.message);
  }
}

// An entry is the demo, or what tensorloupe.web.files grouped: {kind: "file" | "set", name,
// paths, files, size, config} where paths are mounted files or (remote: true) URLs. A set (shards,
// their index) opens as one checkpoint; config is a config.json that came with it.
async function openEntry(entry) {
  const startedAt = performance.now();
  try {
    const {result} = entry.demo
      ? await request("open_demo", {}, {label: "Opening the demo model…"})
      : entry.hub
        ? await request("open_hub", {plan: entry.plan}, {label: `Finding ${entry.name}'s files on the Hub…`})
      : entry.remote
        ? await request("open_url", {urls: entry.paths, config: entry.config}, {label: `Reading ${entry.name} from its server…`})
        : await request("open", {paths: entry.paths, config: entry.config}, {label: `Opening ${entry.name}…`});
    if (entry.remote && entry.size === null) entry.size = result.size;
    if (entry.hub) entry.files = result.files;      // what the Hub model turned out to be
    adopt(entry, result, startedAt);
  } catch (error) {
    entry.failed = true;
    renderFiles();
    const kept = state.model ? `${state.model.file} is still open.` : "";
    // The title names the file: the message need not start with it again.
    const names = [entry.name, ...(entry.files || [])].map((n) => `${n}: `);
    const prefix = names.find((n) => error.message.startsWith(n));
    showError(`Could not open ${entry.name}.`, prefix ? error.message.slice(prefix.length) : error.message, kept);
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

// `given`: File objects, or {file, rel, folder} for files found in a dropped folder. Two
// loose checkpoints given at once (dropped, or picked together in "Open files…") are a
// comparison: the first opens (A), the Compare tab compares it with the second (B).
async function openFiles(given, {loose = false} = {}) {
  const files = [...given].map((item) => item instanceof File
    ? {file: item, rel: item.webkitRelativePath || item.name, folder: Boolean(item.webkitRelativePath)}
    : item);
  if (!files.length) return;
  document.body.dataset.selectedAt = String(performance.now());
  try {
    const {result} = await request("mount", {}, {files, label: "Reading the file list…"});
    const pair = loose && result.entries.length === 2 && result.entries;
    if (pair) return await openPair(pair);
    await addEntries(result.entries, "The folder holds no checkpoint files (.safetensors, .gguf, .pt, .pth, .bin, .ckpt, .onnx, .npy, .npz, .dduf, .llamafile).");
  } catch (error) {
    showError("Could not read the dropped files.", error.message);
  }
}

async function openPair([a, b]) {
  state.files.splice(1, 0, a, b);
  renderFiles();
  await openEntry(a);
  if (state.current !== a) return;           // A could not be opened: its error is on screen
  await openInTab("compare", b);
}

// URLs typed in the box (one per line; several lines for shards) or given as ?url= in the
// page's address; relative ones are relative to the page. The page never fetches them itself:
// the worker reads them by Range requests, and they are the only other server it contacts.
// The Hub the `org/model` shortcut reads from: a mirror given as ?hub=, else (null) the
// Hugging Face Hub, whose address lives in Python (opening/hubfiles.py): this file names no host.
const HUB = new URLSearchParams(location.search).get("hub") || null;

async function openUrls(texts) {
  if (texts.length === 1) {
    // `org/model[@rev]` or a Hub page, tree or blob URL: the worker finds the model's files.
    const {result: plan} = await request("hub_plan", {text: texts[0], hub: HUB}, {quiet: true})
      .catch(() => ({result: null}));
    if (plan) {
      const name = `${plan.repo}@${plan.revision}`;
      const known = state.files.find((e) => e.hub && e.name === name);
      if (known) return openEntry(known);
      return addEntries([{kind: "set", name, hub: texts[0], plan, remote: true, paths: [], files: [],
                          size: null, config: null, host: new URL(plan.single || plan.index).host}], "");
    }
  }
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

// One URL per line: a space belongs to the URL (it is percent-encoded), it separates nothing.
const typedUrls = () => $("url-input").value.split(/\r?\n/).map((line) => line.trim()).filter(Boolean);
$("url-form").addEventListener("submit", (event) => {
  event.preventDefault();
  openUrls(typedUrls());
});
$("url-input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {   // Enter opens; Shift+Enter starts a new line
    event.preventDefault();
    $("url-form").requestSubmit();
  }
});

// --- the list of opened files ----------------------------------------------------------------

function renderFiles() {
  const list = clear($("file-list"));
  // Entries of the same name are told apart by where they came from (entryWhere).
  const seen = new Map();
  for (const entry of state.files) seen.set(entry.name, (seen.get(entry.name) || 0) + 1);
  const item = (entry) => {
    const current = entry === state.current;
    return el("li", {class: "entry"},
      el("button", {
        type: "button", class: `file${current ? " current" : ""}${entry.failed ? " failed" : ""}`,
        title: entry.demo ? "The built-in synthetic MoE model"
          : [...(entry.remote ? entry.paths : entry.files), ...(entry.config ? ["config.json"] : [])].join("\n"),
        "aria-current": current ? "true" : null,
        dataset: {file: entry.name},
        onclick: () => { if (!current) openEntry(entry); },
      },
      el("span", {class: "entry-name", text: entry.demo ? "Demo model" : entry.name}),
      seen.get(entry.name) > 1 && !entry.demo ? el("span", {class: "entry-where", text: entryWhere(entry)}) : null,
      el("span", {class: "entry-size", text: entryNote(entry)})),
      entry.demo ? null : el("button", {type: "button", class: "entry-close", title: `Close ${entry.name}`,
                                        "aria-label": `Close ${entry.name}`, text: "×", onclick: () => closeEntry(entry)}));
  };
  const failed = state.files.filter((e) => e.failed && e !== state.current);
  for (const entry of state.files) if (!failed.includes(entry)) list.append(item(entry));
  if (failed.length) {
    // Failed opens fold away (their error was shown when they failed; the title says it again).
    list.append(el("li", {class: "failed-group"}, el("details", {id: "failed-files"},
      el("summary", {text: `${failed.length} could not be opened`}),
      el("ul", {}, failed.map(item)))));
  }
}

// Where an entry came from, for two of the same name: its URL's server, its folder in the drop,
// or the drop it came with.
function entryWhere(entry) {
  if (entry.hub) return entry.host;
  if (entry.remote && entry.paths.length) return new URL(entry.paths[0]).host;
  const parts = (entry.paths[0] || "").split("/");          // /mnt/<drop>/<folder…>/<name>
  const folder = parts.slice(3, -1).join("/");
  return folder ? `in ${folder}/` : `drop ${parts[2] || "?"}`;
}

// Close an entry: it leaves the list; closing the open one shows the demo again.
function closeEntry(entry) {
  state.files.splice(state.files.indexOf(entry), 1);
  if (entry === state.current) {
    state.current = null;
    openEntry(DEMO);
  }
  renderFiles();
}

// How many files the checkpoint was read from, said once for the header and the file list: a
// shard set with parts missing says "2 of 3 shards" (its index and config.json are not shards).
function filesNote(model) {
  const shards = model.extras?.shards;
  const read = model.files?.length || 0;
  if (shards && Number.isInteger(shards.count) && shards.count > 1) {
    return read === shards.count ? `${read} shards` : `${read} of ${shards.count} shards`;
  }
  return read > 1 ? `${read} files` : "";
}

function entryNote(entry) {
  if (entry.demo) return "synthetic MoE";
  const parts = [];
  if (entry.hub) parts.push(entry.host);
  else if (entry.remote) parts.push(new URL(entry.paths[0]).host);   // the same name on two servers
  if (entry.failed) return [...parts, "cannot open"].join(" · ");
  if (entry.opened) parts.push(entry.opened);            // what opening it found (filesNote)
  else if (entry.files.length > 1) parts.push(`${entry.files.length} files`);
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
// A link may name another server (or a Hub mirror, ?hub=): it prefills the URL box, but nothing
// is requested from another origin than the page's until the user confirms, shown the host.
const startUrls = new URLSearchParams(location.search).getAll("url").filter(Boolean);
if (startUrls.length) {
  $("url-input").value = startUrls.join("\n");
  openLinked(startUrls);
} else {
  openEntry(DEMO);
}

async function openLinked(texts) {
  const origins = await originsOf(texts);
  if (!origins.length) return openUrls(texts);
  const hosts = origins.map((origin) => origin === "null" ? "a non-web address" : new URL(origin).host);
  const mirror = HUB && texts.length === 1 && origins[0] === new URL(HUB, location.href).origin;
  $("link-confirm-text").textContent = `This link asks to read ${texts.length === 1 ? "a checkpoint" : `${texts.length} files`} `
    + `from ${hosts.join(", ")}${mirror ? " (a Hugging Face mirror named by the link, not huggingface.co)" : ""}, `
    + "another server than this page's. Nothing has been requested from it yet.";
  $("link-confirm-open").textContent = `Read from ${hosts[0]}`;
  $("link-confirm").hidden = false;
  const confirmed = await new Promise((resolve) => {
    $("link-confirm-open").onclick = () => resolve(true);
    $("link-confirm-cancel").onclick = () => resolve(false);
  });
  $("link-confirm").hidden = true;
  if (confirmed) openUrls(texts);
  else openEntry(DEMO);     // the URLs stay in the box, to open or edit
}

// The origins other than the page's that opening `texts` would contact (a Hub shortcut: the
// Hub's or the mirror's; hub_plan is Python's plan of the URLs, no request).
async function originsOf(texts) {
  let urls = texts;
  if (texts.length === 1) {
    const {result: plan} = await request("hub_plan", {text: texts[0], hub: HUB}, {quiet: true})
      .catch(() => ({result: null}));
    if (plan) urls = [plan.single || plan.index];
  }
  const origins = new Set();
  for (const text of urls) {
    try {
      origins.add(new URL(text, location.href).origin);
    } catch {
      // not a URL: openUrls says so, and contacts nothing
    }
  }
  origins.delete(location.origin);
  return [...origins];
}
