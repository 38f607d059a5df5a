"""The outline sorted by name, size or dtype; the largest tensors listed; exports: a tensor or
the visible tile as .npy written by the library (numpy.load reads the exact values back), the
tensor table as CSV/JSON, a tensor's name copied."""

import csv
import io
import json

import numpy as np
from safetensors.numpy import load_file

import tensorloupe


def row_names(app):
    return app.page.eval_on_selector_all(
        ".tree-row[data-name]",
        "rows => rows.sort((a, b) => a.dataset.index - b.dataset.index).map((r) => r.dataset.name)")


def test_outline_sorts_by_name_size_and_dtype(app, files):
    app.ensure_open(files["safetensors"])
    page = app.page
    tensors = tensorloupe.open(files["safetensors"]).tensors
    in_file = [t.name for t in tensors]
    assert row_names(app) == in_file
    page.select_option("#tree-order", "size")
    assert row_names(app) == [t.name for t in sorted(tensors, key=lambda t: -t.nbytes)]
    page.select_option("#tree-order", "name")
    assert row_names(app) == sorted(in_file)
    page.select_option("#tree-order", "dtype")
    assert row_names(app)[0] == "half.weight"                 # F16 before the F32s
    page.select_option("#tree-order", "file")
    assert row_names(app) == in_file


def test_largest_tensors_listed_and_linked(app, files):
    app.ensure_open(files["safetensors"])
    app.tab("summary")
    names = app.page.eval_on_selector_all("#largest tr", "rows => rows.map((r) => r.dataset.name)")
    assert names == ["wide.weight", "stacked.experts", "half.weight", "special.weight"]
    app.page.click('#largest tr[data-name="stacked.experts"] button')
    app.page.wait_for_function("() => document.getElementById('tensor-name').textContent === 'stacked.experts'")


def saved(page, click):
    with page.expect_download() as info:
        page.click(click)
    return info.value.path().read_bytes(), info.value.suggested_filename


def test_export_tensor_and_tile_as_npy_and_table(app, files):
    app.ensure_open(files["safetensors"])
    page = app.page
    arrays = load_file(str(files["safetensors"]))
    app.select("half.weight")
    data, name = saved(page, "#save-npy")
    assert name == "half.weight.npy"
    loaded = np.load(io.BytesIO(data))
    assert loaded.dtype == np.float16 and loaded.tobytes() == arrays["half.weight"].tobytes()
    app.select("stacked.experts")                       # 4 x 64 x 48: the tile of slice 0
    data, name = saved(page, "#save-tile")
    region = json.loads(page.get_attribute("#heatmap", "data-request"))["region"]
    r0, r1, c0, c1 = region
    np.testing.assert_array_equal(np.load(io.BytesIO(data)), arrays["stacked.experts"][0, r0:r1, c0:c1])
    app.tab("summary")
    data, name = saved(page, "#export-csv")
    rows = list(csv.DictReader(io.StringIO(data.decode())))
    assert name == "browser.safetensors.tensors.csv" and len(rows) == 4
    assert {r["name"]: r["shape"] for r in rows}["stacked.experts"] == "4x64x48"
    data, _ = saved(page, "#export-json")
    assert len(json.loads(data)) == 4


def test_copy_a_tensor_name(app, files):
    app.ensure_open(files["safetensors"])
    app.page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    app.select("special.weight")
    app.page.click("#copy-name")
    app.page.wait_for_function("() => document.getElementById('tensor-tool-note').textContent === 'name copied'")
    assert app.page.evaluate("navigator.clipboard.readText()") == "special.weight"


def test_sizes_are_human_with_the_exact_count(app, files):
    app.ensure_open(files["safetensors"])
    app.select("wide.weight")                          # 2048 x 4096 F32
    chip = app.page.inner_text('#tensor-facts .chip[title="bytes in the file"]')
    assert chip == "32.0 MiB (33,554,432 bytes)"
    facts = app.page.inner_text("#tensor-facts")
    assert "null" not in facts and "undefined" not in facts
    assert app.page.locator("#tensor-file").count() == 0          # one file: no "in <file>" chip
    assert app.page.inner_text("#exact-note") == "reads all 32.0 MiB (33,554,432 bytes)"
