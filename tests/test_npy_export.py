"""Export as .npy, written by the library with the standard library: numpy.load reads back the
exact elements, in the tensor's own dtype where NumPy has it, float32 where it has none."""

import io

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

import tensorloupe
from tensorloupe.errors import UsageError
from tensorloupe.npy import export_tensor, export_tile

RNG = np.random.default_rng(7)
ARRAYS = {
    "f32": RNG.standard_normal((3, 5)).astype(np.float32),
    "f16": np.array([[1.5, -0.0, np.inf], [np.nan, 65504, 6e-8]], np.float16),
    "f64": RNG.standard_normal(7),
    "i8": np.arange(-4, 4, dtype=np.int8).reshape(2, 2, 2),
    "u8": np.arange(6, dtype=np.uint8),
    "i16": np.array([-32768, 32767], np.int16),
    "i32": np.arange(-3, 3, dtype=np.int32),
    "i64": np.array([[-(2 ** 62), 2 ** 62]], np.int64),
    "bool": np.array([True, False, True]),
    "scalar": np.array(2.5, np.float32),
    "bf16": RNG.standard_normal((4, 3)).astype(ml_dtypes.bfloat16),
    "f8": RNG.standard_normal(8).astype(ml_dtypes.float8_e4m3fn),
}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("npy") / "all.safetensors"
    save_file(ARRAYS, str(path))
    return tensorloupe.open(path)


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_whole_tensor_round_trips_through_numpy(ckpt, name):
    out = export_tensor(ckpt.tensor(name))
    loaded = np.load(io.BytesIO(out.data))
    original = ARRAYS[name]
    assert loaded.shape == original.shape
    if name in ("bf16", "f8"):            # no NumPy dtype: float32, which holds them exactly
        assert loaded.dtype == np.float32 and not out.exact_dtype
        np.testing.assert_array_equal(loaded, original.astype(np.float32))
    else:
        assert loaded.dtype == original.dtype and out.exact_dtype
        assert loaded.tobytes() == original.tobytes()      # bit for bit, NaN and -0 included
    assert (out.data.index(b"\n") + 1) % 64 == 0          # the data starts 64-byte aligned


def test_a_tile_is_the_region_shown(ckpt):
    out = export_tile(ckpt.tensor("f32"), (1, 3, 2, 5))
    np.testing.assert_array_equal(np.load(io.BytesIO(out.data)), ARRAYS["f32"][1:3, 2:5])
    out = export_tile(ckpt.tensor("i8"), (0, 2, 1, 2), plane=(0, 2), index={1: 1})
    np.testing.assert_array_equal(np.load(io.BytesIO(out.data)), ARRAYS["i8"][:, 1, 1:2])


def test_a_quantised_gguf_tensor_exports_its_dequantised_values(tmp_path):
    import gguf_files
    from gguf import GGUFReader
    from gguf.quants import dequantize
    path = gguf_files.write_llama(tmp_path / "l.gguf")
    name = "blk.0.attn_q.weight"
    [ref] = [t for t in GGUFReader(path).tensors if t.name == name]
    expected = dequantize(ref.data, ref.tensor_type)
    loaded = np.load(io.BytesIO(export_tensor(tensorloupe.open(path).tensor(name)).data))
    assert loaded.dtype == np.float32 and loaded.shape == expected.shape
    np.testing.assert_allclose(loaded, expected, rtol=1e-6, atol=1e-6)


def test_too_large_an_export_is_refused(ckpt):
    with pytest.raises(UsageError, match="export the visible tile instead"):
        export_tensor(ckpt.tensor("f32"), max_elements=10)
