"""ONNX (with external data), NumPy .npy/.npz, DDUF and llamafile on the page, by drop and by URL:
each opens with the tensor count and parameters `tensorloupe inspect --json` gives, and the first
tensor's statistics equal `tensorloupe stats --json`. An ONNX model's folder dropped (or its two
files typed as URLs) opens as one entry whose tensors are read from the external data file."""

from __future__ import annotations

import contextlib
import io
import json
import threading

import pytest

import container_files
import numpy_files
import onnx_files

import build
from conftest import STEP_TIMEOUT_MS
from page_checks import assert_stats_equal
from tensorloupe import cli


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("containers-page")
    written = {**onnx_files.write_all(out), **numpy_files.write_all(out),
               **container_files.write_all(out)}
    return {"onnx": written["onnx_exported_external"], "npy": written["npy_le_f4"],
            "npz": written["npz_compressed"], "dduf": written["dduf"],
            "llamafile": written["llamafile"]}


def cli_json(*argv) -> dict | list:
    """`tensorloupe ARGV --json`, run in this process (this checkout's package)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main([*map(str, argv), "--json"]) == 0
    return json.loads(out.getvalue())


def inspect_json(path) -> dict:
    return cli_json("inspect", path)


def assert_same_as_cli(app, path, doc: dict) -> None:
    app.tab("summary")
    assert app.fact("tensor_count") == str(len(doc["tensors"]))
    detail = app.page.inner_text("#panel-summary .fact[data-key=parameters] .fact-detail")
    assert detail == f"{doc['parameters']:,}"
    shown = app.page.inner_text("#tensor-name")
    app.page.wait_for_selector("#stats .stat[data-key=mean]", state="attached", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()
    [expected] = cli_json("stats", path, shown)
    assert_stats_equal(app.stats(), expected["stats"])


@pytest.mark.parametrize("kind", ["npy", "npz", "dduf", "llamafile"])
def test_each_file_dropped_has_the_cli_s_numbers(app, made, kind):
    path = made[kind]
    doc = inspect_json(path)
    before = app.opened()
    app.drop_paths(path)
    app.wait_model(path.name, before)
    assert_same_as_cli(app, path, doc)


def test_an_onnx_folder_dropped_opens_the_model_with_its_external_data(app, made):
    folder = made["onnx"].parent
    doc = inspect_json(made["onnx"])
    assert {t["file"] for t in doc["tensors"]} == {"model.onnx.data"}
    before = app.opened()
    app.drop_paths(folder)
    app.wait_model("model.onnx", before)
    entries = app.entries()
    assert "model.onnx" in entries and "model.onnx.data" not in entries   # no entry of its own
    assert_same_as_cli(app, made["onnx"], doc)
    assert app.page.locator("#panel-summary").inner_text().count("not beside the model") == 0


def test_an_onnx_model_and_its_data_picked_together_open_as_one(app, made):
    folder = made["onnx"].parent
    doc = inspect_json(made["onnx"])
    before = app.opened()
    app.open_with_input(folder / "model.onnx", folder / "model.onnx.data")
    app.wait_model("model.onnx", before)
    assert_same_as_cli(app, made["onnx"], doc)


@pytest.fixture(scope="module")
def site(dist, made):
    """The app, with each fixture served beside it under /files/ (as `build.py serve FILE`)."""
    served = {p.name: p for p in made.values()}
    served["model.onnx.data"] = made["onnx"].parent / "model.onnx.data"
    server = build.make_server(dist, port=0, files=served)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def url_app(page_factory, site):
    context, app, requests, errors = page_factory(site + "/")
    app.goto()
    yield app
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
    assert not requests.foreign(), requests.foreign()


@pytest.mark.parametrize("kind", ["onnx", "npy", "npz", "dduf", "llamafile"])
def test_each_file_by_url_has_the_cli_s_numbers(url_app, site, made, kind):
    path = made[kind]
    urls = [f"{site}/files/{path.name}"] + ([f"{site}/files/model.onnx.data"] if kind == "onnx" else [])
    doc = inspect_json(path)
    before = url_app.opened()
    url_app.page.fill("#url-input", "\n".join(urls))
    url_app.page.click("#url-form button[type=submit]")
    url_app.wait_model(path.name, before)
    assert_same_as_cli(url_app, path, doc)
