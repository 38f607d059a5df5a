"""The element types tensorloupe can decode: one table row per dtype, exact decoders to Python numbers.

Every dtype is described as blocks: `block_elems` elements stored in `block_bytes` bytes. Plain
dtypes are blocks of one element; sub-byte floats pack several (F4: 2 per byte, F6: 4 per 3 bytes);
ggml quantizations (dtypes/ggml/) are blocks of 32-256 elements with their scales. The
sampler only ever deals in whole blocks, so it needs no per-format cases.

Names are the safetensors header codes (the most widely written spelling); torch and ggml readers map
their own type names onto these rows.
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from dataclasses import dataclass
from typing import Callable

Decoder = Callable[[bytes, bool], list]


@dataclass(frozen=True)
class DType:
    name: str
    block_elems: int
    block_bytes: int
    kind: str  # "float" | "int" | "uint" | "bool" | "complex" | "quant"
    decode: Decoder  # decode(buf of whole blocks, big_endian) -> list of Python numbers

    @property
    def bits(self) -> float:
        return self.block_bytes * 8 / self.block_elems

    def nbytes(self, numel: int) -> int:
        """Bytes needed for `numel` elements (whole blocks), with Python ints: no overflow."""
        blocks = -(-numel // self.block_elems)
        return blocks * self.block_bytes


# --- plain binary types: array/struct do the work at C speed --------------------------------------

def _array_decoder(typecode: str) -> Decoder:
    def decode(buf, big_endian=False):
        values = array(typecode)
        values.frombytes(buf)
        if big_endian != (sys.byteorder == "big"):
            values.byteswap()
        return values.tolist()
    return decode


# array's "i"/"l" sizes vary by platform; pick typecodes by size once.
def _typecode(signed: bool, size: int) -> str:
    for code in ("bhilq" if signed else "BHILQ"):
        if array(code).itemsize == size:
            return code
    raise RuntimeError(f"no array typecode for {size}-byte integers")


def _f16_cast_works() -> bool:
    # memoryview.cast("e") exists from Python 3.12 (Pyodide has it) and is ~2x faster than struct.
    try:
        return memoryview(b"\x00\x3c").cast("e").tolist() == [1.0]
    except (ValueError, TypeError):
        return False


_F16_CAST = _f16_cast_works() and sys.byteorder == "little"


def _decode_f16(buf, big_endian=False):
    if _F16_CAST and not big_endian:
        return memoryview(buf).cast("B").cast("e").tolist()
    return list(struct.unpack(("<%de" if not big_endian else ">%de") % (len(buf) // 2), buf))


def _decode_bf16(buf, big_endian=False):
    # bfloat16 is the top half of a float32: interleave zero low bytes and let array do the rest.
    n = len(buf) // 2
    widened = bytearray(4 * n)
    lo, hi = (buf[0::2], buf[1::2]) if not big_endian else (buf[1::2], buf[0::2])
    widened[2::4] = lo
    widened[3::4] = hi
    values = array("f")
    values.frombytes(widened)
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def _decode_c32(buf, big_endian=False):
    # torch complex32 (chalf): a float16 real part, then a float16 imaginary part
    parts = _decode_f16(buf, big_endian)
    return [complex(re, im) for re, im in zip(parts[0::2], parts[1::2])]


def _decode_c64(buf, big_endian=False):
    parts = _array_decoder("f")(buf, big_endian)
    return [complex(re, im) for re, im in zip(parts[0::2], parts[1::2])]


def _decode_c128(buf, big_endian=False):
    parts = _array_decoder("d")(buf, big_endian)
    return [complex(re, im) for re, im in zip(parts[0::2], parts[1::2])]


def _decode_bool(buf, big_endian=False):
    return [b != 0 for b in buf]


# --- minifloats: every code point computed once into a lookup table -------------------------------

def minifloat_table(exp_bits: int, man_bits: int, bias: int, specials: str) -> tuple[float, ...]:
    """Values of all 2**(1+exp_bits+man_bits) codes of a sign/exponent/mantissa float.

    specials says how the top codes are used:
      "ieee"  all-ones exponent is Inf (mantissa 0) or NaN (F8_E5M2, like f16)
      "fn"    only all-ones exponent and mantissa is NaN, no Inf (F8_E4M3 = float8_e4m3fn)
      "fnuz"  the negative-zero code 0x80 is the only NaN, no Inf, no -0 (F8_E4M3FNUZ, F8_E5M2FNUZ)
      "none"  every code is finite (F6_E2M3, F6_E3M2, F4 = e2m1fn)
    """
    bits = 1 + exp_bits + man_bits
    top_exp = (1 << exp_bits) - 1
    table = []
    for code in range(1 << bits):
        sign = -1.0 if code >> (bits - 1) else 1.0
        exponent = (code >> man_bits) & top_exp
        mantissa = code & ((1 << man_bits) - 1)
        if specials == "ieee" and exponent == top_exp:
            value = math.nan if mantissa else sign * math.inf
        elif specials == "fn" and exponent == top_exp and mantissa == (1 << man_bits) - 1:
            value = math.nan
        elif specials == "fnuz" and code == 1 << (bits - 1):
            value = math.nan
        elif exponent == 0:
            value = sign * math.ldexp(mantissa, 1 - bias - man_bits)
        else:
            value = sign * math.ldexp(mantissa + (1 << man_bits), exponent - bias - man_bits)
        table.append(value)
    return tuple(table)


def _e8m0_table() -> tuple[float, ...]:
    # OCP MX scale: an unsigned power of two 2**(code-127); 0xFF is NaN.
    return tuple(math.ldexp(1.0, code - 127) for code in range(255)) + (math.nan,)


def _byte_table_decoder(table: tuple) -> Decoder:
    lookup = table.__getitem__

    def decode(buf, big_endian=False):
        return list(map(lookup, buf))
    return decode


def _packed_decoder(table: tuple, bits: int) -> Decoder:
    # 8 // bits codes per byte, element 0 in the low bits: 4-bit (torch float4_e2m1fn_x2, ONNX
    # INT4/UINT4/FLOAT4E2M1) and 2-bit (ONNX INT2/UINT2, numpy_helper._unpack_2bit).
    mask = (1 << bits) - 1
    groups = [tuple(table[(b >> shift) & mask] for shift in range(0, 8, bits)) for b in range(256)]

    def decode(buf, big_endian=False):
        out = []
        for b in buf:
            out.extend(groups[b])
        return out
    return decode


def _six_bit_decoder(table: tuple) -> Decoder:
    # Four 6-bit codes in 3 bytes, read as a little-endian 24-bit word, element 0 in the low bits.
    # The safetensors spec gives F6 a bit width but no packing order; this is the order of the
    # OCP MX reference packing. Documented in the README as our assumption.
    def decode(buf, big_endian=False):
        out = []
        for i in range(0, len(buf), 3):
            word = buf[i] | (buf[i + 1] << 8) | (buf[i + 2] << 16)
            out += (table[word & 63], table[(word >> 6) & 63],
                    table[(word >> 12) & 63], table[(word >> 18) & 63])
        return out
    return decode


def _plain(name: str, size: int, kind: str, decode: Decoder) -> DType:
    return DType(name, 1, size, kind, decode)


F8_E4M3_TABLE = minifloat_table(4, 3, 7, "fn")
F8_E5M2_TABLE = minifloat_table(5, 2, 15, "ieee")
F8_E4M3FNUZ_TABLE = minifloat_table(4, 3, 8, "fnuz")
F8_E5M2FNUZ_TABLE = minifloat_table(5, 2, 16, "fnuz")
F8_E8M0_TABLE = _e8m0_table()
F6_E2M3_TABLE = minifloat_table(2, 3, 1, "none")
F6_E3M2_TABLE = minifloat_table(3, 2, 3, "none")
F4_E2M1_TABLE = minifloat_table(2, 1, 1, "none")
# Packed integers (ONNX INT4/UINT4, INT2/UINT2): two's complement in 4 or 2 bits.
U4_TABLE, I4_TABLE = tuple(range(16)), tuple(v - 16 if v > 7 else v for v in range(16))
U2_TABLE, I2_TABLE = tuple(range(4)), (0, 1, -2, -1)

DTYPES: dict[str, DType] = {d.name: d for d in (
    _plain("BOOL", 1, "bool", _decode_bool),
    _plain("U8", 1, "uint", _array_decoder("B")),
    _plain("I8", 1, "int", _array_decoder("b")),
    _plain("U16", 2, "uint", _array_decoder(_typecode(False, 2))),
    _plain("I16", 2, "int", _array_decoder(_typecode(True, 2))),
    _plain("U32", 4, "uint", _array_decoder(_typecode(False, 4))),
    _plain("I32", 4, "int", _array_decoder(_typecode(True, 4))),
    _plain("U64", 8, "uint", _array_decoder(_typecode(False, 8))),
    _plain("I64", 8, "int", _array_decoder(_typecode(True, 8))),
    _plain("F16", 2, "float", _decode_f16),
    _plain("BF16", 2, "float", _decode_bf16),
    _plain("F32", 4, "float", _array_decoder("f")),
    _plain("F64", 8, "float", _array_decoder("d")),
    _plain("C32", 4, "complex", _decode_c32),
    _plain("C64", 8, "complex", _decode_c64),
    _plain("C128", 16, "complex", _decode_c128),
    _plain("F8_E4M3", 1, "float", _byte_table_decoder(F8_E4M3_TABLE)),
    _plain("F8_E5M2", 1, "float", _byte_table_decoder(F8_E5M2_TABLE)),
    _plain("F8_E4M3FNUZ", 1, "float", _byte_table_decoder(F8_E4M3FNUZ_TABLE)),
    _plain("F8_E5M2FNUZ", 1, "float", _byte_table_decoder(F8_E5M2FNUZ_TABLE)),
    _plain("F8_E8M0", 1, "float", _byte_table_decoder(F8_E8M0_TABLE)),
    DType("F6_E2M3", 4, 3, "float", _six_bit_decoder(F6_E2M3_TABLE)),
    DType("F6_E3M2", 4, 3, "float", _six_bit_decoder(F6_E3M2_TABLE)),
    DType("F4", 2, 1, "float", _packed_decoder(F4_E2M1_TABLE, 4)),
    DType("U4", 2, 1, "uint", _packed_decoder(U4_TABLE, 4)),
    DType("I4", 2, 1, "int", _packed_decoder(I4_TABLE, 4)),
    DType("U2", 4, 1, "uint", _packed_decoder(U2_TABLE, 2)),
    DType("I2", 4, 1, "int", _packed_decoder(I2_TABLE, 2)),
)}

# The dtypes the safetensors format defines (its Rust `Dtype` enum, safetensors 0.8). C32 and
# C128 are ours, for torch complex32 and complex128, and the packed integers are ONNX's: none of
# them is accepted in a safetensors header.
SAFETENSORS_DTYPES = frozenset(DTYPES) - {"C32", "C128", "U4", "I4", "U2", "I2"}


def to_float(value) -> float:
    """The number statistics are computed on: bools and ints as floats, complex by modulus."""
    if isinstance(value, complex):
        return abs(value)
    return float(value)
