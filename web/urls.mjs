// A checkpoint on a server, read by Range requests: each URL's first request (the probe) and
// the ranges Python asks for all at once (web/remote.py). Only the URLs the user gave are requested.

import {messageOf} from "./runtime.mjs";

export const heads = new Map();     // url -> the probe's first bytes (the header), until Python took them
export const probing = new Map();   // url -> its probe (a promise), while the URLs are being opened

// A synchronous XHR cannot be stopped once sent: sent to a server that ignores Range it would
// download the whole file before Python could refuse it. So the first request to each URL is
// this asynchronous fetch of its first bytes, aborted as soon as the answer is not 206; Python
// (web/remote.py) judges what it saw and reads everything else by synchronous XHR. Only the URLs
// the user gave are ever requested.
export async function probe(url) {
  const controller = new AbortController();
  try {
    // The first 64 KiB, not one byte: the header every reader starts with comes in this request.
    // A .json file (a shard index, config.json) is read whole, up to JSON_BYTES: its rest would
    // be a request queued behind every shard's probe.
    const end = (isJson(url) ? JSON_BYTES : HEAD_BYTES) - 1;
    const response = await fetch(url, {headers: {Range: `bytes=0-${end}`}, cache: "no-store", signal: controller.signal});
    const seen = {status: response.status, reason: response.statusText, total: null};
    if (response.status === 206) {
      // Python checks the head's bytes against it (web/remote.py), as every later reply.
      seen.contentRange = response.headers.get("Content-Range");
      seen.total = rangeTotal(seen.contentRange);
      heads.set(url, await response.arrayBuffer());
      seen.head = true;
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
    return {error: messageOf(error)};
  }
}

const HEAD_BYTES = 1 << 16;   // = tensorloupe.source.remote.HEAD_BYTES
const JSON_BYTES = 16 << 20;  // transformers' indexes: a few MB for the largest models
export const isJson = (url) => new URL(url).pathname.toLowerCase().endsWith(".json");

function rangeTotal(header) {
  const match = /\/(\d+)\s*$/.exec(header || "");
  return match ? Number(match[1]) : null;
}

self.tensorloupeRanges = (url, ranges) => Promise.all(ranges.map(async ([first, last]) => {
  const controller = new AbortController();
  try {
    const response = await fetch(url, {headers: {Range: `bytes=${first}-${last}`}, cache: "no-store", signal: controller.signal});
    const answer = {status: response.status, reason: response.statusText,
                    contentRange: response.headers.get("Content-Range"), data: null};
    if (response.status === 206) answer.data = await response.arrayBuffer();
    else controller.abort();   // never download a whole file that ignores Range
    return answer;
  } catch (error) {
    return {error: messageOf(error)};
  }
}));
// Files beside the URLs the user gave, named by Python (web/beside_urls.py: an adapter's
// adapter_config.json, a diffusers folder's files, all in the given URL's folder on its server):
// probed at once as the given URLs are, awaited by Python in one suspension (JSPI).
self.tensorloupeProbeAll = (urls) => Promise.all(Array.from(urls, (url) => probe(url)));
// Their first bytes, for those Python did not open (the others were taken when opened).
self.tensorloupeForget = (urls) => {
  for (const url of urls) heads.delete(url);
};
// A URL's probe, for Python to await (web/remote.py worker_probe); null if it was not probed.
self.tensorloupeProbe = (url) => probing.get(url) || Promise.resolve(null);
self.tensorloupeHead = (url) => {
  const head = heads.get(url);
  heads.delete(url);
  return head;
};
