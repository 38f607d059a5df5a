// The service worker: precaches the whole app (page, wheel, the Pyodide runtime) under a cache
// named by the build's content hash, then answers from that cache first. After one visit the app
// starts and works with no network. build.py fills in VERSION and PRECACHE.
// It also answers the page's streamed "Save as" downloads (SAVES below).

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

// "Save as", streamed (web/savetargets.js): a page of this origin registers a one-time stream
// {type: "save-stream", id, name, size} with a MessagePort; the fetch of SAVE_PATH<id>/<name>
// (the page's hidden frame) is answered with a download whose body asks the page for each chunk
// ("pull") when its queue is empty, so at most one chunk waits here. The page's "abort" errors the
// stream (the browser marks the download failed); the user cancelling the download tells the page.
const SAVE_PATH = new URL("__save__/", self.registration.scope).pathname;
const SAVES = new Map();

self.addEventListener("message", (event) => {
  const data = event.data;
  if (event.origin !== self.location.origin || data?.type !== "save-stream" || typeof data.id !== "string"
      || !event.ports[0]) return;
  SAVES.set(data.id, {port: event.ports[0], name: String(data.name), size: Number(data.size)});
  event.ports[0].postMessage({type: "registered"});
});

function saveResponse(id) {
  const save = SAVES.get(id);
  SAVES.delete(id);                        // one fetch per stream
  if (!save) return new Response("no such save", {status: 404, headers: {"Content-Type": "text/plain"}});
  const {port, name, size} = save;
  let arrived = null;
  const body = new ReadableStream({
    start(controller) {
      port.onmessage = ({data}) => {
        if (data.type === "chunk") controller.enqueue(data.chunk);
        else if (data.type === "end") { controller.close(); port.close(); }
        else if (data.type === "abort") { controller.error(new Error("the save was cancelled")); port.close(); }
        arrived?.();
      };
    },
    pull() {
      port.postMessage({type: "pull"});
      return new Promise((resolve) => { arrived = resolve; });
    },
    cancel() {
      port.postMessage({type: "cancelled"});
      port.close();
    },
  }, {highWaterMark: 1});
  const headers = {"Content-Type": "application/octet-stream", "X-Content-Type-Options": "nosniff",
                   "Content-Disposition": `attachment; filename*=UTF-8''${encodeURIComponent(name)}`};
  if (Number.isSafeInteger(size) && size >= 0) headers["Content-Length"] = String(size);
  return new Response(body, {headers});
}

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method === "GET" && url.origin === self.location.origin && url.pathname.startsWith(SAVE_PATH)) {
    event.respondWith(saveResponse(url.pathname.slice(SAVE_PATH.length).split("/")[0]));
    return;
  }
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
