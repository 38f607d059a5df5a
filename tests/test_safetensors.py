"""safetensors reader: files written by the safetensors library, hostile headers (one rule per
test, with the exact error), impostor files, and random corruption."""

import json
import math
import struct

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save as np_save
from safetensors.torch import load as torch_load_bytes
from safetensors.torch import save as torch_save

import tensorloupe
from tensorloupe.errors import (FormatError, LimitError, TensorloupeError, TruncatedError,
                                UnknownFormatError)
from tensorloupe.sampler.sampling import sample, values


def build(header: dict, data: bytes = b"", *, raw_header: bytes | None = None) -> bytes:
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def f32(n: int) -> bytes:
    return struct.pack("<%df" % n, *range(n))


# --- files written by the reference library -----------------------------------------------------

NUMPY_TENSORS = {
    "float32": np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5,
    "float16": np.linspace(-3, 3, 50, dtype=np.float16),
    "float64": np.array([math.pi, -math.e, 1e300]),
    "int8": np.array([-128, 0, 127], dtype=np.int8),
    "uint8": np.arange(7, dtype=np.uint8),
    "int16": np.array([-(2 ** 15), 2 ** 15 - 1], dtype=np.int16),
    "uint16": np.array([0, 2 ** 16 - 1], dtype=np.uint16),
    "int32": np.arange(-5, 5, dtype=np.int32).reshape(2, 5),
    "uint32": np.array([2 ** 32 - 1], dtype=np.uint32),
    "int64": np.array([-(2 ** 63), 2 ** 63 - 1], dtype=np.int64),
    "uint64": np.array([2 ** 64 - 1], dtype=np.uint64),
    "bool": np.array([True, False, True]),
    "complex64": np.array([1 + 2j, -0.5j], dtype=np.complex64),
    "scalar": np.array(3.25, dtype=np.float32),
    "empty": np.zeros((0, 4), dtype=np.float32),
}


def test_numpy_written_file_reads_back_identically():
    data = np_save(NUMPY_TENSORS, metadata={"author": "test", "n": "3"})
    ckpt = tensorloupe.open(data, name="np.safetensors")
    assert ckpt.format == "safetensors"
    assert ckpt.metadata == {"author": "test", "n": "3"}
    assert {t.name for t in ckpt.tensors} == set(NUMPY_TENSORS)
    for name, array in NUMPY_TENSORS.items():
        t = ckpt.tensor(name)
        assert t.shape == array.shape
        assert t.nbytes == array.nbytes
        assert values(t, 0, t.numel) == array.ravel().tolist()
    assert ckpt.warnings == []


def test_torch_written_file_matches_safetensors_load():
    g = torch.Generator().manual_seed(0)
    tensors = {
        "bf16": torch.randn(33, 17, generator=g).to(torch.bfloat16),
        "f8_e4m3": torch.randn(64, generator=g).to(torch.float8_e4m3fn),
        "f8_e5m2": torch.randn(64, generator=g).to(torch.float8_e5m2),
        "f16": torch.randn(4, 4, 4, generator=g).half(),
        "f32": torch.randn(1000, generator=g),
    }
    data = torch_save(tensors)
    reference = torch_load_bytes(data)
    ckpt = tensorloupe.open(data)
    expected_dtypes = {"bf16": "BF16", "f8_e4m3": "F8_E4M3", "f8_e5m2": "F8_E5M2", "f16": "F16", "f32": "F32"}
    for name, ref in reference.items():
        t = ckpt.tensor(name)
        assert t.dtype == expected_dtypes[name]
        assert list(t.shape) == list(ref.shape)
        assert values(t, 0, t.numel) == ref.double().flatten().tolist()
    # tensor offsets agree with the header the library wrote
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + n])
    for name in tensors:
        assert ckpt.tensor(name).offset == 8 + n + header[name]["data_offsets"][0]


def test_sampled_values_are_the_elements_at_their_positions():
    big = np.random.default_rng(1).standard_normal((500, 300)).astype(np.float32)
    ckpt = tensorloupe.open(np_save({"w": big}))
    s = sample(ckpt.tensor("w"), 2048)
    flat = big.ravel()
    got = []
    for start, count in s.windows:
        got += flat[start:start + count].astype(np.float64).tolist()
    assert s.values == got and len(got) <= 2048


# --- hostile and malformed headers: one broken rule per test -------------------------------------

def test_header_length_over_the_cap():
    with pytest.raises(LimitError, match="larger than the 100 MB"):
        tensorloupe.open(struct.pack("<Q", 200_000_000) + b"{}", name="big.safetensors")


def test_header_length_past_the_end_of_file():
    with pytest.raises(TruncatedError, match="header runs past the end"):
        tensorloupe.open(struct.pack("<Q", 5000) + b'{"a":1}', name="x.safetensors")


def test_header_not_json():
    with pytest.raises(FormatError, match="not valid JSON"):
        tensorloupe.open(build({}, raw_header=b'{"a": [1, 2'))


def test_header_not_utf8():
    with pytest.raises(FormatError, match="not valid UTF-8"):
        tensorloupe.open(build({}, raw_header=b'{"\xff": 1}'))


def test_header_not_an_object():
    with pytest.raises(FormatError, match="not a JSON object"):
        tensorloupe.open(build({}, raw_header=b"[1, 2, 3]"), name="x.safetensors")


def test_metadata_values_must_be_strings():
    with pytest.raises(FormatError, match="__metadata__ must map strings to strings"):
        tensorloupe.open(build({"__metadata__": {"epoch": 3}}))


def test_missing_fields():
    with pytest.raises(FormatError, match="tensor 'a' has no data_offsets"):
        tensorloupe.open(build({"a": {"dtype": "F32", "shape": [1]}}))


def test_negative_dimension():
    with pytest.raises(FormatError, match="invalid shape"):
        tensorloupe.open(build({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, f32(1)))


def test_shape_does_not_match_byte_length():
    with pytest.raises(FormatError, match=r"needs 12 bytes but data_offsets \[0, 8\] hold 8"):
        tensorloupe.open(build({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, f32(2)))


def test_overflowing_shape_is_caught_without_overflow():
    shape = [2 ** 62, 2 ** 62, 2 ** 62]  # product far beyond 64 bits: Python ints make it a plain mismatch
    with pytest.raises(FormatError, match="needs"):
        tensorloupe.open(build({"a": {"dtype": "F32", "shape": shape, "data_offsets": [0, 4]}}, f32(1)))


def test_offsets_backwards():
    with pytest.raises(FormatError, match="ends before it begins"):
        tensorloupe.open(build({"a": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}}, f32(1)))


def test_hole_between_tensors():
    header = {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
              "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}
    with pytest.raises(FormatError, match="'b' leaves a hole before the end of 'a'"):
        tensorloupe.open(build(header, f32(3)))


def test_overlapping_tensors():
    header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}
    with pytest.raises(FormatError, match="overlaps"):
        tensorloupe.open(build(header, f32(2)))


def test_first_tensor_not_at_zero():
    with pytest.raises(FormatError, match="hole before the data section start"):
        tensorloupe.open(build({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, f32(2)))


def test_truncated_download():
    full = build({"a": {"dtype": "F32", "shape": [100], "data_offsets": [0, 400]}}, f32(100))
    with pytest.raises(TruncatedError, match="240 bytes shorter than its header says"):
        tensorloupe.open(full[:-240], name="model.safetensors")


def test_trailing_bytes_after_last_tensor():
    with pytest.raises(FormatError, match="4 bytes after the last tensor"):
        tensorloupe.open(build({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, f32(2)))


def test_sub_byte_dtype_must_fill_whole_bytes():
    with pytest.raises(FormatError, match="do not fill whole bytes"):
        tensorloupe.open(build({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, b"\0\0"))


def test_unknown_dtype_is_flagged_on_the_tensor_and_the_file_opens():
    header = {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
              "q": {"dtype": "Q9_Z", "shape": [7], "data_offsets": [4, 8]}}
    ckpt = tensorloupe.open(build(header, f32(2)))
    assert ckpt.tensor("q").problem == "unknown dtype 'Q9_Z': its values cannot be decoded"
    assert any("Q9_Z" in w for w in ckpt.warnings)
    assert values(ckpt.tensor("a"), 0, 1) == [0.0]
    with pytest.raises(TensorloupeError, match="cannot be read"):
        sample(ckpt.tensor("q"))


def test_duplicate_keys_open_with_a_warning():
    raw = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    ckpt = tensorloupe.open(build({}, f32(1), raw_header=raw))
    assert len(ckpt.tensors) == 1
    assert any("names 'a' more than once" in w for w in ckpt.warnings)


def test_leading_whitespace_opens_with_a_warning():
    raw = b'  {"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    ckpt = tensorloupe.open(build({}, f32(1), raw_header=raw))
    assert values(ckpt.tensor("a"), 0, 1) == [0.0]
    assert any("starts with 2 whitespace bytes" in w for w in ckpt.warnings)


def test_trailing_space_padding_is_normal():
    raw = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}     '
    assert tensorloupe.open(build({}, f32(1), raw_header=raw)).warnings == []


# --- impostors ----------------------------------------------------------------------------------

def test_git_lfs_pointer():
    pointer = (b"version https://git-lfs.github.com/spec/v1\n"
               b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
               b"size 4939212345\n")
    with pytest.raises(UnknownFormatError, match=r"Git LFS pointer.*4,939,212,345 bytes.*git lfs pull"):
        tensorloupe.open(pointer, name="model.safetensors")


def test_html_error_page():
    page = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>...</body></html>"
    with pytest.raises(UnknownFormatError, match="HTML page"):
        tensorloupe.open(page, name="model.safetensors")


def test_empty_file():
    with pytest.raises(UnknownFormatError, match="empty"):
        tensorloupe.open(b"", name="model.safetensors")


def test_unrecognised_bytes_without_extension():
    with pytest.raises(UnknownFormatError, match="not a checkpoint"):
        tensorloupe.open(b"\x01\x02\x03\x04" * 10, name="mystery")


def test_errors_name_the_file(tmp_path):
    path = tmp_path / "broken.safetensors"
    path.write_bytes(struct.pack("<Q", 50) + b"{}")
    with pytest.raises(TensorloupeError) as e:
        tensorloupe.open(path)
    assert str(e.value).startswith("broken.safetensors: safetensors: ")


# --- random corruption never raises anything but our own error -----------------------------------

VALID = np_save({"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.float16)},
                metadata={"k": "v"})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8),
       st.integers(0, len(VALID)))
def test_random_corruption_raises_only_our_errors(edits, cut):
    data = bytearray(VALID[:max(cut, 1)] if cut < 40 else VALID)
    for position, byte in edits:
        if position < len(data):
            data[position] = byte
    try:
        ckpt = tensorloupe.open(bytes(data), name="fuzz.safetensors")
        for t in ckpt.tensors:
            if not t.problem:
                sample(t, 64)
    except TensorloupeError:
        pass
