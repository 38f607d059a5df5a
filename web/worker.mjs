// The Python side of the page: boots Pyodide (served from our own origin), loads the tensorloupe
// wheel, mounts dropped files with WORKERFS (Python reads them by slices with plain open/seek/read)
// and answers the page's requests through tensorloupe.web.dispatch. Python runs here, never on
// the page's thread, so long work cannot freeze the page. Here: the protocol, the queue, the mounts,
// the second Python and the boot; URL reads are urls.mjs, a File's slices reads.mjs, what this
// shares with compute.mjs runtime.mjs.
//
// Page -> worker:  {id, op, args}            a request (op "mount" carries `files`:
//                                            [{file: File, rel: "folder/name", folder: bool}])
//                                            op "open_url" ({urls, config}) is probed here first,
//                                            and so is "compare_open_url" ({urls}: B, compare_ops.py);
//                                            op "open_hub" ({plan}: the page's hub_plan) finds a Hub model's files
//                  {type: "cancel", id}      stop request `id` (a job, or a request still queued)
// Worker -> page:  {type: "status", stage, message}   boot progress
//                  {type: "ready", info, palette, timings} / {type: "fatal", message}
//                  {id, ok, result | error, io, buffers}  a reply (buffers are transferred)
//                  {id, progress: {done, total, ...}, io} a job's progress after each step
//
// Jobs are long requests done in steps, one step per task, so that cancel messages and other
// requests get in between: the page asks for `op`, Python answers `<op>_start`, then `job_step`
// (progress, and the result with the last step) and `job_cancel`. The protocol is described in
// tensorloupe/web/jobs.py; which ops are jobs, Python says in its "hello" reply.

import {asker, files} from "./reads.mjs";
import {addLibrary, failure, messageOf, runtimeOptions} from "./runtime.mjs";
import {heads, isJson, probe, probing} from "./urls.mjs";

const BUILD = "__TENSORLOUPE_BUILD__";
const WHEEL = "__TENSORLOUPE_WHEEL__";
const DEMO = "__TENSORLOUPE_DEMO__";        // the demo model's file, shipped beside this one

// JSPI (stack switching): Python entered with callPromising can wait for many reads at once
// (pyodide.ffi.run_sync): every slice of a File, every Range request of a URL in flight together.
// `?jspi=0` on this script's address (the page passes its own) turns it off: Python then reads one
// range at a time, synchronously, as in browsers without JSPI; the tests use it for that fallback.
const JSPI = typeof WebAssembly.Suspending === "function"
  && new URL(self.location.href).searchParams.get("jspi") !== "0";

let JOBS = new Set();        // the ops that are jobs (from Python's "hello")
const queue = [];            // requests waiting for Python, in arrival order
const jobs = [];             // running jobs, stepped between requests
const cancelled = new Set();
let pyodide = null;
let dispatch = null;
let mounts = 0;

// Attached before anything is awaited: messages that arrive during boot wait in the queue.
self.onmessage = (event) => {
  const message = event.data;
  settle();                  // the page is busy: no snapshot made now (see idle)
  if (message.type === "cancel") {
    const waiting = queue.findIndex((m) => m.id === message.id);
    if (waiting >= 0) {
      queue.splice(waiting, 1);
      reply(message.id, {ok: false, error: {kind: "Cancelled", message: "cancelled"}});
    } else {
      cancelled.add(message.id);
    }
  } else {
    queue.push(message);
  }
  schedule();
};

// One request or one job step per task, then yield: cancel messages and new requests get in
// between the steps of a long job.
const tick = new MessageChannel();
let scheduled = false;
let busy = false;            // Python is running (with JSPI it may be suspended on reads)
tick.port1.onmessage = async () => {
  scheduled = false;
  if (busy) return;
  busy = true;
  try {
    if (queue.length) await handle(queue.shift());
    else if (jobs.length) await step(jobs[0]);
  } finally {
    busy = false;
  }
  if (queue.length || jobs.length) schedule();
  else idle();
};
function schedule() {
  if (dispatch && !scheduled) {
    scheduled = true;
    tick.port2.postMessage(0);
  }
}

function reply(id, envelope, buffers = []) {
  self.postMessage({id, ...envelope, buffers}, buffers.map((b) => b.buffer));
}

async function call(op, args) {
  const json = JSON.stringify(args ?? {});
  const proxy = JSPI ? await dispatch.callPromising(op, json) : dispatch(op, json);
  try {
    const [text, parts] = proxy.toJs({depth: 2});
    const buffers = parts.map((part) => {
      const bytes = part.toJs();   // a copy out of the wasm heap: safe to transfer
      part.destroy();
      return bytes;
    });
    return {envelope: JSON.parse(text), buffers};
  } finally {
    proxy.destroy();
  }
}

async function handle(message) {
  const {id, op, args} = message;
  try {
    if (op === "mount") return reply(id, (await call("group", {files: mount(message.files)})).envelope);
    if (op === "open_url" || op === "compare_open_url") return await openUrls(id, args, op);
    if (op === "open_hub") return await openHub(id, args);
    if (op === "memory") return reply(id, {ok: true, result: memory()});
    if (op === "open_demo") return await openDemo(id);
    if (JOBS.has(op)) {
      const {envelope} = await call(`${op}_start`, args);
      if (!envelope.ok) return reply(id, envelope);
      jobs.push({id, op, job: envelope.result.job});
      return self.postMessage({id, progress: envelope.result, io: envelope.io});
    }
    const {envelope, buffers} = await call(op, args);
    reply(id, envelope, buffers);
  } catch (error) {
    reply(id, failure("WorkerError", error));
  }
}

async function step(job) {
  const finish = (envelope) => {
    jobs.splice(jobs.indexOf(job), 1);
    cancelled.delete(job.id);
    reply(job.id, envelope);
  };
  try {
    if (cancelled.has(job.id)) {
      await call("job_cancel", {job: job.job});
      return finish({ok: false, error: {kind: "Cancelled", message: "cancelled"}});
    }
    const {envelope} = await call("job_step", {job: job.job});
    if (!envelope.ok || envelope.result.finished) return finish(envelope);
    self.postMessage({id: job.id, progress: envelope.result, io: envelope.io});
  } catch (error) {
    finish(failure("WorkerError", error));
  }
}

// The demo: the file build.py shipped (fetched from our origin, or the service worker's cache
// offline), mounted and read in place like a dropped file. Python builds it only if the file
// cannot be had (a build without it, a failed fetch).
// Fetched and mounted once: opening the demo again reads the same mounted file.
let demoPath = null;
async function openDemo(id) {
  if (!demoPath) {
    try {
      const response = await fetch(new URL(`./${DEMO}`, import.meta.url));
      if (response.ok) [{path: demoPath}] = mount([{file: new File([await response.blob()], DEMO), rel: DEMO}]);
    } catch (error) {
      console.warn(`the demo file could not be fetched (${messageOf(error)}): building it`);
    }
  }
  const {envelope, buffers} = await call("open_demo", demoPath ? {path: demoPath} : {});
  reply(id, envelope, buffers);
}

// Each batch of files gets its own directory, one WORKERFS mount holding every file of the batch
// at its path in the drop (a dropped folder keeps its tree, so shards and their config.json stay
// side by side): names may repeat across batches, and an earlier batch's files stay readable (the
// previous model stays usable while a new one opens). Returns what Python groups (files.py).
function mount(given) {
  const dir = `/mnt/${++mounts}`;
  const used = new Set();
  const blobs = given.map(({file, rel}, i) => {
    // No empty, "." or ".." segments: every file lands inside this batch's directory.
    let name = String(rel || file.name).split("/").filter((part) => part && part !== "." && part !== "..").join("/") || `file-${i}`;
    if (used.has(name)) name = `${i}/${name}`;   // the same name twice in one drop
    used.add(name);
    return {name, data: file};
  });
  pyodide.FS.mkdirTree(dir);
  pyodide.FS.mount(pyodide.FS.filesystems.WORKERFS, {blobs}, dir);
  blobs.forEach(({name, data}) => files.set(`${dir}/${name}`, data));
  return given.map(({file, rel, folder}, i) => ({
    rel: rel || file.name, path: `${dir}/${blobs[i].name}`, size: file.size, folder: Boolean(folder)}));
}

// The expert analysis' second Python (web/compute.mjs; tensorloupe/web/offload.py says why),
// started when an analysis first runs (it helps once it is up: ~1 s from this build's memory
// snapshot, ~3 s without) and kept for the page's life. `?helper=0` on this
// script's address (the page passes its own) turns it off: the tests of the single-Python path.
// The page hears its state: document.body.dataset.helper "starting", "ready" or "failed", and
// dataset.helperBoot how it booted ("snapshot" or "fresh").
const HELPER = new URL(self.location.href).searchParams.get("helper") !== "0";
let helper = null;           // asker() of the second Python's worker, once started
let helperState = "off";

function helperSays(state, booted = null) {
  helperState = state;
  self.postMessage({type: "helper", state, booted});
}

self.tensorloupeHelperAllowed = () => HELPER;
self.tensorloupeHelperReady = () => helperState === "ready";
self.tensorloupeHelperStart = () => {
  if (helper || !HELPER) return;
  const worker = new Worker(new URL("./compute.mjs", import.meta.url), {type: "module"});
  helper = asker(worker, (message) => {
    if (message.type === "ready") return helperSays("ready", message.booted);
    if (message.type === "failed") {
      console.warn(`the second Python did not start (${message.message}): one Python compares every layer`);
      helperSays("failed");
    }
  });
  helperSays("starting");
  worker.onerror = (event) => {
    helperSays("failed");
    helper.failAll(new Error(event.message || "the second Python failed"));
  };
  // It boots from this build's memory snapshot where one is stored (~1 s instead of ~3 s).
  if (!wheelBytes) fetchWheel();
  Promise.all([wheelBytes, SNAPSHOTS ? savedSnapshot() : null])
    .then(([wheel, snapshot]) => worker.postMessage({type: "boot", wheel, snapshot}), () => helperSays("failed"));
};
self.tensorloupeHelperLayer = (data, meta) => {
  // to_js made `data` a copy of its own: its buffer is handed over as it is
  const whole = data.byteOffset === 0 && data.byteLength === data.buffer.byteLength;
  const buffer = whole ? data.buffer : data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength);
  // `settled` lets Python see, without waiting, that the answer is here (offload.Handed.done)
  const handed = {answer: helper({data: buffer, meta: String(meta)}, [buffer]), settled: false};
  handed.answer.then(() => { handed.settled = true; }, () => { handed.settled = true; });
  return handed;
};
// Every URL's probe starts at once (.json files first: Python reads an index before the shards).
// With JSPI Python is called at once and awaits each probe as it reads that file (web/remote.py
// worker_probe), so shard headers are parsed while later ones are still on their way; without
// it, every probe is awaited first and handed over with the request.
async function openUrls(id, args, op = "open_url") {
  const urls = [...(args.urls || []), ...(args.config ? [args.config] : [])];
  try {
    for (const url of [...urls.filter(isJson), ...urls.filter((url) => !isJson(url))]) {
      if (!probing.has(url)) probing.set(url, probe(url));
    }
    let probes = null;
    if (!JSPI) {
      const seen = await Promise.all(urls.map((url) => probing.get(url)));
      probes = Object.fromEntries(urls.map((url, i) => [url, seen[i]]));
    }
    reply(id, (await call(op, {...args, probes})).envelope);
  } catch (error) {
    reply(id, failure("WorkerError", error));
  } finally {
    await Promise.all(urls.map((url) => probing.get(url)));   // none still writing to `heads`
    for (const url of urls) {
      probing.delete(url);
      heads.delete(url);
    }
  }
}

// A Hugging Face model (`org/model[@rev]`, or its page's URL): Python (opening/hubfiles.py hub_plan, asked by
// the page when the name was typed, once) says which /resolve/ URLs to try; the index (small JSON) is fetched whole and names the shards, else the
// single model.safetensors (or the file the user pointed at) is the model; a config.json beside
// it gives top-k. Then the files open as any URLs do. Only the Hub the page names is contacted.
async function openHub(id, {plan}) {
  const fail = (message) => reply(id, failure("UsageError", message));
  try {
    let urls = null;
    if (plan.index) {
      const response = await fetch(plan.index, {cache: "no-store"}).catch(() => null);
      if (response && response.ok) {
        const text = await response.text();
        const shards = (await call("hub_shards", {index: plan.index, text})).envelope;
        if (!shards.ok) return reply(id, shards);
        urls = [plan.index, ...shards.result.urls];
      } else if (!plan.single) {
        return fail(`${plan.repo}@${plan.revision}: the index cannot be fetched (${response ? response.status : "unreachable"})`);
      }
    }
    urls = urls || [plan.single];
    const config = (await probe(plan.config)).status === 206 ? plan.config : null;
    return await openUrls(id, {urls, config});
  } catch (error) {
    reply(id, failure("WorkerError", error));
  }
}

function memory() {
  const heap = pyodide && pyodide._module && pyodide._module.HEAP8;
  return {wasm_bytes: heap ? heap.buffer.byteLength : null};
}

function status(stage, message) {
  self.postMessage({type: "status", stage, message});
}

// --- boot: from a memory snapshot when one of this build is stored, else from scratch ----------
//
// Starting the interpreter costs ~2-4 s of CPU on every visit; a memory snapshot of it with the
// library imported (pyodide's underscore API `_makeSnapshot` / `makeMemorySnapshot` /
// `_loadSnapshot`, pinned version) restores in well under a second. It is a cache, kept in
// IndexedDB under the build's hash. A boot from scratch does nothing for it: the snapshot is made
// afterwards, once the page has left this worker idle for QUIET_MS, by a second worker (this
// script with ?snapshot=make) that boots its own interpreter with the snapshot option, imports
// the library, stores the snapshot and is ended. So a first visit boots like bare Pyodide and the
// next one from the snapshot. (It cannot be made here: by then Python holds JavaScript objects,
// which a snapshot cannot contain.) A snapshot that fails to restore, or one of another build, is
// replaced the same way.
// This script's address says which boot: ?snapshot=0 from scratch without a snapshot, neither
// looked for nor made (tests, bench/browser_open.py's cold figures); ?snapshot=none from scratch
// without looking first (boot.js: this origin never stored one), then one is made; ?snapshot=make
// the maker; none of these: from the stored snapshot if there is one.
const SNAPSHOT = new URL(self.location.href).searchParams.get("snapshot");
const SNAPSHOTS = SNAPSHOT !== "0";
const DB = "tensorloupe-snapshots";
const QUIET_MS = 2000;

// The runtime's two scripts, requested at once: loadPyodide imports pyodide.asm.mjs (1.2 MB) by
// this same address, and finds it loaded (or on its way) instead of asking for it only after the
// snapshot lookup, behind the page's own modules. Not waited for here: loadPyodide's other
// requests (the wasm, the stdlib) start while it loads.
const runtime = import("./pyodide/pyodide.mjs");
import("./pyodide/pyodide.asm.mjs").catch(() => {});   // a failure is loadPyodide's to report

function database() {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(DB, 1);
    open.onupgradeneeded = () => open.result.createObjectStore("snapshots");
    open.onsuccess = () => resolve(open.result);
    open.onerror = () => reject(open.error);
  });
}

async function stored(action) {
  const db = await database();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction("snapshots", "readwrite");
      const request = action(tx.objectStore("snapshots"));
      tx.oncomplete = () => resolve(request && request.result);
      tx.onerror = () => reject(tx.error);
    });
  } finally {
    db.close();
  }
}

async function savedSnapshot() {
  try {
    const found = await stored((store) => store.get(BUILD));
    return found instanceof ArrayBuffer || ArrayBuffer.isView(found) ? found : null;
  } catch {
    return null;   // no IndexedDB (private mode, quota): boot from scratch
  }
}

async function saveSnapshot(bytes) {
  try {
    await stored((store) => { store.clear(); return store.put(bytes, BUILD); });   // one build kept
    return true;
  } catch {
    return false;
  }
}

// The library: Python imports it straight from our wheel (zipimport), whose bytecode build.py
// compiled with Pyodide's interpreter, so nothing is unpacked or compiled at boot (loadPackage
// would also leave JavaScript references the snapshot cannot hold). The file is written again
// after a restore: the snapshot holds the imported modules and sys.path, not the file system.
// Fetched once the runtime's own files have been asked for, while the runtime starts.
let wheelBytes = null;
function fetchWheel() {
  wheelBytes = fetch(new URL(`./${WHEEL}`, import.meta.url)).then(async (response) => {
    if (!response.ok) throw new Error(`the library (${WHEEL}) could not be loaded: ${response.status}`);
    return new Uint8Array(await response.arrayBuffer());
  });
  wheelBytes.catch(() => {});   // reported by installWheel, not as an unhandled rejection
}

async function installWheel() {
  if (!wheelBytes) fetchWheel();
  addLibrary(pyodide, await wheelBytes);
}

// The interpreter, with `extra` options; the wheel is fetched once the runtime's files are asked for.
async function startRuntime(loadPyodide, extra) {
  const started = loadPyodide(runtimeOptions(extra));
  if (!wheelBytes) setTimeout(fetchWheel);   // after loadPyodide's own requests (microtasks)
  return await started;
}

// What every visit's first screen needs, imported before the snapshot is taken: the message
// handlers and what they import, the demo's generator, and the ggml table (the memory block
// prices weights at q8_0 and q4_k). Not every module: with all of them (torch readers,
// tokenizers, compare, ...) the heap outgrew what _loadSnapshot restores ("offset is out of
// bounds"); the rest are imported when first used.
const PRELOAD = `
import tensorloupe.web
import tensorloupe.synthetic
import tensorloupe.dtypes.ggml
`;

async function boot() {
  const started = performance.now();
  // Milliseconds since this worker started, at the end of each stage (bench/browser_open.py shows them).
  const timings = {worker_origin: performance.timeOrigin};
  const mark = (stage) => { timings[`${stage}_ms`] = performance.now() - started; };
  try {
    status("runtime", "Loading the Python runtime…");
    // The stored snapshot is looked up while the runtime's scripts load.
    const lookup = SNAPSHOTS && SNAPSHOT !== "none";
    const [{loadPyodide}, saved] = await Promise.all([runtime, lookup ? savedSnapshot() : null]);
    mark("lookup");
    timings.boot = "fresh";
    if (saved) {
      try {
        pyodide = await startRuntime(loadPyodide, {_loadSnapshot: saved});
        timings.boot = "snapshot";
      } catch (error) {
        console.warn(`the stored snapshot did not restore (${messageOf(error)}): booting from scratch`);
        pyodide = null;
      }
    }
    if (!pyodide) pyodide = await startRuntime(loadPyodide, {});
    mark("runtime");
    status("library", "Loading tensorloupe…");
    await installWheel();
    mark("library");
    dispatch = pyodide.pyimport("tensorloupe.web").dispatch;
    const {envelope, buffers} = await call("hello", {});
    JOBS = new Set(envelope.result.jobs);
    mark("ready");
    self.postMessage({type: "ready", info: {...envelope.result, build: BUILD, jspi: JSPI}, palette: buffers[0], timings},
                     [buffers[0].buffer]);
    snapshotWanted = SNAPSHOTS && timings.boot === "fresh";
    schedule();
    if (!queue.length) idle();
  } catch (error) {
    self.postMessage({type: "fatal", message: `Python could not start: ${messageOf(error)}`});
  }
}

// --- the snapshot, made in the background -------------------------------------------------------
//
// idle() is called whenever nothing is queued or running, settle() whenever a request arrives:
// the maker starts after QUIET_MS without requests (the demo or the first file is on screen by
// then, and the service worker has had its downloads), once per boot from scratch. It then runs
// to the end even if requests come (cut short, its boot would be wasted and redone). What it
// reports ({type: "snapshot", stored, bytes}) goes to the page.
let snapshotWanted = false;
let quiet = null;

function idle() {
  if (snapshotWanted && quiet === null) quiet = setTimeout(startMaker, QUIET_MS);
}

function settle() {
  clearTimeout(quiet);
  quiet = null;
}

function startMaker() {
  quiet = null;
  snapshotWanted = false;
  const address = new URL(self.location.href);
  address.searchParams.set("snapshot", "make");
  const maker = new Worker(address, {type: "module"});
  const done = (report) => {
    maker.terminate();
    self.postMessage({type: "snapshot", ...report});
  };
  maker.onmessage = ({data}) => {
    if (data.type === "snapshot") done(data);
  };
  maker.onerror = (event) => {
    event.preventDefault();
    done({stored: false, error: String(event.message || "the snapshot worker failed")});
  };
}

// The maker's whole job: a fresh interpreter with the snapshot option, the library imported
// (sys.path holds the wheel), the memory copied and stored.
async function makeSnapshot() {
  try {
    const {loadPyodide} = await runtime;
    pyodide = await startRuntime(loadPyodide, {_makeSnapshot: true});
    await installWheel();
    pyodide.runPython(PRELOAD);
    const snapshot = pyodide.makeMemorySnapshot();
    self.postMessage({type: "snapshot", stored: await saveSnapshot(snapshot), bytes: snapshot.byteLength});
  } catch (error) {
    self.postMessage({type: "snapshot", stored: false, error: messageOf(error)});
  }
}

if (SNAPSHOT === "make") makeSnapshot();
else boot();
