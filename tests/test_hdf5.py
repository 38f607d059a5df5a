"""HDF5 files as h5py and Keras 3 write them (fixtures/hdf5_files.py), read by formats/hdf5.
Oracles: h5py (every dataset's name, shape, dtype and every element; every attribute) and
Keras itself (load_model of the .keras: every weight of every layer)."""

import math
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

import hdf5_files

import tensorloupe
from tensorloupe.formats.hdf5 import chunks
from tensorloupe.source import FileSource

ROOT = Path(__file__).resolve().parent.parent


OUT = ROOT / "fixtures" / "out" / "hdf5"
FILES = {"h5py_earliest": "h5py-earliest.h5", "h5py_latest": "h5py-latest.h5",
         "h5py_dense": "h5py-dense.h5", "keras_weights": "keras-mlp.weights.h5",
         "keras_model": "keras-mlp.keras"}


@pytest.fixture(scope="module")
def files():
    """fixtures/out/hdf5 (fixtures/make.py writes it: hdf5_files.py)."""
    if not all((OUT / name).exists() for name in FILES.values()):
        hdf5_files.write_all(OUT.parent)
    return {key: OUT / name for key, name in FILES.items()}


def datasets(path):
    """Every dataset h5py sees: path -> array (numeric ones; strings are not tensors)."""
    out = {}
    with h5py.File(path) as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind in "fiub":
                out[name] = obj[()]
        f.visititems(visit)
    return out


def attributes(path):
    out = {}
    with h5py.File(path) as f:
        def add(name, obj):
            for key, value in obj.attrs.items():
                out[f"{name or '/'}@{key}"] = value
        add("", f)
        f.visititems(add)
    return out


def same(got, ref):
    assert got.shape == ref.shape
    assert (got.dtype.kind, got.dtype.itemsize) == (ref.dtype.kind, ref.dtype.itemsize)
    assert np.array_equal(got, ref, equal_nan=True)


@pytest.mark.parametrize("key", ["h5py_earliest", "h5py_latest", "h5py_dense", "keras_weights"])
def test_every_dataset_equals_h5py(files, key):
    ck = tensorloupe.open(files[key])
    assert ck.format == "hdf5"
    ref = datasets(files[key])
    problems = {t.name: t.problem for t in ck.tensors if t.problem}
    assert {t.name for t in ck.tensors} == set(ref)
    for t in ck.tensors:
        if t.name in problems:
            continue
        same(t.numpy(), ref[t.name])
        # the sampler's exact path (the CLI's `values`, the page's table) reads the same
        assert tensorloupe.values(t, 0, t.numel) == pytest.approx(ref[t.name].ravel().tolist(),
                                                                  nan_ok=True)
    expected = {"b/lzf"}
    assert set(problems) == (expected if key.startswith("h5py_") and key != "h5py_dense" else set())
    for name, value in attributes(files[key]).items():
        shown = ck.metadata[name]
        value = value.decode() if isinstance(value, bytes) else value
        assert (list(shown) if isinstance(shown, list) else shown) == \
            (value.tolist() if isinstance(value, np.ndarray) else value)


def test_what_cannot_be_read_says_why(files):
    ck = tensorloupe.open(files["h5py_latest"])
    lzf = ck.tensor("b/lzf")
    assert "lzf (HDF5 filter 32000)" in lzf.problem and lzf.shape == (4, 4)
    assert ck.tensor("c/unlimited").info["index"] == "extensible-array"   # read (earray.py)
    assert any("b/lzf" in w for w in ck.warnings)
    assert "c/text" not in ck.by_name          # a string dataset is not a tensor
    chunked = ck.tensor("a/chunked")
    assert chunked.info["filters"] == ["shuffle", "deflate"] and chunked.info["chunk"] == [8, 8]


def test_partial_reads_of_a_chunked_dataset_decode_only_the_chunks_they_touch(files):
    ck = tensorloupe.open(files["h5py_earliest"])
    t = ck.tensor("a/chunked")
    ref = datasets(files["h5py_earliest"])["a/chunked"].ravel()
    for start, count in ((0, 1), (7, 3), (28, 40), (500, 300), (t.numel - 5, 5)):
        assert tensorloupe.values(t, start, count) == pytest.approx(ref[start:start + count].tolist())
    assert len(t.source.index()) == math.prod(-(-d // c) for d, c in zip(t.shape, (8, 8)))


def test_opening_reads_headers_not_tensor_bytes(tmp_path):
    """A 16 MB file of contiguous and chunked datasets (bench/open_hdf5.py's) opens reading
    its headers, the B-trees of its groups and heaps, and nothing of its data (nor its chunk
    indexes)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import open_hdf5
    path = open_hdf5.write_h5(tmp_path / "big.weights.h5")
    source = FileSource(path)
    ck = tensorloupe.open(source)
    assert len(ck.tensors) == 8
    assert source.bytes_read <= 64 << 10, source.bytes_read
    assert all(t.source._index is None for t in ck.tensors if isinstance(t.source, chunks.ChunkedSource))
    before = source.bytes_read
    name = "layers/dense_1/vars/1"
    assert tensorloupe.values(ck.tensor(name), 0, 10) == pytest.approx(h5py.File(path)[name][0, :10].tolist())
    # one chunk of 64 x 1024 floats, deflated: far less than the dataset's 2 MB
    assert source.bytes_read - before < 400_000


def test_keras_model_zip_equals_its_members(files, tmp_path):
    """The .keras ZIP: config.json's layer list (json) and model.weights.h5 (h5py on the member
    extracted) are what is shown. (Importing keras costs ~6 s of CPU: it writes the fixture, and
    the weights are the .weights.h5 that test_every_dataset_equals_h5py checks; h5py on the
    extracted member is the same library's reading of these bytes.)"""
    import json
    ck = tensorloupe.open(files["keras_model"])
    assert ck.format == "keras"
    with zipfile.ZipFile(files["keras_model"]) as z:
        info = z.getinfo("model.weights.h5")
        config = json.loads(z.read("config.json"))
        metadata = json.loads(z.read("metadata.json"))
        (tmp_path / "model.weights.h5").write_bytes(z.read(info))
    assert ck.metadata["keras.config.class_name"] == config["class_name"] == "Sequential"
    assert ck.metadata["keras.config.layers"] == [
        f"{layer['config']['name']} ({layer['class_name']})" for layer in config["config"]["layers"]]
    assert ck.metadata["keras.config.layers"][1:] == ["hidden (Dense)", "norm (LayerNormalization)",
                                                      "head (Dense)"]
    assert ck.metadata["keras.keras_version"] == metadata["keras_version"]
    assert ck.extras["keras"]["stored"] is True
    ref = datasets(tmp_path / "model.weights.h5")
    assert {t.name for t in ck.tensors} == set(ref) and len(ref) == 6
    for t in ck.tensors:
        same(t.numpy(), ref[t.name])
    for group, layer in (("dense", "hidden"), ("layer_normalization", "norm"), ("dense_1", "head")):
        assert ck.metadata[f"layers/{group}/vars@name"] == layer
    # read in place: every tensor's offset lies inside the ZIP member's bytes
    for t in ck.tensors:
        assert info.header_offset < t.locate() < info.header_offset + 100 + info.file_size


def test_a_deflated_keras_weights_member_is_inflated_and_said(files, tmp_path):
    path = tmp_path / "deflated.keras"
    with zipfile.ZipFile(files["keras_model"]) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info), compress_type=zipfile.ZIP_DEFLATED)
    ck = tensorloupe.open(path)
    assert any("deflated in the archive" in w for w in ck.warnings)
    ref = tensorloupe.open(files["keras_model"])
    for t in ck.tensors:
        same(t.numpy(), ref.tensor(t.name).numpy())


def test_cli_inspect_json_lists_the_same_as_the_api(files, capsys):
    import json
    from tensorloupe.cli import main
    for key in ("h5py_latest", "keras_model"):
        assert main(["inspect", "--json", str(files[key])]) == 0
        shown = json.loads(capsys.readouterr().out)
        ck = tensorloupe.open(files[key])
        assert [(t["name"], t["dtype"], t["shape"]) for t in shown["tensors"]] == \
            [(t.name, t.dtype, list(t.shape)) for t in ck.tensors]
        assert shown["parameters"] == ck.parameter_count
