// The Python side of the page: boots Pyodide (served from our own origin), loads the tensorloupe
// wheel, mounts dropped files with WORKERFS (Python reads them by slices with plain open/seek/read)
// and answers the page's requests through tensorloupe.web.dispatch. Python runs here, never on
// the page's thread, so long work cannot freeze the page.
//
// Page -> worker:  {id, op, args}            a request (op "mount" carries `files`:
//                                            [{file: File, rel: "folder/name", folder: bool}])
//                                            op "open_url" ({urls, config}) is probed here first
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

const BUILD = "__TENSORLOUPE_BUILD__";
const WHEEL = "__TENSORLOUPE_WHEEL__";

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
tick.port1.onmessage = () => {
  scheduled = false;
  if (queue.length) handle(queue.shift());
  else if (jobs.length) step(jobs[0]);
  if (queue.length || jobs.length) schedule();
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

function call(op, args) {
  const proxy = dispatch(op, JSON.stringify(args ?? {}));
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

function handle(message) {
  const {id, op, args} = message;
  try {
    if (op === "mount") return reply(id, call("group", {files: mount(message.files)}).envelope);
    if (op === "open_url") return openUrls(id, args);
    if (op === "memory") return reply(id, {ok: true, result: memory()});
    if (JOBS.has(op)) {
      const {envelope} = call(`${op}_start`, args);
      if (!envelope.ok) return reply(id, envelope);
      jobs.push({id, op, job: envelope.result.job});
      return self.postMessage({id, progress: envelope.result, io: envelope.io});
    }
    const {envelope, buffers} = call(op, args);
    reply(id, envelope, buffers);
  } catch (error) {
    reply(id, {ok: false, error: {kind: "WorkerError", message: String(error && error.message || error)}});
  }
}

function step(job) {
  const finish = (envelope) => {
    jobs.splice(jobs.indexOf(job), 1);
    cancelled.delete(job.id);
    reply(job.id, envelope);
  };
  try {
    if (cancelled.has(job.id)) {
      call("job_cancel", {job: job.job});
      return finish({ok: false, error: {kind: "Cancelled", message: "cancelled"}});
    }
    const {envelope} = call("job_step", {job: job.job});
    if (!envelope.ok || envelope.result.finished) return finish(envelope);
    self.postMessage({id: job.id, progress: envelope.result, io: envelope.io});
  } catch (error) {
    finish({ok: false, error: {kind: "WorkerError", message: String(error && error.message || error)}});
  }
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
  return given.map(({file, rel, folder}, i) => ({
    rel: rel || file.name, path: `${dir}/${blobs[i].name}`, size: file.size, folder: Boolean(folder)}));
}

// A synchronous XHR cannot be stopped once sent: sent to a server that ignores Range it would
// download the whole file before Python could refuse it. So the first request to each URL is
// this asynchronous fetch of byte 0, aborted as soon as the answer is not 206; Python (web/
// remote.py) judges what it saw and reads everything else by synchronous XHR. Only the URLs the
// user gave are ever requested.
async function probe(url) {
  const controller = new AbortController();
  try {
    const response = await fetch(url, {headers: {Range: "bytes=0-0"}, cache: "no-store", signal: controller.signal});
    const seen = {status: response.status, reason: response.statusText, total: null};
    if (response.status === 206) {
      seen.total = rangeTotal(response.headers.get("Content-Range"));
      await response.arrayBuffer();
      if (seen.total === null) {
        // Content-Range hidden by CORS: Content-Length of a HEAD is always readable.
        const head = await fetch(url, {method: "HEAD", cache: "no-store"});
        const length = head.ok ? head.headers.get("Content-Length") : null;
        if (length !== null && /^\d+$/.test(length)) seen.total = Number(length);
      }
    } else {
      controller.abort();
    }
    return seen;
  } catch (error) {
    return {error: String(error && error.message || error)};
  }
}

function rangeTotal(header) {
  const match = /\/(\d+)\s*$/.exec(header || "");
  return match ? Number(match[1]) : null;
}

async function openUrls(id, args) {
  try {
    const urls = [...(args.urls || []), ...(args.config ? [args.config] : [])];
    const seen = await Promise.all(urls.map(probe));
    const probes = Object.fromEntries(urls.map((url, i) => [url, seen[i]]));
    reply(id, call("open_url", {...args, probes}).envelope);
  } catch (error) {
    reply(id, {ok: false, error: {kind: "WorkerError", message: String(error && error.message || error)}});
  }
}

function memory() {
  const heap = pyodide && pyodide._module && pyodide._module.HEAP8;
  return {wasm_bytes: heap ? heap.buffer.byteLength : null};
}

function status(stage, message) {
  self.postMessage({type: "status", stage, message});
}

async function boot() {
  const started = performance.now();
  const timings = {};
  try {
    status("runtime", "Loading the Python runtime…");
    const {loadPyodide} = await import("./pyodide/pyodide.mjs");
    pyodide = await loadPyodide({
      indexURL: new URL("./pyodide/", import.meta.url).href,
      stdout: (text) => console.log(text),
      stderr: (text) => console.warn(text),
    });
    timings.runtime_ms = performance.now() - started;
    status("library", "Loading tensorloupe…");
    // By URL, from our origin: never a package name (a name not in the lock goes off-site).
    await pyodide.loadPackage(new URL(`./${WHEEL}`, import.meta.url).href, {messageCallback: () => {}});
    dispatch = pyodide.pyimport("tensorloupe.web").dispatch;
    const {envelope, buffers} = call("hello", {});
    JOBS = new Set(envelope.result.jobs);
    timings.ready_ms = performance.now() - started;
    self.postMessage({type: "ready", info: {...envelope.result, build: BUILD}, palette: buffers[0], timings},
                     [buffers[0].buffer]);
    schedule();
  } catch (error) {
    self.postMessage({type: "fatal", message: `Python could not start: ${error && error.message || error}`});
  }
}

boot();
