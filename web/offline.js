// Offline: the service worker (sw.js) precaches the whole app, Pyodide included. Once it is
// ready the "works offline" chip shows; a new version taking over offers a reload.

import {$} from "./dom.js";

export function registerServiceWorker() {
  if (!("serviceWorker" in navigator)) return;
  const updating = Boolean(navigator.serviceWorker.controller);
  navigator.serviceWorker.register("sw.js").then(() => navigator.serviceWorker.ready).then(() => {
    $("offline").hidden = false;
    document.body.dataset.offlineReady = "true";
  }).catch(() => { /* no offline support (e.g. a private window): the app still works online */ });
  // A new version took over the cache while this one runs: offer a reload rather than mix them.
  navigator.serviceWorker.addEventListener("controllerchange", () => {
    if (!updating) return;
    const chip = $("offline");
    chip.textContent = "new version: reload";
    chip.classList.add("update");
    chip.addEventListener("click", () => location.reload(), {once: true});
  });
}
