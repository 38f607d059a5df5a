"""Every decoder against a reference on every code point (numpy, torch, ml_dtypes are the oracles)."""

import math
import struct

import ml_dtypes
import numpy as np
import pytest
import torch

from tensorloupe.dtypes import lookup
from tensorloupe.dtypes.plain import DTYPES, SAFETENSORS_DTYPES, minifloat_table


def same(ours, ref) -> bool:
    """Bit-level equality of two float lists: NaN matches NaN, -0.0 differs from 0.0."""
    if len(ours) != len(ref):
        return False
    for a, b in zip(ours, ref):
        if math.isnan(a) or math.isnan(b):
            if not (math.isnan(a) and math.isnan(b)):
                return False
        elif a != b or math.copysign(1, a) != math.copysign(1, b):
            return False
    return True


ALL_U16 = np.arange(1 << 16, dtype=np.uint16)
ALL_U8 = np.arange(256, dtype=np.uint8)


def test_f16_every_code_point_matches_numpy():
    ref = ALL_U16.view(np.float16).astype(np.float64).tolist()
    assert same(DTYPES["F16"].decode(ALL_U16.tobytes(), False), ref)
    # subnormals, infinities and NaN are among them; spot-check the edges explicitly too
    assert DTYPES["F16"].decode(struct.pack("<H", 0x0001), False) == [2.0 ** -24]
    assert DTYPES["F16"].decode(struct.pack("<H", 0xFC00), False) == [-math.inf]


def test_f16_big_endian():
    ref = ALL_U16.view(np.float16).astype(np.float64).tolist()
    assert same(DTYPES["F16"].decode(ALL_U16.byteswap().tobytes(), True), ref)


def test_bf16_every_code_point_matches_torch():
    ref = torch.from_numpy(ALL_U16.view(np.int16).copy()).view(torch.bfloat16).double().tolist()
    assert same(DTYPES["BF16"].decode(ALL_U16.tobytes(), False), ref)
    assert same(DTYPES["BF16"].decode(ALL_U16.byteswap().tobytes(), True), ref)
    assert DTYPES["BF16"].decode(struct.pack("<H", 0xBF80), False) == [-1.0]  # negatives (the JS pitfall)


@pytest.mark.parametrize("name, reference", [
    ("F8_E4M3", ml_dtypes.float8_e4m3fn),
    ("F8_E5M2", ml_dtypes.float8_e5m2),
    ("F8_E4M3FNUZ", ml_dtypes.float8_e4m3fnuz),
    ("F8_E5M2FNUZ", ml_dtypes.float8_e5m2fnuz),
    ("F8_E8M0", ml_dtypes.float8_e8m0fnu),
])
def test_fp8_every_code_point_matches_ml_dtypes(name, reference):
    ref = ALL_U8.view(reference).astype(np.float64).tolist()
    assert same(DTYPES[name].decode(ALL_U8.tobytes(), False), ref)


@pytest.mark.parametrize("name, torch_dtype", [
    ("F8_E4M3", torch.float8_e4m3fn), ("F8_E5M2", torch.float8_e5m2),
    ("F8_E4M3FNUZ", torch.float8_e4m3fnuz), ("F8_E5M2FNUZ", torch.float8_e5m2fnuz),
    ("F8_E8M0", torch.float8_e8m0fnu),
])
def test_fp8_every_code_point_matches_torch(name, torch_dtype):
    ref = torch.from_numpy(ALL_U8.copy()).view(torch_dtype).double().tolist()
    assert same(DTYPES[name].decode(ALL_U8.tobytes(), False), ref)


def test_fp4_every_code_point_and_nibble_order():
    ref = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64).tolist()
    packed = bytes((lo | (hi << 4)) for lo, hi in zip(range(0, 16, 2), range(1, 16, 2)))
    assert same(DTYPES["F4"].decode(packed, False), ref)
    # torch's float4_e2m1fn_x2 agrees that element 0 is the low nibble
    t = torch.tensor([0x21], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    assert DTYPES["F4"].decode(bytes([0x21]), False) == [0.5, 1.0]
    assert t.dtype == torch.float4_e2m1fn_x2


@pytest.mark.parametrize("name, reference", [
    ("F6_E2M3", ml_dtypes.float6_e2m3fn), ("F6_E3M2", ml_dtypes.float6_e3m2fn)])
def test_fp6_every_code_point(name, reference):
    ref = np.arange(64, dtype=np.uint8).view(reference).astype(np.float64).tolist()
    # 64 codes packed four per 3 bytes, element 0 in the low bits of a little-endian 24-bit word
    packed = bytearray()
    for i in range(0, 64, 4):
        word = i | (i + 1) << 6 | (i + 2) << 12 | (i + 3) << 18
        packed += word.to_bytes(3, "little")
    assert same(DTYPES[name].decode(bytes(packed), False), ref)


@pytest.mark.parametrize("name, np_dtype", [
    ("U8", np.uint8), ("I8", np.int8), ("U16", np.uint16), ("I16", np.int16), ("U32", np.uint32),
    ("I32", np.int32), ("U64", np.uint64), ("I64", np.int64), ("F32", np.float32), ("F64", np.float64),
])
def test_plain_types_match_numpy_both_byte_orders(name, np_dtype):
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=np.dtype(np_dtype).itemsize * 500, dtype=np.uint8).tobytes()
    little = np.frombuffer(raw, dtype=np.dtype(np_dtype).newbyteorder("<"))
    big = np.frombuffer(raw, dtype=np.dtype(np_dtype).newbyteorder(">"))
    if little.dtype.kind == "f":
        with np.errstate(invalid="ignore"):  # random bytes include signalling NaNs
            little64, big64 = little.astype(np.float64), big.astype(np.float64)
        assert same(DTYPES[name].decode(raw, False), little64.tolist())
        assert same(DTYPES[name].decode(raw, True), big64.tolist())
    else:
        assert DTYPES[name].decode(raw, False) == little.tolist()
        assert DTYPES[name].decode(raw, True) == big.tolist()


def test_integer_extremes_are_exact():
    raw = np.array([-(2 ** 63), 2 ** 63 - 1], dtype="<i8").tobytes()
    assert DTYPES["I64"].decode(raw, False) == [-(2 ** 63), 2 ** 63 - 1]
    raw = np.array([2 ** 64 - 1], dtype="<u8").tobytes()
    assert DTYPES["U64"].decode(raw, False) == [2 ** 64 - 1]


def test_complex_and_bool():
    z = np.array([1 + 2j, -3.5 - 0.25j, complex(math.inf, math.nan)], dtype=np.complex64)
    got = DTYPES["C64"].decode(z.tobytes(), False)
    assert got[:2] == [1 + 2j, -3.5 - 0.25j]
    assert got[2].real == math.inf and math.isnan(got[2].imag)
    assert DTYPES["C128"].decode(np.array([1e300 - 1j]).tobytes(), False) == [1e300 - 1j]
    assert DTYPES["BOOL"].decode(bytes([0, 1, 2]), False) == [False, True, True]


def test_table_covers_the_safetensors_spec():
    spec = {"BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
            "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
            "F64", "I64", "U64"}
    assert spec == SAFETENSORS_DTYPES
    bits = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "F8_E8M0": 8, "F16": 16,
            "BF16": 16, "C64": 64, "F64": 64}
    for name, expected in bits.items():
        assert DTYPES[name].bits == expected


def test_lookup_unknown_is_none():
    assert lookup("F7_E3M3") is None
    assert lookup("F32") is DTYPES["F32"]


def test_minifloat_special_codes():
    e4m3 = minifloat_table(4, 3, 7, "fn")
    assert e4m3[0x7E] == 448.0 and math.isnan(e4m3[0x7F]) and e4m3[0x01] == 2.0 ** -9
    e5m2 = minifloat_table(5, 2, 15, "ieee")
    assert e5m2[0x7C] == math.inf and e5m2[0xFC] == -math.inf


def test_plain_and_ggml_names_do_not_overlap_so_lookup_tries_plain_first():
    # lookup() imports the ggml codecs only for a name that is not plain: that is only right if
    # no name is in both tables.
    from tensorloupe.dtypes.ggml import QUANT_DTYPES
    from tensorloupe.dtypes.plain import DTYPES
    assert set(DTYPES) & set(QUANT_DTYPES) == set()
    assert lookup("Q4_K") is QUANT_DTYPES["Q4_K"] and lookup("BF16") is DTYPES["BF16"]
    assert lookup("Q4_2") is None   # removed from ggml: no row
