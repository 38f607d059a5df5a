"""Return visits boot from a Pyodide memory snapshot stored by the first visit (IndexedDB, keyed
by the build); a snapshot that does not restore is replaced by a boot from scratch; both paths
open the demo and show its values."""

from __future__ import annotations

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

TENSOR = "model.layers.0.block_sparse_moe.experts.1.w1.weight"


@pytest.fixture(scope="module")
def context(browser):
    context = browser.new_context(viewport=VIEWPORT)   # one profile: IndexedDB outlives pages
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
    first.page.wait_for_selector("body[data-snapshot=stored]", state="attached", timeout=120_000)
    first.page.close()
    again = visit(context, server)
    assert boot(again) == "snapshot"
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
