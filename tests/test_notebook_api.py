"""The Python API as a notebook user meets it (issue 27): a short repr, an HTML summary with
every string from the file escaped, a tensor's with its statistics (exact or labelled sampled),
histogram and heatmap as PNG images (read back by Pillow), Tensor.numpy() and numpy.asarray
equal to the reference loaders and reading that tensor only, names in messages cut with an
ellipsis, and a clean dir(tensorloupe)."""

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


# --- a tensor's HTML: its real values' statistics, histogram and heatmap as inline images ---------

def _images(page):
    """The PNG images of a tensor's HTML, decoded (Pillow: the PNG reader is the oracle), with
    their captions."""
    import base64
    import io
    import re
    from PIL import Image
    found = re.findall(r'<img src="data:image/png;base64,([^"]+)" width="(\d+)" height="(\d+)" '
                       r'alt="([^"]*)"', page)
    return [(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGBA"), int(w), int(h), alt)
            for data, w, h, alt in found]


def _cell(page, label):
    import html
    import re
    match = re.search(rf"<td>{re.escape(html.escape(label))}</td><td>([^<]*)</td>", page)
    return html.unescape(match.group(1)) if match else None


def test_a_small_tensor_shows_its_exact_statistics_histogram_and_every_element(tmp_path):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((8, 16)).astype(np.float32)
    w[0, 0] = -3.0                          # the most negative: the deepest blue
    path = tmp_path / "m.safetensors"
    save_file({"w": w}, str(path))
    page = tensorloupe.open(path).tensor("w")._repr_html_()
    assert _cell(page, "statistics") == "exact: all 128 elements"
    v = w.astype(np.float64)
    assert [_cell(page, k) for k in ("min", "max", "mean", "std")] == \
        [f"{x:.6g}" for x in (v.min(), v.max(), v.mean(), v.std())]
    assert _cell(page, "min ≤") is None     # exact extremes are not written as bounds
    (hist, hw, hh, hist_alt), (heat, mw, mh, heat_alt) = _images(page)
    # the histogram: one bar of 4 px per bin, heights in proportion to numpy's counts
    counts, _ = np.histogram(v, 64, (v.min(), v.max()))
    assert hist.size == (256, 64) == (hw, hh) and "histogram of every element: 64 bins" in hist_alt
    heights = [sum(1 for y in range(64) if hist.getpixel((4 * b + 1, y))[3]) for b in range(64)]
    assert heights == [max(1, round(c / counts.max() * 64)) if c else 0 for c in counts]
    # the heatmap: one pixel per element, shown 16 px a cell; red for positive, blue for negative
    assert heat.size == (16, 8) and (mw, mh) == (256, 128)
    assert "every element of the 8 × 16 view" in heat_alt and "±3 " in heat_alt
    for r in range(8):
        for c in range(16):
            red, green, blue, alpha = heat.getpixel((c, r))
            assert alpha == 255
            if abs(w[r, c]) > 0.1:
                assert (red > blue) == (w[r, c] > 0), (r, c)
    # -3, the largest magnitude, is the end of the gradient: the darkest pixel
    assert heat.getpixel((0, 0)) == min((heat.getpixel((c, r)) for r in range(8) for c in range(16)),
                                        key=lambda p: sum(p[:3]))


def test_a_large_tensor_says_its_figures_are_sampled_and_reads_only_a_little(tmp_path):
    rng = np.random.default_rng(6)
    tensors = {"a": np.ones(10, np.float32), "b": (rng.standard_normal((300, 700)) * 0.02).astype(np.float32),
               "big": rng.standard_normal((4096, 4096), np.float32).astype(np.float16)}
    tensors["b"][150, 350] = 5.0            # an outlier a sample of 16,384 misses
    path = tmp_path / "m.safetensors"
    save_file(tensors, str(path))
    ckpt = tensorloupe.open(path)
    before = ckpt.bytes_read()   # 32 MiB: a sample and one 128 x 128 lattice read ~1 MiB of it
    assert "sampled: 16,384 of 16,777,216" in ckpt.tensor("big")._repr_html_()
    assert ckpt.bytes_read() - before < ckpt.tensor("big").nbytes / 16
    page = ckpt.tensor("b")._repr_html_()
    assert _cell(page, "statistics") == \
        "sampled: 16,384 of 210,000 elements (estimates; min and max bound the tensor's)"
    assert _cell(page, "min") is None and _cell(page, "max") is None
    low, high = float(_cell(page, "min ≤")), float(_cell(page, "max ≥"))
    assert tensors["b"].min() <= low and high <= tensors["b"].max()
    (hist, *_, hist_alt), (heat, mw, mh, heat_alt) = _images(page)
    assert "histogram of the 16,384 sampled values" in hist_alt
    # the lattice keeps the view's proportions (300 x 700 -> 55 x 128: not stretched)
    assert heat.size == (128, 55) and (mw, mh) == (256, 110)
    assert "a 55 × 128 lattice of the 300 × 700 view" in heat_alt
    # each pixel is the element at its cell's centre: the sign of every clear one agrees
    rows = [((2 * i + 1) * 300) // (2 * 55) for i in range(55)]
    cols = [((2 * j + 1) * 700) // (2 * 128) for j in range(128)]
    clear = 0
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            red, _, blue, _ = heat.getpixel((j, i))
            if abs(tensors["b"][r, c]) > 0.02:
                clear += 1
                assert (red > blue) == (tensors["b"][r, c] > 0), (r, c)
    assert clear > 1000


def test_a_tensor_whose_values_cannot_be_read_says_why_and_draws_nothing(tmp_path):
    import json
    import struct
    header = json.dumps({"q": {"dtype": "Q9_Z", "shape": [7], "data_offsets": [0, 4]}}).encode()
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    page = tensorloupe.open(path).tensor("q")._repr_html_()
    assert _cell(page, "problem") == "unknown dtype 'Q9_Z': its values cannot be decoded"
    assert _cell(page, "statistics") is None and not _images(page)


def test_numpy_asarray_takes_the_tensor_itself(tmp_path):
    w = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    path = tmp_path / "m.safetensors"
    save_file({"w": w}, str(path))
    t = tensorloupe.open(path).tensor("w")
    assert np.array_equal(np.asarray(t), w) and np.asarray(t).dtype == np.float16
    wide = np.asarray(t, dtype=np.float64)
    assert wide.dtype == np.float64 and np.array_equal(wide, w.astype(np.float64))
    assert float(np.mean(t)) == float(w.astype(np.float64).mean())   # numpy's functions take it
    assert np.array(t, copy=True) is not np.array(t, copy=True)


def test_a_long_name_in_a_message_is_cut_with_an_ellipsis(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"w": np.ones(2, np.float32)}, str(path))
    ckpt = tensorloupe.open(path)
    with pytest.raises(tensorloupe.TensorloupeError) as e:
        ckpt.tensor("x" * 5000)
    message = str(e.value)
    assert len(message) < 400 and "'" + "x" * 199 + "…'" in message
    with pytest.raises(tensorloupe.TensorloupeError) as e:   # a short one is quoted whole
        ckpt.tensor("model.w")
    assert "no tensor named 'model.w'" in str(e.value)
