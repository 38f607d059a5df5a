// A mounted File's ranges, read for Python all at once by a pool of slicers (web/slicer.js).

export const files = new Map();     // mounted path -> File (worker.mjs mount)

// Python's vectored reads (web/blobs.py, web/remote.py): every slice or Range request started
// together; Python waits for all of them in one suspension (run_sync), or starts them early and
// waits later (a prefetch: blobs.py). A File's slices are cut and read by SLICERS workers
// (web/slicer.js: why), each taking a share of the ranges and answering with one buffer of its
// slices (one copy into Python per share instead of one conversion per slice).
const SLICERS = 2;
const MIN_SLICES_TO_SHARE = 64;   // fewer are read by one slicer: a message costs more than they do
const slicers = [];

// Requests to a worker that answers each with {id, data} or {id, error}: `ask(message,
// transfer)` is a promise of the answer's data; other messages go to `other`. (The slicers and
// the second Python.)
export function asker(worker, other = () => {}) {
  const waiting = new Map();
  let last = 0;
  worker.onmessage = ({data: answer}) => {
    const pending = waiting.get(answer.id);
    if (!pending) return other(answer);
    waiting.delete(answer.id);
    if (answer.error !== undefined) pending.reject(new Error(answer.error));
    else pending.resolve(answer.data);
  };
  const ask = (message, transfer = []) => new Promise((resolve, reject) => {
    const id = ++last;
    waiting.set(id, {resolve, reject});
    worker.postMessage({...message, id}, transfer);
  });
  ask.failAll = (error) => {
    for (const pending of waiting.values()) pending.reject(error);
    waiting.clear();
  };
  return ask;
}

function slicer(k) {
  slicers[k] ??= asker(new Worker(new URL("./slicer.js", import.meta.url), {type: "module"}));
  return slicers[k];
}

self.tensorloupeSlices = async (path, ranges) => {
  const file = files.get(path);
  ranges = ranges.map(([offset, n]) => [offset, n]);   // plain arrays, whatever Python sent
  const shares = ranges.length < MIN_SLICES_TO_SHARE ? 1 : SLICERS;
  const per = Math.ceil(ranges.length / shares);
  const parts = [];
  for (let k = 0; k < shares; k++) parts.push(slicer(k)({file, ranges: ranges.slice(k * per, (k + 1) * per)}));
  return Promise.all(parts);        // the shares' bytes, in order: Python joins them
};
