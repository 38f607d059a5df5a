"""The command line, driven as a user would: output, JSON schema, exit codes, no tracebacks."""

import json
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import save_file

import tensorloupe
from tensorloupe.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.safetensors"
    x = np.array([[1.5, -2.0, np.nan], [np.inf, 0.0, 3.25]], dtype=np.float32)
    save_file({"x": x, "c": np.array([1 + 2j], dtype=np.complex64)}, str(path), metadata={"a": "b"})
    return path


def test_inspect_text(capsys, demo_path):
    code, out, _ = run(capsys, "inspect", demo_path)
    assert code == 0
    assert "format      safetensors" in out and "tensors     127" in out
    assert "model.layers.3.block_sparse_moe.experts.7.w2.weight  F32" in out


def test_inspect_json_schema(capsys, small):
    code, out, _ = run(capsys, "inspect", small, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["format"] == "safetensors" and doc["metadata"] == {"a": "b"}
    assert doc["warnings"] == [] and doc["tensor_count"] == 2 and doc["parameters"] == 7
    x = next(t for t in doc["tensors"] if t["name"] == "x")
    assert {k: x[k] for k in ("dtype", "shape", "nbytes")} == {"dtype": "F32", "shape": [2, 3], "nbytes": 24}
    assert isinstance(x["offset"], int)


def test_stats_json_matches_the_api(capsys, demo_path):
    name = "model.layers.1.block_sparse_moe.experts.3.w2.weight"
    code, out, _ = run(capsys, "stats", demo_path, name, "--json")
    [entry] = json.loads(out)
    expected = tensorloupe.sample(tensorloupe.open(demo_path).tensor(name)).stats.to_json()
    assert code == 0 and entry["name"] == name and entry["stats"] == expected
    assert set(entry["stats"]) >= {"count", "min", "max", "mean", "std", "zeros", "nan", "posinf", "neginf"}


def test_stats_non_finite_as_strings(capsys, small):
    code, out, _ = run(capsys, "stats", small, "x", "--json")
    [entry] = json.loads(out)
    assert entry["stats"]["nan"] == 1 and entry["stats"]["posinf"] == 1
    assert entry["stats"]["max"] == 3.25 and entry["stats"]["count"] == 6


def test_stats_text_has_a_histogram(capsys, demo_path):
    code, out, _ = run(capsys, "stats", demo_path, "model.norm.weight", "--bins", "8")
    assert code == 0 and "mean" in out and out.count("│") == 8


def test_values_json_exact_with_nan_inf_and_complex(capsys, small):
    code, out, _ = run(capsys, "values", small, "x", "--json", "--start", "1", "--count", "4")
    assert json.loads(out) == {"name": "x", "dtype": "F32", "shape": [2, 3], "start": 1,
                               "values": [-2.0, "nan", "inf", 0.0]}
    code, out, _ = run(capsys, "values", small, "c", "--json")
    assert json.loads(out)["values"] == [[1.0, 2.0]]


def test_values_text_shows_indices(capsys, small):
    code, out, _ = run(capsys, "values", small, "x", "--count", "2")
    assert "[0, 0]  1.5" in out and "[0, 1]  -2.0" in out


def test_unknown_tensor_is_exit_2(capsys, small):
    code, _, err = run(capsys, "values", small, "nope")
    assert code == 2 and "no tensor named 'nope'" in err


def test_invalid_file_is_exit_3_without_traceback(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 12\n")
    proc = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 3
    assert "Git LFS pointer" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_arguments_are_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["stats"])
    assert e.value.code == 2


def test_demo_writes_the_model(capsys, tmp_path, demo_bytes):
    out = tmp_path / "d.safetensors"
    code, _, _ = run(capsys, "demo", "--out", out)
    assert code == 0 and out.read_bytes() == demo_bytes


def test_moe_command(capsys, demo_path):
    code, out, _ = run(capsys, "moe", demo_path, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["moe"]["detected"] and doc["moe"]["expert_count"] == 8
    assert len(doc["layers"]) == 4 and len(doc["layers"][0]["similarity"]) == 8
    assert {(r["drop"], r["keep"]) for r in doc["recommendations"]} == {(4, 0), (5, 1), (6, 2), (7, 3)}
    code, out, _ = run(capsys, "moe", demo_path)
    assert "drop expert 6 of layer 3: 0.99 similar to expert 2; keep 2" in out


def test_installed_script_runs(demo_path):
    proc = subprocess.run(["tensorloupe", "inspect", str(demo_path), "--json"], capture_output=True, text=True)
    assert proc.returncode == 0 and json.loads(proc.stdout)["tensor_count"] == 127


def test_a_url_that_cannot_be_fetched_is_exit_3(tmp_path):
    # nothing listens on port 9 (discard) here: the connection is refused; the file cannot be read
    proc = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect",
                           "http://127.0.0.1:9/model.safetensors"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("tensorloupe: ") and "cannot fetch http://127.0.0.1:9/" in proc.stderr
