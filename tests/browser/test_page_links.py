"""Deep links: the address holds the opened URL(s), the tensor and the tab, so a link reproduces
what is shown; back/forward walk the selections; a file from the disk cannot be linked, and
copying the link says so."""

import json
import urllib.parse

import pytest

import build
import tensorloupe
from conftest import STEP_TIMEOUT_MS

SERVED = "browser.safetensors"


@pytest.fixture(scope="module")
def site(dist, files):
    import threading
    server = build.make_server(dist, port=0, files={SERVED: files["safetensors"]})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def query(page) -> dict:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)


def test_a_link_reproduces_url_tensor_and_tab(page_factory, site, files):
    context, app, requests, errors = page_factory(site)
    try:
        page = app.page
        page.goto(f"{site}?url=files/{SERVED}&tensor=half.weight&tab=tensor")
        app.wait_python()
        app.wait_model(SERVED)
        page.wait_for_function("() => document.getElementById('tensor-name').textContent === 'half.weight'",
                               timeout=STEP_TIMEOUT_MS)
        assert page.get_attribute("#tab-tensor", "aria-selected") == "true"
        # Selecting records the selection in the address, as a new history entry.
        app.select("stacked.experts")
        assert query(page)["tensor"] == ["stacked.experts"] and query(page)["url"] == [f"{site}files/{SERVED}"]
        app.select("special.weight")
        app.tab("summary")
        assert query(page)["tab"] == ["summary"] and query(page)["tensor"] == ["special.weight"]
        # Back walks the selections.
        page.go_back()
        page.wait_for_function("() => document.getElementById('tensor-name').textContent === 'stacked.experts'",
                               timeout=STEP_TIMEOUT_MS)
        page.go_forward()
        page.wait_for_function("() => document.getElementById('tensor-name').textContent === 'special.weight'",
                               timeout=STEP_TIMEOUT_MS)
        # The copied link, opened afresh, shows the same.
        context.grant_permissions(["clipboard-read", "clipboard-write"])
        page.click("#copy-link")
        page.wait_for_function("() => document.getElementById('copy-link-note').dataset.href")
        href = page.get_attribute("#copy-link-note", "data-href")
        assert page.inner_text("#copy-link-note") == "Link copied."
        again = context.new_page()
        again.goto(href)
        again.wait_for_function("() => document.getElementById('tensor-name')?.textContent === 'special.weight'",
                                timeout=90_000)
        assert again.get_attribute("#tab-summary", "aria-selected") == "true"
        assert again.evaluate("document.body.dataset.model") == SERVED
    finally:
        context.close()
    assert not errors


def test_a_link_keeps_the_heatmap_view(page_factory, site):
    context, app, requests, errors = page_factory(site)
    try:
        page = app.page
        page.goto(f"{site}?url=files/{SERVED}&tensor=stacked.experts&tab=tensor")
        app.wait_python()
        app.wait_model(SERVED)
        app.wait_heatmap()
        page.fill("#axis-picker input[type=number]", "2")           # expert 2 of 4 x 64 x 48
        page.press("#axis-picker input[type=number]", "Enter")
        page.wait_for_function("() => JSON.parse(document.getElementById('heatmap').dataset.request).index['0'] === 2")
        app.wait_idle()
        page.click("#zoom-in")
        page.wait_for_function("() => JSON.parse(document.getElementById('heatmap').dataset.request).region.join() !== '0,64,0,48'")
        app.wait_idle()
        shown = json.loads(page.get_attribute("#heatmap", "data-request"))
        view = json.loads(query(page)["view"][0])
        assert view == {"plane": shown["plane"], "index": shown["index"], "region": shown["region"]}
        again = context.new_page()
        again.goto(page.url)
        again.wait_for_function(
            "() => document.getElementById('heatmap')?.dataset.request"
            " && JSON.parse(document.getElementById('heatmap').dataset.request).index['0'] === 2",
            timeout=90_000)
        reopened = json.loads(again.get_attribute("#heatmap", "data-request"))
        assert (reopened["plane"], reopened["index"], reopened["region"]) == (shown["plane"], shown["index"], shown["region"])
    finally:
        context.close()
    assert not errors


def test_a_local_file_cannot_be_linked_and_says_so(app, files):
    app.ensure_open(files["torch"])
    app.page.click("#copy-link")
    note = app.page.inner_text("#copy-link-note")
    assert note.startswith("model.pt is a file on this computer: a link cannot open it")
    assert "url" not in query(app.page)
