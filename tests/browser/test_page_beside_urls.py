"""Files beside a URL (issue 26): a PEFT adapter opened by URL brings its adapter_config.json from
the same folder URL (its ΔW and Δb as `inspect --json` shows them for the folder on disk), and a
diffusers folder opened by its model_index.json URL, or by the folder's URL, finds its components'
files from model_index.json and opens as the one pipeline `inspect --json` shows. Every request
the page makes is to the one server that serves the app and the files."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

import build
from conftest import STEP_TIMEOUT_MS
from page_checks import assert_stats_equal
from test_page_containers import cli_json
from test_page_hdf5 import pipeline_shown_like_the_cli

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "out"
ADAPTER = OUT / "lycoris" / "lora-bias"
PIPELINE = OUT / "diffusers" / "tiny-sd"


@pytest.fixture(scope="module")
def site(dist, tmp_path_factory):
    """The app with the fixture folders under it, as one would put them on a static server."""
    root = tmp_path_factory.mktemp("beside-site")
    for entry in dist.iterdir():
        (root / entry.name).symlink_to(entry)
    shutil.copytree(ADAPTER, root / "adapters" / ADAPTER.name)
    shutil.copytree(PIPELINE, root / "pipelines" / PIPELINE.name)
    server = build.make_server(root, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def page(page_factory, site):
    context, app, requests, errors = page_factory(site + "/")
    app.goto()
    app.wait_python()
    yield app, requests
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
    assert all(url.startswith(site + "/") for url in requests.urls), \
        [u for u in requests.urls if not u.startswith(site + "/")]


def type_url(app, url: str) -> None:
    before = app.opened()
    app.page.fill("#url-input", url)
    app.page.click("#url-form button[type=submit]")
    app.page.wait_for_function("after => Number(document.body.dataset.opened || 0) > after",
                               arg=before, timeout=STEP_TIMEOUT_MS)
    app.wait_idle()


def card_rows(app) -> dict:
    return dict(app.page.eval_on_selector_all(
        "#adapter tr", "rows => rows.map(r => [r.dataset.key, r.querySelector('td').textContent])"))


def test_an_adapter_by_url_brings_its_adapter_config(page, site):
    app, requests = page
    type_url(app, f"{site}/adapters/{ADAPTER.name}/adapter_model.safetensors")
    assert f"{site}/adapters/{ADAPTER.name}/adapter_config.json" in requests.urls
    adapter = cli_json("inspect", ADAPTER)["extras"]["adapter"]
    app.tab("summary")
    card = app.page.locator("#adapter")
    assert card.get_attribute("data-delta") == str(adapter["delta"]) == "4"
    rows = card_rows(app)
    assert rows["adapter"] == f"{adapter['kind']} (from adapter_config.json)"
    assert rows["scale"] == "2 (alpha/r)"
    assert rows["lora_bias"] == "4 biases shown as Δb = scale · lora_B.bias"
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.v_proj.bias"):
        app.select(name)
        (expected,) = cli_json("stats", ADAPTER, name)
        assert expected["computed_as"].startswith("Δb" if name.endswith("bias") else "ΔW")
        assert_stats_equal(app.stats(), expected["stats"])


@pytest.mark.parametrize("address", ["model_index.json", ""])
def test_a_diffusers_folder_by_url_is_one_pipeline(page, site, address):
    app, requests = page
    folder = f"{site}/pipelines/{PIPELINE.name}/"
    type_url(app, folder + address)
    pipeline_shown_like_the_cli(app, cli_json("inspect", PIPELINE))
    app.select("unet/conv_in.weight")
    [expected] = cli_json("stats", PIPELINE, "unet/conv_in.weight")
    assert_stats_equal(app.stats(), expected["stats"])
    # every component's files were found from model_index.json, in its folder on this server
    assert {u for u in requests.urls if u.startswith(folder) and u.endswith(".safetensors")} >= \
        {folder + f"{c}/{'model' if c == 'text_encoder' else 'diffusion_pytorch_model'}.safetensors"
         for c in ("unet", "vae", "text_encoder")}
