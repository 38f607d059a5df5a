// The page's side of the Python worker (worker.mjs), which boot.js started with the page
// (Pyodide boots while the user picks a file): numbers requests, and settles each one's promise
// with the worker's reply.
// Boot messages, the bytes-read counter and the busy indicator are the caller's (hooks).

export class RequestError extends Error {
  constructor(error) {
    super(error.message);
    this.kind = error.kind;       // the library's error class ("FormatError", "Cancelled", ...)
    this.detail = error.detail;
  }
}

// hooks: {status(message), ready({info, palette, timings}), fatal(message), io(io),
//         busy: {start(id, label), stop(id)}}
export function startWorker(hooks) {
  const {worker, early} = window.tensorloupeWorker;
  const pending = new Map();
  let nextId = 1;
  const showPending = () => { document.body.dataset.pending = String(pending.size); };

  // Ask the worker for `op`. Resolves to {result, buffers}; rejects with a RequestError.
  // files: File objects to mount (op "mount"); label: what the busy indicator says if it takes
  // long; quiet: no busy indicator (the caller shows its own progress); onProgress(progress):
  // a job's progress after each step; onId(id): the request's id, to cancel it.
  function request(op, args = {}, {files, label = "Working…", quiet = false, onProgress, onId} = {}) {
    const id = nextId++;
    onId?.(id);
    return new Promise((resolve, reject) => {
      pending.set(id, {resolve, reject, onProgress});
      showPending();
      if (!quiet) hooks.busy.start(id, label);
      worker.postMessage(files ? {id, op, args, files} : {id, op, args});
    });
  }

  // Stop request `id` (a job, or a request still queued): it rejects with kind "Cancelled".
  function cancel(id) {
    worker.postMessage({type: "cancel", id});
  }

  worker.onmessage = ({data}) => {
    if (data.type === "status") return hooks.status(data.message);
    if (data.type === "ready") return hooks.ready(data);
    if (data.type === "fatal") return hooks.fatal(data.message);
    if (data.type === "snapshot") {
      if (data.stored) noteSnapshot();
      return hooks.snapshot?.(data);
    }
    if (data.type === "helper") {
      document.body.dataset.helper = data.state;
      if (data.booted) document.body.dataset.helperBoot = data.booted;
      return;
    }
    const entry = pending.get(data.id);
    if (!entry) return;          // a late reply to a request nobody waits for any more
    if (data.io) hooks.io(data.io);
    if (data.progress) return entry.onProgress?.(data.progress);
    pending.delete(data.id);
    showPending();
    hooks.busy.stop(data.id);
    if (data.ok) entry.resolve({result: data.result, buffers: data.buffers || []});
    else entry.reject(new RequestError(data.error));
  };
  worker.onerror = (event) => hooks.fatal(`The Python worker failed: ${event.message || "unknown error"}`);
  // What the worker said before this module ran (its boot started with the page: boot.js).
  for (const event of early.splice(0)) (event.type === "error" ? worker.onerror : worker.onmessage)(event);
  return {request, cancel};
}

// The worker stored a memory snapshot: the next visit's boot.js tells it to look for one.
function noteSnapshot() {
  try {
    localStorage.setItem("tensorloupe-snapshot", "stored");
  } catch {
    /* no storage: the next visit looks anyway (boot.js) */
  }
}
