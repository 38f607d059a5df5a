"""The container formats of issue 26 on the page: Keras .weights.h5 and .keras, NeMo .nemo (by
drop and by URL), and a diffusers pipeline folder (dropped as a folder). Each shows the format,
tensor count and parameters `tensorloupe inspect --json` prints, and a tensor's statistics equal
`tensorloupe stats --json` (a chunked, deflated HDF5 dataset among them)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import STEP_TIMEOUT_MS
from page_checks import assert_stats_equal

import build

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "out"
FILES = {"weights": OUT / "hdf5" / "keras-mlp.weights.h5", "keras": OUT / "hdf5" / "keras-mlp.keras",
         "nemo": OUT / "nemo" / "tiny.nemo", "h5": OUT / "hdf5" / "h5py-latest.h5"}
TENSOR = {"weights": "layers/dense/vars/0", "keras": "layers/layer_normalization/vars/1",
          "nemo": "encoder.0.weight", "h5": "a/chunked"}
PIPELINE = OUT / "diffusers" / "tiny-sd"


@pytest.fixture(scope="module")
def fixtures():
    missing = [p for p in (*FILES.values(), PIPELINE / "model_index.json") if not p.exists()]
    if missing:
        pytest.fail(f"{missing[0]} is missing: run `python fixtures/make.py` first")
    return FILES


def cli_json(*args: str):
    """The CLI of this checkout (PYTHONPATH: an installed tensorloupe may be another's)."""
    done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", *args, "--json"],
                          capture_output=True, text=True, cwd=ROOT, check=True,
                          env={"PYTHONPATH": str(ROOT / "pylib"), "PATH": "/usr/bin:/bin"})
    return json.loads(done.stdout)


def inspect_json(path) -> dict:
    return cli_json("inspect", str(path))


def cli_stats(path, tensor: str) -> dict:
    [entry] = cli_json("stats", str(path), tensor)
    return entry


def shown_like_the_cli(app, path: Path, tensor: str) -> None:
    doc = inspect_json(path)
    app.tab("summary")
    assert app.fact("format") == doc["format"]
    assert app.fact("tensor_count") == f"{doc['tensor_count']:,}"
    detail = app.page.inner_text("#panel-summary .fact[data-key=parameters] .fact-detail")
    assert detail == f"{doc['parameters']:,}"
    app.select(tensor)
    assert_stats_equal(app.stats(), cli_stats(path, tensor)["stats"])


@pytest.mark.parametrize("key", ["weights", "keras", "nemo", "h5"])
def test_dropped_file_shows_what_the_cli_shows(app, fixtures, key):
    app.open_file(fixtures[key], how="drop")
    shown_like_the_cli(app, fixtures[key], TENSOR[key])


@pytest.fixture(scope="module")
def site(dist, fixtures):
    server = build.make_server(dist, port=0, files={p.name: p for p in fixtures.values()})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def url_app(page_factory, site, fixtures):
    """One page for the URL tests (a boot each would cost ~15 s): it starts at ?url= of the
    .keras file; the others are typed in the URL box."""
    context, app, requests, errors = page_factory(site + "/")
    app.page.goto(f"{site}/?url=files/{fixtures['keras'].name}")
    app.wait_python()
    app.wait_model(fixtures["keras"].name)
    yield app
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
    assert not requests.foreign(), f"requests outside 127.0.0.1: {requests.foreign()}"


@pytest.mark.parametrize("key", ["keras", "nemo", "h5"])
def test_url_shows_what_the_cli_shows(url_app, site, fixtures, key):
    if url_app.page.evaluate("document.body.dataset.model") != fixtures[key].name:
        before = url_app.opened()
        url_app.page.fill("#url-input", f"{site}/files/{fixtures[key].name}")
        url_app.page.press("#url-input", "Enter")
        url_app.wait_model(fixtures[key].name, before)
    shown_like_the_cli(url_app, fixtures[key], TENSOR[key])


def pipeline_shown_like_the_cli(app, doc: dict) -> None:
    """The Summary of the open diffusers pipeline says what `inspect --json` (`doc`) says."""
    app.tab("summary")
    assert app.fact("format") == "diffusers"
    assert app.fact("tensor_count") == f"{doc['tensor_count']:,}" == "320"
    detail = app.page.inner_text("#panel-summary .fact[data-key=parameters] .fact-detail")
    assert detail == f"{doc['parameters']:,}"
    rows = app.page.eval_on_selector_all(
        "#pipeline tbody tr", "rows => rows.map(r => [r.dataset.component,"
        " ...[...r.querySelectorAll('td')].slice(1, 4).map(td => td.textContent)])")
    assert app.page.get_attribute("#pipeline", "data-class") == doc["extras"]["pipeline"]["class"]
    assert rows == [[c["name"], f"{c['library']}.{c['class']}",
                     f"{c['tensors']:,}" if "tensors" in c else "",
                     f"{c['parameters']:,}" if "parameters" in c else "no weights"]
                    for c in doc["extras"]["pipeline"]["components"]]


def test_dropped_diffusers_folder_is_one_model_with_its_components(app, fixtures):
    doc = inspect_json(PIPELINE)
    before = app.opened()
    app.drop_paths(PIPELINE)
    app.page.wait_for_function(
        "after => Number(document.body.dataset.opened || 0) > after", arg=before,
        timeout=STEP_TIMEOUT_MS)
    app.wait_idle()
    pipeline_shown_like_the_cli(app, doc)
    app.select("unet/conv_in.weight")
    assert_stats_equal(app.stats(), cli_stats(PIPELINE, "unet/conv_in.weight")["stats"])
