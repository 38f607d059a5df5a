"""The URL box as a user types in it: one URL per line (several lines: shards), and the Hugging
Face shortcut `org/model[@rev]` (or a Hub page URL), read through the Hub's /resolve/<rev>/ file
URLs from a local server that imitates the Hub's URL layout and headers (no network here). The
page itself still talks to its own origin only; the worker to the Hub it was given."""

import urllib.parse
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import tensorloupe
from conftest import STEP_TIMEOUT_MS
from hub_server import serve_hub

REPO, REVISION = "tiny-org/tiny-moe", "main"


@pytest.fixture(scope="module")
def hub(shards):
    with serve_hub(Path(shards["sharded_folder"]), REPO, REVISION) as (base, log):
        yield base, log


@pytest.fixture(scope="module")
def hub_page(page_factory, server, hub):
    base, _ = hub
    context, app, requests, errors = page_factory(f"{server}?hub={urllib.parse.quote(base)}")
    app.goto()
    yield app, requests
    context.close()
    assert not errors


SET = "model-{00001..00003}-of-00003.safetensors"


@pytest.mark.parametrize("typed", [REPO, f"{REPO}@{REVISION}", "{hub}/" + REPO,
                                   "{hub}/" + REPO + "/tree/main"])
def test_the_hub_shortcut_opens_the_model_through_resolve_urls(hub_page, hub, shards, typed):
    app, requests = hub_page
    base, log = hub
    page = app.page
    if page.evaluate("document.body.dataset.model") == SET:     # start from another model
        before = app.opened()
        page.click('#file-list .file[data-file="demo-moe.safetensors"]')
        app.wait_model("demo-moe.safetensors", before)
    before = app.opened()
    page.fill("#url-input", typed.format(hub=base))
    page.press("#url-input", "Enter")
    app.wait_model(SET, before)
    merged = tensorloupe.open(shards["sharded_folder"])
    assert app.fact("tensor_count") == str(len(merged.tensors)) == "48"
    assert "· 3 shards ·" in page.inner_text("#current-file")
    app.select("model.layers.2.self_attn.q_proj.weight")          # in the third shard
    assert page.inner_text("#tensor-file") == "in model-00003-of-00003.safetensors"
    app.tab("moe")
    assert page.inner_text("#panel-moe .fact[data-key=top_k] .fact-value") == "3"   # config.json
    paths = {urlsplit(p).path for _, p, _ in log}
    assert f"/{REPO}/resolve/main/model.safetensors.index.json" in paths
    assert f"/{REPO}/resolve/main/config.json" in paths
    assert {f"/cdn/model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)} <= paths
    # Only the page's own origin and the Hub it was given were contacted.
    origins = {f"{urlsplit(u).scheme}://{urlsplit(u).netloc}" for u in requests.urls
               if urlsplit(u).scheme in ("http", "https")}
    assert origins <= {app.base_url.split("?")[0].rstrip("/"), base}


def test_a_hub_model_without_the_file_says_what_is_missing(hub_page):
    app, _ = hub_page
    page = app.page
    page.fill("#url-input", "tiny-org/absent@main")
    page.press("#url-input", "Enter")
    page.wait_for_selector("#error:not([hidden])", timeout=STEP_TIMEOUT_MS)
    text = page.inner_text("#error")
    assert "tiny-org/absent@main" in text and "404" in text
    page.click("#error-close")


def test_the_url_box_takes_one_url_per_line(hub_page, hub):
    app, _ = hub_page
    base, _ = hub
    page = app.page
    before = app.opened()
    lines = [f"{base}/{REPO}/resolve/main/model-0000{i}-of-00003.safetensors" for i in (1, 3)]
    page.fill("#url-input", "\n".join(lines))
    page.press("#url-input", "Enter")
    app.wait_model("model-{00001,00003}-of-00003.safetensors", before)
    assert "part 2 of 3 (model-00002-of-00003.safetensors) is missing" in page.inner_text("#warnings")


def _origin(url: str) -> str:
    return f"{urlsplit(url).scheme}://{urlsplit(url).netloc}"


def test_a_link_to_a_mirror_asks_before_any_request_and_shows_the_mirror(page_factory, server, hub):
    """?hub=<other host>&url=org/model in a link: the URL box is filled and the host is shown,
    but neither the page nor the worker contacts that host before the user confirms."""
    base, log = hub
    log.clear()
    context, app, requests, errors = page_factory(
        f"{server}?hub={urllib.parse.quote(base)}&url={urllib.parse.quote(REPO)}")
    try:
        page = app.page
        page.goto(app.base_url)
        app.wait_python()
        page.wait_for_selector("#link-confirm:not([hidden])", timeout=STEP_TIMEOUT_MS)
        text = page.inner_text("#link-confirm-text")
        host = urlsplit(base).netloc
        assert host in text and "mirror" in text and "Nothing has been requested" in text
        assert page.input_value("#url-input") == REPO
        page.wait_for_timeout(500)          # nothing goes out while the question waits
        assert log == [] and not [u for u in requests.urls if _origin(u) == base]
        before = app.opened()
        page.click("#link-confirm-open")
        app.wait_model(SET, before)
        assert log and page.is_hidden("#link-confirm")
        assert host in page.inner_text("#file-list")               # listed as the mirror's
    finally:
        context.close()
    assert not errors


@pytest.mark.parametrize("target", ["{hub}/x/model.safetensors", "//{host}/x/model.safetensors",
                                    "http://169.254.169.254/latest/meta-data"])
def test_a_link_to_another_server_is_not_fetched_when_cancelled(page_factory, server, hub, target):
    base, log = hub
    log.clear()
    url = target.format(hub=base, host=urlsplit(base).netloc)
    context, app, requests, errors = page_factory(f"{server}?url={urllib.parse.quote(url)}")
    try:
        page = app.page
        page.goto(app.base_url)
        app.wait_python()
        page.wait_for_selector("#link-confirm:not([hidden])", timeout=STEP_TIMEOUT_MS)
        asked = urlsplit(urllib.parse.urljoin(server, url)).netloc
        assert asked in page.inner_text("#link-confirm-text")
        page.click("#link-confirm-cancel")
        app.wait_model("demo-moe.safetensors")                     # the demo instead
        assert page.input_value("#url-input") == url                # kept, to edit or open
        assert log == []
        assert not [u for u in requests.urls if urlsplit(u).netloc == asked]
    finally:
        context.close()
    assert not errors
