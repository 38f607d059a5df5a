"""Offline PWA, installability and the privacy policy, in a persistent Chromium profile."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build_module():
    import build
    return build


@pytest.fixture(scope="module")
def visited(persistent, dist):
    """One online visit: Python ready, the service worker installed and controlling the page."""
    app, context, httpd, requests = persistent
    app.goto()
    app.page.wait_for_selector("body[data-offline-ready=true]", state="attached", timeout=60_000)
    app.page.wait_for_function("() => navigator.serviceWorker.controller !== null", timeout=60_000)
    return persistent


def test_service_worker_precaches_the_whole_app_in_a_versioned_cache(visited, dist):
    app = visited[0]
    build = json.loads((dist / "build.json").read_text())
    caches = app.page.evaluate("""async () => {
        const out = {};
        for (const name of await caches.keys()) {
            const cache = await caches.open(name);
            out[name] = (await cache.keys()).map(r => new URL(r.url).pathname);
        }
        return out;
    }""")
    assert list(caches) == [f"tensorloupe-{build['version']}"]
    cached = set(next(iter(caches.values())))
    for name in build["files"]:
        if name not in ("sw.js", "build.json"):
            assert f"/{name}" in cached, name
    assert {"/pyodide/pyodide.asm.wasm", "/pyodide/python_stdlib.zip", f"/{build['wheel']}", "/"} <= cached
    assert app.page.is_visible("#offline")


def test_installable_in_chromium(visited):
    app = visited[0]
    cdp = app.page.context.new_cdp_session(app.page)
    errors = cdp.send("Page.getInstallabilityErrors")["installabilityErrors"]
    assert errors == [], errors
    manifest = cdp.send("Page.getAppManifest")
    assert manifest["errors"] == [], manifest["errors"]
    parsed = json.loads(manifest["data"])
    assert {icon["sizes"] for icon in parsed["icons"]} >= {"192x192", "512x512"}
    assert parsed["display"] == "standalone" and parsed["start_url"] == "./"


def test_content_security_policy_blocks_other_origins(visited):
    app, _, _, requests = visited
    policy = app.page.get_attribute('meta[http-equiv="Content-Security-Policy"]', "content")
    assert "default-src 'self'" in policy and "connect-src 'self'" in policy
    assert "http" not in policy and "*" not in policy
    assert policy == build_module().CSP, "the page's policy and the server's header differ"
    result = app.page.evaluate("""() => Promise.all([
        new Promise(resolve => document.addEventListener(
            'securitypolicyviolation', e => resolve(e.effectiveDirective), {once: true})),
        fetch('http://127.0.0.9:9/tracker').then(() => true, () => false),
    ]).then(([violation, fetched]) => ({fetched, violation}))""")
    assert result == {"fetched": False, "violation": "connect-src"}
    assert not any("127.0.0.9" in url for url in requests.urls)


def test_after_one_visit_the_app_works_with_no_network(visited):
    app, context, httpd, requests = visited
    # No network at all: the browser is offline and the server is gone.
    context.set_offline(True)
    threading.Thread(target=httpd.shutdown, daemon=True).start()
    httpd.socket.close()
    app.page.reload()
    # While Python starts the page says so (boot takes seconds: this state is there to see).
    app.page.wait_for_selector("#status[data-state=booting]", timeout=10_000)
    assert "Python" in app.page.inner_text("#status") or "tensorloupe" in app.page.inner_text("#status")
    assert app.page.is_visible("#busy-bar")
    app.wait_ready()
    assert app.fact("tensor_count") == "127"
    app.select("model.layers.0.block_sparse_moe.experts.1.w3.weight")
    assert app.page.get_attribute("#heatmap", "data-rows") == "192"
    app.tab("moe")
    assert app.page.locator("#moe-grid tbody tr").count() == 4
    app.screenshot("offline-experts")
    context.set_offline(False)


def test_the_app_works_from_a_sub_path(browser, dist, tmp_path):
    """As on a GitHub Pages project site: the app lives under /project/, not at the root."""
    (tmp_path / "project").symlink_to(dist, target_is_directory=True)
    module = build_module()
    httpd = module.make_server(tmp_path, port=0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    context = browser.new_context()
    seen: list[str] = []
    context.on("request", lambda request: seen.append(request.url))
    try:
        page = context.new_page()
        page.goto(f"{base}/project/")
        page.wait_for_selector("body[data-python=ready]", state="attached", timeout=90_000)
        page.wait_for_function("() => document.body.dataset.model === 'demo-moe.safetensors'")
        page.wait_for_selector("body[data-offline-ready=true]", state="attached", timeout=60_000)
        scope = page.evaluate("navigator.serviceWorker.ready.then(r => r.scope)")
        assert scope == f"{base}/project/"
        assert seen and all(url.startswith(f"{base}/project/") for url in seen), \
            [url for url in seen if not url.startswith(f"{base}/project/")]
    finally:
        context.close()
        httpd.shutdown()
        httpd.server_close()
