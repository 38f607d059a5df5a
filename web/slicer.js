// Cuts and reads slices of a File for the Python worker (worker.mjs tensorloupeSlices), in a
// thread of its own. In Chromium the cost of a vectored read is in cutting it: each File.slice()
// and each Blob made of slices is registered with the browser process, ~0.1-0.2 ms per slice on
// the thread that makes it. Done here, that cost runs beside Python's computing (the expert
// analysis reads the next layer while it compares the experts of this one) and, split between
// two of these workers, on both cores while Python waits.
//
// Worker.mjs -> here: {id, file, ranges: [[offset, length], ...]}
// Here -> worker.mjs: {id, data} (the slices' bytes back to back, transferred) or {id, error}

import {messageOf} from "./runtime.mjs";

// Chromium reads the items of one Blob in turn but several Blobs side by side: 4,096 slices of
// 2 KiB took 310-380 us each as one Blob, 185-195 us in Blobs of 16-64 slices.
const SLICES_PER_BLOB = 32;

self.onmessage = async ({data: {id, file, ranges}}) => {
  try {
    const reads = [];
    for (let first = 0; first < ranges.length; first += SLICES_PER_BLOB) {
      const group = ranges.slice(first, first + SLICES_PER_BLOB);
      reads.push(new Blob(group.map(([offset, n]) => file.slice(offset, offset + n))).arrayBuffer());
    }
    const buffer = join(await Promise.all(reads));
    self.postMessage({id, data: buffer}, [buffer]);
  } catch (error) {
    self.postMessage({id, error: messageOf(error)});
  }
};

function join(buffers) {
  if (buffers.length === 1) return buffers[0];
  const joined = new Uint8Array(buffers.reduce((total, b) => total + b.byteLength, 0));
  let at = 0;
  for (const buffer of buffers) {
    joined.set(new Uint8Array(buffer), at);
    at += buffer.byteLength;
  }
  return joined.buffer;
}
