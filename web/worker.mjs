// The Python side of the page: boots Pyodide (served from our own origin), loads the tensorloupe
// wheel, mounts dropped files with WORKERFS (Python reads them by slices with plain open/seek/read)
// and answers the page's requests through tensorloupe.web.dispatch. Python runs here, never on
// the page's thread, so long work cannot freeze the page.
//
// Page -> worker:  {id, op, args}            a request (op "mount" carries File objects in `files`)
//                  {type: "cancel", id}      stop request `id` (a job, or a request still queued)
// Worker -> page:  {type: "status", stage, message}   boot progress
//                  {type: "ready", info, palette, timings} / {type: "fatal", message}
//                  {id, ok, result | error, io, buffers}  a reply (buffers are transferred)
//                  {id, progress: {done, total, ...}, io} a job's progress after each step
//
// Jobs are long requests done in steps, one step per task, so that cancel messages and other
// requests get in between: the page asks for `op`, Python answers `<op>_start`, `<op>_step`
// (progress, and the result with the last step) and `<op>_cancel`.

const BUILD = "__TENSORLOUPE_BUILD__";
const WHEEL = "__TENSORLOUPE_WHEEL__";

const JOBS = new Set(["exact", "moe"]);   // exact statistics, the experts' redundancy analysis
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
    if (op === "mount") return reply(id, {ok: true, result: mount(message.files)});
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
      call(`${job.op}_cancel`, {job: job.job});
      return finish({ok: false, error: {kind: "Cancelled", message: "cancelled"}});
    }
    const {envelope} = call(`${job.op}_step`, {job: job.job});
    if (!envelope.ok || envelope.result.finished) return finish(envelope);
    self.postMessage({id: job.id, progress: envelope.result, io: envelope.io});
  } catch (error) {
    finish({ok: false, error: {kind: "WorkerError", message: String(error && error.message || error)}});
  }
}

// Each batch of files gets its own directory: names may repeat across batches, and an earlier
// batch's files stay readable (the previous model stays usable while a new one opens).
function mount(files) {
  const dir = `/mnt/${++mounts}`;
  pyodide.FS.mkdirTree(dir);
  pyodide.FS.mount(pyodide.FS.filesystems.WORKERFS, {files}, dir);
  return {files: files.map((file) => ({name: file.name, size: file.size, path: `${dir}/${file.name}`}))};
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
    timings.ready_ms = performance.now() - started;
    self.postMessage({type: "ready", info: {...envelope.result, build: BUILD}, palette: buffers[0], timings},
                     [buffers[0].buffer]);
    schedule();
  } catch (error) {
    self.postMessage({type: "fatal", message: `Python could not start: ${error && error.message || error}`});
  }
}

boot();
