// Starts the Python worker while the page's head is parsed, before app.js and its modules load:
// Pyodide's boot (seconds) then starts with the page instead of after it. worker-client.js takes
// the worker over and replays what it said before then. A classic script, run where it stands.
// ?jspi=0 on the page's address: the worker reads one range at a time (the tested fallback);
// ?snapshot=0: it boots from scratch without a memory snapshot (tests, benchmarks);
// ?helper=0: the expert analysis runs on one Python, without the second (web/compute.mjs).
(() => {
  const script = new URL("./worker.mjs", document.baseURI);
  const params = new URLSearchParams(location.search);
  for (const key of ["jspi", "snapshot", "helper"]) {
    if (params.get(key) === "0") script.searchParams.set(key, "0");
  }
  // No memory snapshot was ever stored from this origin (worker-client.js notes each one): the
  // worker starts the runtime at once instead of looking in IndexedDB first (~0.1 s of a first
  // visit). A stale note costs nothing: the worker finds no snapshot (or one of another build)
  // and boots from scratch, as it would have.
  if (!script.searchParams.has("snapshot") && !snapshotNoted()) script.searchParams.set("snapshot", "none");
  const worker = new Worker(script, {type: "module"});
  const early = [];             // message and error events, in order, until worker-client.js takes over
  worker.onmessage = worker.onerror = (event) => early.push(event);
  window.tensorloupeWorker = {worker, early};

  function snapshotNoted() {
    try {
      return localStorage.getItem("tensorloupe-snapshot") !== null;
    } catch {
      return true;              // no storage to ask: let the worker look
    }
  }
})();
