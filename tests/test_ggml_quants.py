"""ggml quant decoders against gguf-py, bit for bit; known answers where gguf-py has no decoder.

"Bit for bit" is checked on the Python floats themselves (as float64 bit patterns), which is
stricter than comparing after a cast to float32: our doubles must *be* the float32 values.
"""

import math
import struct
import zlib
from types import SimpleNamespace

import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as GT
from gguf.quants import dequantize, quantize
from gguf.scripts.gguf_convert_endian import byteswap_tensors

from tensorloupe.dtypes.plain import DTYPES
from tensorloupe.dtypes.ggml import (grids as ggml_grids, iquants as ggml_iquants,
                                     legacy as ggml_legacy)
from tensorloupe.dtypes.ggml import GGML_TYPE_NAMES, QUANT_DTYPES, ggml_dtype

# gguf-py 0.19.0 has no dequantizer for these; they get known-answer tests below.
NO_GGUF_DECODER = {"Q8_1", "Q8_K", "Q1_0"}
WITH_GGUF_DECODER = [name for name in QUANT_DTYPES if name not in NO_GGUF_DECODER]

# Byte offsets of the f16 scale fields, from the block structs in ggml-common.h.
F16_SCALES = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q8_1": (0, 2),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "IQ2_XXS": (0,), "IQ2_XS": (0,), "IQ3_XXS": (0,), "IQ1_S": (0,), "IQ4_NL": (0,), "IQ3_S": (0,),
    "IQ2_S": (0,), "IQ4_XS": (0,), "TQ1_0": (52,), "TQ2_0": (64,), "Q1_0": (0,),
}

# Every field declared wider than a byte in ggml-common.h, as (offset, element bytes, count):
# what a big-endian GGUF stores byte-swapped.
MULTIBYTE_FIELDS = {
    "Q4_0": [(0, 2, 1)], "Q4_1": [(0, 2, 2)], "Q5_0": [(0, 2, 1)], "Q5_1": [(0, 2, 2)],
    "Q8_0": [(0, 2, 1)], "Q8_1": [(0, 2, 2)], "Q2_K": [(80, 2, 2)], "Q3_K": [(108, 2, 1)],
    "Q4_K": [(0, 2, 2)], "Q5_K": [(0, 2, 2)], "Q6_K": [(208, 2, 1)],
    "Q8_K": [(0, 4, 1), (260, 2, 16)],                     # float d; int16_t bsums[16]
    "IQ2_XXS": [(0, 2, 33)], "IQ2_XS": [(0, 2, 33)],      # d, then uint16_t qs[32]
    "IQ3_XXS": [(0, 2, 1)], "IQ1_S": [(0, 2, 1), (34, 2, 8)],  # IQ1_S: uint16_t qh[8]
    "IQ4_NL": [(0, 2, 1)], "IQ3_S": [(0, 2, 1)], "IQ2_S": [(0, 2, 1)], "IQ4_XS": [(0, 2, 2)],
    "IQ1_M": [], "TQ1_0": [(52, 2, 1)], "TQ2_0": [(64, 2, 1)], "MXFP4": [], "NVFP4": [],
    "Q1_0": [(0, 2, 1)],
}


def rng_for(name: str, salt: int = 0) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()) + salt)


def finite_f16_bits(rng, n: int) -> np.ndarray:
    """Random f16 bit patterns, never inf/NaN; zeros, -0 and subnormals forced into the first four."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    bits[(bits & 0x7C00) == 0x7C00] &= np.uint16(0xBFFF)  # exponent 31 -> 15
    bits[:4] = np.array([0x0000, 0x8000, 0x0001, 0x83FF], dtype=np.uint16)[:n]
    return bits


def random_blocks(name: str, n_blocks: int, rng) -> np.ndarray:
    """Random blocks whose scales are finite: the f16 fields, IQ1_M's split f16, E8M0, UE4M3."""
    size = QUANT_DTYPES[name].block_bytes
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for offset in F16_SCALES.get(name, ()):
        raw[:, offset:offset + 2] = finite_f16_bits(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    if name == "IQ1_M":  # d's 4 nibbles are the top nibbles of the 4 uint16 scale words (bytes 48-55)
        d = finite_f16_bits(rng, n_blocks).astype(np.uint16)
        words = raw[:, 48:56].copy().view(np.uint16)
        for i in range(4):
            words[:, i] = (words[:, i] & 0x0FFF) | (((d >> (4 * i)) & 0xF) << 12)
        raw[:, 48:56] = words.view(np.uint8)
    if name == "MXFP4":  # every E8M0 code but 0xFF (NaN in OCP MX); 253 and 254 overflow to inf
        raw[:, 0] = rng.integers(0, 255, size=n_blocks)
    if name == "NVFP4":  # UE4M3 codes without the unused top bit and without 0x7F (NaN)
        raw[:, 0:4] = rng.integers(0, 0x7F, size=(n_blocks, 4))
    return raw


def assert_same(ours: list, ref: np.ndarray):
    """Exact equality of our Python floats with reference float32 values; NaN matches NaN."""
    assert all(type(v) is float for v in ours[:64])
    got = np.array(ours, dtype=np.float64)
    want = np.asarray(ref, dtype=np.float32).astype(np.float64).ravel()
    assert got.shape == want.shape
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    bad = np.nonzero(got[~nan].view(np.uint64) != want[~nan].view(np.uint64))[0]
    if bad.size:
        first = bad[0]
        pytest.fail(f"{bad.size} values differ; first: {got[~nan][first]!r} vs {want[~nan][first]!r}")


def gguf_dequantize(name: str, raw: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):  # gguf-py multiplies inf scales by 0 quants on purpose
        return dequantize(raw.reshape(-1), GT[name]).reshape(-1)


# --- against gguf-py ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", WITH_GGUF_DECODER)
def test_random_blocks_with_finite_scales_match_gguf(name):
    raw = random_blocks(name, 96, rng_for(name))
    assert_same(QUANT_DTYPES[name].decode(raw.tobytes(), False), gguf_dequantize(name, raw))


@pytest.mark.parametrize("name", WITH_GGUF_DECODER)
def test_random_bytes_match_gguf_even_with_inf_and_nan_scales(name):
    # Unconstrained bytes: inf/NaN f16 scales, E8M0 0xFF, 0x7F/top-bit UE4M3 codes.
    raw = rng_for(name, 1).integers(0, 256, size=(96, QUANT_DTYPES[name].block_bytes), dtype=np.uint8)
    assert_same(QUANT_DTYPES[name].decode(raw.tobytes(), False), gguf_dequantize(name, raw))


def _gguf_can_quantize(name: str) -> bool:
    try:
        quantize(np.zeros(GGML_QUANT_SIZES[GT[name]][0], dtype=np.float32), GT[name])
    except NotImplementedError:
        return False
    return True


QUANTIZABLE = [name for name in WITH_GGUF_DECODER if _gguf_can_quantize(name)]


def test_gguf_quantizers_we_rely_on_are_found():
    # If gguf-py grows a quantizer, it joins the next test automatically; none may silently go.
    assert {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4"} <= set(QUANTIZABLE)


@pytest.mark.parametrize("name", QUANTIZABLE)
def test_gguf_quantized_weights_match_gguf(name):
    rng = rng_for(name, 2)
    elems = GGML_QUANT_SIZES[GT[name]][0]
    data = (rng.standard_normal(64 * elems) * rng.choice([1e-3, 0.02, 1.0, 300.0], 64).repeat(elems))
    data = data.astype(np.float32)
    data[:elems] = 0  # an all-zero block: d = 0
    raw = quantize(data, GT[name]).reshape(64, -1)
    assert_same(QUANT_DTYPES[name].decode(raw.tobytes(), False), gguf_dequantize(name, raw))


def test_grids_and_codebooks_match_gguf():
    import gguf.quants as gq
    for grid_name, cls in [("iq2xxs", gq.IQ2_XXS), ("iq2xs", gq.IQ2_XS), ("iq2s", gq.IQ2_S),
                           ("iq3xxs", gq.IQ3_XXS), ("iq3s", gq.IQ3_S), ("iq1s", gq.IQ1_S)]:
        cls.init_grid()
        ours = np.array(ggml_grids.grid(grid_name), dtype=np.float32)
        assert np.array_equal(ours, cls.grid.reshape(ours.shape)), grid_name
    assert bytes(ggml_iquants.KSIGNS) == gq.IQ2_XXS.ksigns
    assert ggml_iquants.KVALUES_IQ4NL == gq.IQ4_NL.kvalues
    assert ggml_legacy.KVALUES_FP4 == gq.MXFP4.kvalues == gq.NVFP4.kvalues
    codes = np.arange(256, dtype=np.uint8)
    assert ggml_legacy.UE4M3_HALF == tuple(gq.NVFP4.ue4m3_to_fp32(codes).astype(np.float64).tolist())
    assert ggml_legacy.E8M0_HALF == tuple(gq.MXFP4.e8m0_to_fp32_half(codes).astype(np.float64).tolist())


# --- big-endian -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(t.name for t in byteswap_tensors))
def test_big_endian_as_written_by_gguf_convert_endian(name):
    raw = random_blocks(name, 32, rng_for(name, 3))
    swapped = raw.copy().reshape(-1)
    tensor = SimpleNamespace(data=swapped)
    for block in range(raw.shape[0]):  # gguf-py's own per-block swap functions
        byteswap_tensors[GT[name]](tensor, block * raw.shape[1])
    decode = QUANT_DTYPES[name].decode
    assert_same(decode(swapped.tobytes(), True), gguf_dequantize(name, raw))


def swap_fields(raw: np.ndarray, fields) -> np.ndarray:
    out = raw.copy()
    for offset, item, count in fields:
        span = out[:, offset:offset + item * count].reshape(len(out), count, item)
        out[:, offset:offset + item * count] = span[:, :, ::-1].reshape(len(out), item * count)
    return out


@pytest.mark.parametrize("name", list(QUANT_DTYPES))
def test_big_endian_swaps_exactly_the_multibyte_c_fields(name):
    raw = random_blocks(name, 32, rng_for(name, 4))
    decode = QUANT_DTYPES[name].decode
    little = decode(raw.tobytes(), False)
    assert_same(decode(swap_fields(raw, MULTIBYTE_FIELDS[name]).tobytes(), True), np.array(little))
    if not MULTIBYTE_FIELDS[name]:  # all-byte blocks: big-endian is the same bytes
        assert_same(decode(raw.tobytes(), True), np.array(little))


# --- table ------------------------------------------------------------------------------------------

def test_block_sizes_match_gguf():
    for name, dtype in QUANT_DTYPES.items():
        assert dtype.kind == "quant"
        if name == "Q8_1":
            # gguf-py 0.19.0 still lists the pre-2024 layout {float d; float s; int8 qs[32]} = 40.
            # ggml-common.h: block_q8_1 {ggml_half d; ggml_half s; int8_t qs[32]} and
            # static_assert(sizeof(block_q8_1) == 2*sizeof(ggml_half) + QK8_1) = 36. We follow ggml;
            # if gguf-py is fixed, this branch fails and can go.
            assert GGML_QUANT_SIZES[GT.Q8_1] == (32, 40)
            assert (dtype.block_elems, dtype.block_bytes) == (32, 36)
            continue
        assert (dtype.block_elems, dtype.block_bytes) == GGML_QUANT_SIZES[GT[name]], name


def test_every_ggml_type_id_has_a_row_and_a_decoder():
    assert set(GGML_TYPE_NAMES) == {t.value for t in GT}
    for t in GT:
        assert GGML_TYPE_NAMES[t.value] == t.name
        dtype = ggml_dtype(t.value)
        assert dtype is (DTYPES.get(t.name) or QUANT_DTYPES[t.name])
        if t.name in DTYPES:
            assert (dtype.block_elems, dtype.block_bytes) == GGML_QUANT_SIZES[t]
    assert ggml_dtype(4) is None  # Q4_2: removed from ggml
    assert ggml_dtype(1000) is None


# --- known answers where gguf-py has no decoder ------------------------------------------------------

def f16(x: float) -> bytes:
    return struct.pack("<e", x)


def test_q8_1_known_answer():
    # block_q8_1: ggml_half d, ggml_half s (= d * sum(qs), unused for values), int8 qs[32].
    qs = [-128, -1, 0, 1, 127] + [2] * 27
    block = f16(0.25) + f16(123.0) + struct.pack("<32b", *qs)
    expected = [-32.0, -0.25, 0.0, 0.25, 31.75] + [0.5] * 27
    assert QUANT_DTYPES["Q8_1"].decode(block, False) == expected
    big = f16(0.25)[::-1] + f16(123.0)[::-1] + struct.pack("<32b", *qs)
    assert QUANT_DTYPES["Q8_1"].decode(big, True) == expected


def test_q8_k_known_answer():
    # block_q8_K: float d, int8 qs[256], int16 bsums[16] (unused for values). y = d * q in float32.
    # d = 1 + 2**-23: d * 3 = 3 + 1.5 * 2**-22 lies halfway between the float32 neighbours
    # 3 + 2**-22 (odd last bit) and 3 + 2**-21 (even): float32 rounds to 3 + 2**-21.
    d = 1 + 2 ** -23
    qs = [3, -128, 0, 1] + [0] * 252
    block = struct.pack("<f", d) + struct.pack("<256b", *qs) + struct.pack("<16h", *range(16))
    out = QUANT_DTYPES["Q8_K"].decode(block, False)
    assert out[:4] == [3 + 2 ** -21, -128 - 2 ** -16, 0.0, d]
    assert out[4:] == [0.0] * 252
    big = struct.pack(">f", d) + struct.pack("<256b", *qs) + struct.pack(">16h", *range(16))
    assert QUANT_DTYPES["Q8_K"].decode(big, True) == out


def test_q1_0_known_answer():
    # block_q1_0: ggml_half d, uint8 qs[16]; bit j (LSB first) set -> +d, clear -> -d.
    qs = bytes([0x01, 0x80, 0xFF, 0x00]) + bytes(12)
    block = f16(0.5) + qs + f16(-2.0) + bytes([0xFF] * 16)
    out = QUANT_DTYPES["Q1_0"].decode(block, False)
    assert out[0:8] == [0.5] + [-0.5] * 7
    assert out[8:16] == [-0.5] * 7 + [0.5]
    assert out[16:24] == [0.5] * 8
    assert out[24:128] == [-0.5] * 104
    assert out[128:] == [-2.0] * 128
    zero = QUANT_DTYPES["Q1_0"].decode(f16(0.0) + bytes([0x01]) + bytes(15), False)
    assert math.copysign(1, zero[0]) == 1 and math.copysign(1, zero[1]) == -1  # -d of +0 is -0


# --- the decode contract ---------------------------------------------------------------------------

def test_partial_blocks_are_refused():
    with pytest.raises(ValueError, match=r"Q4_K data must be whole 144-byte blocks, got 145 bytes"):
        QUANT_DTYPES["Q4_K"].decode(bytes(145), False)


@pytest.mark.parametrize("name", list(QUANT_DTYPES))
def test_empty_and_memoryview_inputs(name):
    dtype = QUANT_DTYPES[name]
    assert dtype.decode(b"", False) == []
    raw = random_blocks(name, 3, rng_for(name, 5)).tobytes()
    framed = memoryview(b"x" + raw + b"y")[1:-1]
    out = dtype.decode(framed, False)
    assert len(out) == 3 * dtype.block_elems
    assert_same(out, np.array(dtype.decode(raw, False)))
