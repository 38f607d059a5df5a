"""The worker's export handlers, in CPython: a tensor or tile as .npy (numpy.load reads the exact
values back), the tensor table as CSV and JSON (the same records as inspect --json)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from tensorloupe.web.handlers import Session


@pytest.fixture
def session(tmp_path):
    rng = np.random.default_rng(5)
    arrays = {"x": rng.normal(0, 1, (30, 50)).astype(np.float32),
              "cube": rng.normal(0, 1, (3, 20, 30)).astype(np.float16)}
    save_file(arrays, str(tmp_path / "a.safetensors"))
    s = Session()
    s.handle("open", {"path": str(tmp_path / "a.safetensors")})
    return s, arrays


def test_export_a_whole_tensor_as_npy(session):
    s, arrays = session
    result, [data] = s.handle("export_npy", {"name": "cube"})
    assert result == {"file": "cube.npy", "descr": "<f2", "shape": [3, 20, 30], "exact_dtype": True,
                      "bytes": len(data)}
    loaded = np.load(io.BytesIO(data))
    assert loaded.dtype == np.float16 and loaded.tobytes() == arrays["cube"].tobytes()


def test_export_the_visible_tile_of_a_slice(session):
    s, arrays = session
    result, [data] = s.handle("export_npy", {"name": "cube", "region": [2, 7, 10, 14],
                                             "plane": [1, 2], "index": {"0": 2}})
    assert result["file"] == "cube.tile.npy" and result["shape"] == [5, 4]
    np.testing.assert_array_equal(np.load(io.BytesIO(data)), arrays["cube"][2, 2:7, 10:14])


def test_export_the_table_as_csv_and_json(session):
    s, arrays = session
    result, _ = s.handle("export_table", {"format": "csv"})
    rows = list(csv.DictReader(io.StringIO(result["text"])))
    assert result["file"] == "a.safetensors.tensors.csv"
    assert sorted((r["name"], r["dtype"], r["shape"], r["file"]) for r in rows) == [
        ("cube", "F16", "3x20x30", "a.safetensors"), ("x", "F32", "30x50", "a.safetensors")]
    result, _ = s.handle("export_table", {"format": "json"})
    records = json.loads(result["text"])
    assert {r["name"]: r["numel"] for r in records} == {"cube": 1800, "x": 1500}
    assert [r["name"] for r in records] == [r["name"] for r in rows]    # file order, both ways
    with pytest.raises(Exception, match="csv or json"):
        s.handle("export_table", {"format": "xls"})
