"""The Python API as a notebook user meets it (issue 27): a short repr, an HTML summary with
every string from the file escaped, Tensor.numpy() equal to the reference loaders and reading
that tensor only, and a clean dir(tensorloupe)."""

import sys

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from safetensors.torch import load_file, save_file as save_torch

import gguf_files
import tensorloupe


def test_the_repr_of_a_22000_tensor_checkpoint_is_short(tmp_path):
    path = tmp_path / "many.safetensors"
    save_file({f"model.layers.{i}.mlp.weight": np.zeros(2, np.float32) for i in range(22_000)},
              str(path))
    ckpt = tensorloupe.open(path)
    text = repr(ckpt)
    assert len(text) < 300
    assert text == f"<Checkpoint safetensors 'many.safetensors': 22,000 tensors, " \
                   f"{tensorloupe.display.human_bytes(path.stat().st_size)}>"
    assert repr(ckpt.tensor("model.layers.7.mlp.weight")) == \
        "<Tensor 'model.layers.7.mlp.weight' F32 [2]>"


HOSTILE = "<script>alert(1)</script>"


def test_html_summaries_escape_every_string_from_the_file(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({HOSTILE: np.ones((2, 3), np.float32), "b": np.ones(4, np.float16)}, str(path),
              metadata={"x": "y"})
    ckpt = tensorloupe.open(path)
    page = ckpt._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<td>safetensors</td>" in page and "<td>[2, 3]</td>" in page
    assert "<td>tensors</td><td>2</td>" in page
    one = ckpt.tensor(HOSTILE)._repr_html_()
    assert "<script>" not in one and "&lt;script&gt;" in one and "<td>F32</td>" in one
    assert "<td>elements</td><td>6</td>" in one
    # a long checkpoint lists its first tensors and says how many more
    many = tmp_path / "many.safetensors"
    save_file({f"t{i}": np.zeros(1, np.float32) for i in range(25)}, str(many))
    assert "… and 5 more tensors" in tensorloupe.open(many)._repr_html_()


def test_numpy_equals_the_safetensors_loader_and_reads_only_that_tensor(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"f32": torch.from_numpy(rng.standard_normal((256, 512)).astype(np.float32)),
               "f16": torch.from_numpy(rng.standard_normal((64, 32)).astype(np.float16)),
               "bf16": torch.randn(33, 17, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16),
               "i64": torch.arange(-50, 50, dtype=torch.int64).reshape(10, 10),
               "bool": torch.tensor([True, False, True]),
               "empty": torch.zeros((0, 4))}
    path = tmp_path / "m.safetensors"
    save_torch(tensors, str(path))
    reference = load_file(str(path))
    ckpt = tensorloupe.open(path)
    for name, expected in reference.items():
        before = ckpt.bytes_read()
        got = ckpt.tensor(name).numpy()
        assert got.shape == tuple(expected.shape), name
        if expected.dtype == torch.bfloat16:   # NumPy has no bfloat16: float32, exactly
            assert got.dtype == np.float32
            expected = expected.float()
        assert np.array_equal(got, expected.numpy()), name
        assert ckpt.bytes_read() - before <= ckpt.tensor(name).nbytes
    assert ckpt.tensor("f16").numpy().dtype == np.float16
    assert ckpt.tensor("i64").numpy().dtype == np.int64
    # the middle one of three 1 MiB tensors: its own bytes, nothing of its neighbours
    rng = np.random.default_rng(2)
    three = {n: rng.standard_normal(1 << 18).astype(np.float32) for n in ("a", "b", "c")}
    big = tmp_path / "three.safetensors"
    save_file(three, str(big))
    fresh = tensorloupe.open(big)
    header = fresh.bytes_read()
    assert np.array_equal(fresh.tensor("b").numpy(), three["b"])
    assert fresh.bytes_read() - header <= fresh.tensor("b").nbytes == 1 << 20
    assert fresh.bytes_read() < big.stat().st_size / 2

def test_numpy_of_a_torch_view_equals_torch_load(tmp_path):
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    path = tmp_path / "views.pt"
    torch.save({"t": base.t(), "every_other": base[:, ::2], "bf": base.to(torch.bfloat16).t()}, path)
    expected = torch.load(path, weights_only=True)
    ckpt = tensorloupe.open(path)
    for name, value in expected.items():
        got = ckpt.tensor(name).numpy()
        assert np.array_equal(got, value.float().numpy()), name


def test_numpy_of_ggml_blocks_equals_gguf_py(tmp_path):
    from gguf import GGUFReader
    from gguf.quants import dequantize
    paths = gguf_files.write_all(tmp_path)
    reader = GGUFReader(paths["gguf_llama"])
    ckpt = tensorloupe.open(paths["gguf_llama"])
    checked = set()
    for rt in reader.tensors:
        t = ckpt.tensor(rt.name)
        if t.dtype in checked:
            continue
        checked.add(t.dtype)
        expected = dequantize(rt.data, rt.tensor_type).reshape(t.shape)
        got = t.numpy()
        assert got.shape == expected.shape
        assert np.array_equal(got.astype(np.float32), expected.astype(np.float32)), t.dtype
    assert {"Q4_K", "Q6_K", "Q8_0"} <= checked


def test_numpy_not_installed_is_said_naming_numpy(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    save_file({"w": np.ones(3, np.float32)}, str(path))
    ckpt = tensorloupe.open(path)
    monkeypatch.setitem(sys.modules, "numpy", None)   # `import numpy` now raises ImportError
    before = ckpt.bytes_read()
    with pytest.raises(tensorloupe.TensorloupeError) as e:
        ckpt.tensor("w").numpy()
    assert "Tensor.numpy() needs numpy, which is not installed" in str(e.value)
    assert ckpt.bytes_read() == before


def test_dir_of_the_package_is_its_api():
    names = dir(tensorloupe)
    for leaked in ("sys", "types", "importlib", "annotations", "os"):
        assert leaked not in names
    assert set(tensorloupe.__all__) <= set(names) and "__version__" in names
    for name in names:   # everything listed is there
        getattr(tensorloupe, name)
