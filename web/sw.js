// The service worker: precaches the whole app (page, wheel, the Pyodide runtime) under a cache
// named by the build's content hash, then answers from that cache first. After one visit the app
// starts and works with no network. build.py fills in VERSION and PRECACHE.

const VERSION = "__TENSORLOUPE_BUILD__";
const CACHE = `tensorloupe-${VERSION}`;
const PRECACHE = "__TENSORLOUPE_PRECACHE__";

self.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    // "no-cache" revalidates with the server: never a stale copy from the HTTP cache.
    await cache.addAll(PRECACHE.map((url) => new Request(url, {cache: "no-cache"})));
    await self.skipWaiting();
  })());
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      if (name.startsWith("tensorloupe-") && name !== CACHE) await caches.delete(name);
    }
    await self.clients.claim();
  })());
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  // Only our own files; Range requests (model files read in slices) go straight to the network.
  if (request.method !== "GET" || url.origin !== self.location.origin || request.headers.has("range")) return;
  event.respondWith((async () => {
    const cache = await caches.open(CACHE);
    const hit = await cache.match(request, {ignoreSearch: true})
      || (request.mode === "navigate" ? await cache.match("./") : undefined);
    // A cached response keeps its own address; for worker.mjs?jspi=0 (or ?snapshot=0) that would
    // become the worker's location and lose the flag: answer with a copy that has no address.
    if (hit && url.search) return new Response(hit.body, {status: hit.status, statusText: hit.statusText, headers: hit.headers});
    return hit || fetch(request);
  })());
});
