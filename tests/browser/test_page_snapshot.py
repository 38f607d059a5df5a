"""Return visits boot from a Pyodide memory snapshot stored by the first visit (IndexedDB, keyed
by the build); the first visit boots from scratch and does nothing for the snapshot during its
boot: a second worker makes it once the page has left Python idle; a snapshot that does not
restore is replaced the same way; every path opens the demo and shows its values."""

from __future__ import annotations

import json

import pytest

from conftest import App, CHROMIUM_ARGS, VIEWPORT  # noqa: F401  (the shared page helpers)

import tensorloupe
from tensorloupe import synthetic

CORRUPT = """async () => {
  const db = await new Promise((resolve, reject) => {
    const open = indexedDB.open("tensorloupe-snapshots", 1);
    open.onsuccess = () => resolve(open.result);
    open.onerror = () => reject(open.error);
  });
  const tx = db.transaction("snapshots", "readwrite");
  const store = tx.objectStore("snapshots");
  const keys = await new Promise((resolve) => { const r = store.getAllKeys(); r.onsuccess = () => resolve(r.result); });
  for (const key of keys) store.put(new Uint8Array(4096).fill(7).buffer, key);
  await new Promise((resolve) => { tx.oncomplete = resolve; });
  db.close();
  return keys.length;
}"""

# Which of the body's boot attributes changed, in order (python ready, the model shown, the
# snapshot stored): installed before the page's own scripts run.
ORDER = """(() => {
  window.bootOrder = [];
  new MutationObserver((changes) => {
    for (const change of changes) window.bootOrder.push(change.attributeName);
  }).observe(document, {subtree: true, attributes: true,
                        attributeFilter: ["data-python", "data-model", "data-snapshot"]});
})();"""

TENSOR = "model.layers.0.block_sparse_moe.experts.1.w1.weight"


@pytest.fixture(scope="module")
def context(browser):
    context = browser.new_context(viewport=VIEWPORT)   # one profile: IndexedDB outlives pages
    context.add_init_script(ORDER)
    context.workers = []    # the worker scripts the page's workers were started from, in order
    context.on("request", lambda request: "worker.mjs" in request.url and request.service_worker is None
               and context.workers.append(request.url))   # (not the service worker's precache)
    yield context
    context.close()


def visit(context, server, query="") -> App:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    app = App(page, f"{server}{query}")  # server ends with "/"
    app.goto()
    app.select(TENSOR)      # the demo's values, computed by the restored (or fresh) Python
    expected = tensorloupe.sample(tensorloupe.open(synthetic.demo_bytes()).tensor(TENSOR)).stats
    assert app.stats()["mean"] == expected.mean and app.stats()["max"] == expected.max
    assert not errors, errors
    return app


def boot(app) -> str:
    return app.page.evaluate("document.body.dataset.boot")


def test_first_visit_stores_a_snapshot_and_the_next_boots_from_it(context, server):
    first = visit(context, server)
    assert boot(first) == "fresh"
    # Its boot neither looked for a snapshot (nothing was ever stored here: ?snapshot=none) nor
    # made one (no preload or snapshot stage before ready).
    assert context.workers[0].endswith("/worker.mjs?snapshot=none")
    stages = json.loads(first.page.evaluate("document.body.dataset.bootStages"))
    assert "ready_ms" in stages and "snapshot_ms" not in stages and "preload_ms" not in stages
    first.page.wait_for_selector("body[data-snapshot=stored]", state="attached", timeout=120_000)
    # Made by a second worker, after the demo was on screen (the page then left Python idle).
    assert [url.split("/")[-1] for url in context.workers] == ["worker.mjs?snapshot=none", "worker.mjs?snapshot=make"]
    order = first.page.evaluate("window.bootOrder")
    assert order.index("data-python") < order.index("data-model") < order.index("data-snapshot"), order
    first.page.close()
    again = visit(context, server)
    assert boot(again) == "snapshot"
    assert context.workers[-1].endswith("/worker.mjs")       # told to look for it
    assert again.page.evaluate("document.body.dataset.snapshot") is None   # nothing to store
    again.page.close()


def test_a_snapshot_that_does_not_restore_is_replaced(context, server):
    page = context.new_page()
    page.goto(server)
    assert page.evaluate(CORRUPT) == 1
    page.close()
    fallback = visit(context, server)
    assert boot(fallback) == "fresh"
    fallback.page.wait_for_selector("body[data-snapshot=stored]", state="attached", timeout=120_000)
    fallback.page.close()
    again = visit(context, server)
    assert boot(again) == "snapshot"
    again.page.close()


def test_snapshot_0_boots_from_scratch(context, server):
    app = visit(context, server, "?snapshot=0")
    assert boot(app) == "fresh"
    assert app.page.evaluate("document.body.dataset.snapshot") is None
    app.page.close()
