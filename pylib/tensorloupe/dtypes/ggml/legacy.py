"""ggml's 32-element block quants (Q4_0 ... Q8_1), the 1-bit Q1_0, and the FP4 types MXFP4 and NVFP4.

Layouts are the block structs of ggml-common.h; formulas are gguf-py's `quants.py` (0.19.0), whose
numpy code our output must equal bit for bit. For Q8_1 and Q1_0 gguf-py has no dequantizer; the
comments there say which ggml C code the decoder follows.

Nibble order for all of these: element j < QK/2 is the low nibble of qs[j], element j + QK/2 its
high nibble (NVFP4: the same per 16-element sub-block).
"""

from __future__ import annotations

import math
from operator import add, getitem, mul

from .columns import (Layout, bit_or, byte_table, f16s, nibbles, repeat_each, signed, spread_bits,
                      to_f32)

QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0 = QK8_1 = 32
QK1_0 = 128
QK_MXFP4 = 32
QK_NVFP4, QK_NVFP4_SUB = 64, 16

Q4_0 = Layout("block_q4_0", ("d", 2, 1), ("qs", 1, QK4_0 // 2))
Q4_1 = Layout("block_q4_1", ("d", 2, 1), ("m", 2, 1), ("qs", 1, QK4_1 // 2))
# qh is declared uint8_t[4] (ggml memcpy's it into a uint32_t): a byte array, never byte-swapped.
Q5_0 = Layout("block_q5_0", ("d", 2, 1), ("qh", 1, 4), ("qs", 1, QK5_0 // 2))
Q5_1 = Layout("block_q5_1", ("d", 2, 1), ("m", 2, 1), ("qh", 1, 4), ("qs", 1, QK5_1 // 2))
Q8_0 = Layout("block_q8_0", ("d", 2, 1), ("qs", 1, QK8_0))
# Since 2024 ggml's block_q8_1 is {ggml_half d; ggml_half s; int8_t qs[32]} = 36 bytes; gguf-py
# 0.19.0 still lists the older {float d; float s; ...} size, 40. We follow the C struct.
Q8_1 = Layout("block_q8_1", ("d", 2, 1), ("s", 2, 1), ("qs", 1, QK8_1))
Q1_0 = Layout("block_q1_0", ("d", 2, 1), ("qs", 1, QK1_0 // 8))
MXFP4 = Layout("block_mxfp4", ("e", 1, 1), ("qs", 1, QK_MXFP4 // 2))
NVFP4 = Layout("block_nvfp4", ("d", 1, QK_NVFP4 // QK_NVFP4_SUB), ("qs", 1, QK_NVFP4 // 2))

# Quant codes are turned into int8 values on the way out of the nibble planes:
# Q4_0 stores q + 8, Q5_0 stores q + 16.
_MINUS_8_LOW = byte_table(lambda b: (b & 0x0F) - 8)
_MINUS_8_HIGH = byte_table(lambda b: (b >> 4) - 8)
_MINUS_16 = byte_table(lambda b: b - 16)


def decode_q4_0(buf: bytes) -> list:
    # x = d * (q - 8): f16 times a 4-bit int is exact in float32, so the double is the answer.
    q = signed(nibbles(Q4_0.col(buf, "qs"), QK4_0 // 2, _MINUS_8_LOW, _MINUS_8_HIGH))
    return list(map(mul, repeat_each(f16s(Q4_0.col(buf, "d")), QK4_0), q))


def decode_q4_1(buf: bytes) -> list:
    # x = d * q + m: the product is exact, the sum is rounded to float32 (gguf-py: (d * qs) + m).
    q = nibbles(Q4_1.col(buf, "qs"), QK4_1 // 2)
    scaled = map(mul, repeat_each(f16s(Q4_1.col(buf, "d")), QK4_1), q)
    return to_f32(map(add, scaled, repeat_each(f16s(Q4_1.col(buf, "m")), QK4_1)))


def _five_bit(layout: Layout, buf: bytes) -> bytes:
    # The 5th bit of element j is bit j of qh read as a little-endian uint32.
    low = nibbles(layout.col(buf, "qs"), QK5_0 // 2)
    return bit_or(low, spread_bits(layout.col(buf, "qh"), 0x10))


def decode_q5_0(buf: bytes) -> list:
    # x = d * (q - 16), exact like Q4_0.
    q = signed(_five_bit(Q5_0, buf).translate(_MINUS_16))
    return list(map(mul, repeat_each(f16s(Q5_0.col(buf, "d")), QK5_0), q))


def decode_q5_1(buf: bytes) -> list:
    # x = d * q + m, one float32 rounding like Q4_1.
    scaled = map(mul, repeat_each(f16s(Q5_1.col(buf, "d")), QK5_1), _five_bit(Q5_1, buf))
    return to_f32(map(add, scaled, repeat_each(f16s(Q5_1.col(buf, "m")), QK5_1)))


def decode_q8_0(buf: bytes) -> list:
    # x = d * q: f16 times int8 is exact in float32.
    return list(map(mul, repeat_each(f16s(Q8_0.col(buf, "d")), QK8_0), signed(Q8_0.col(buf, "qs"))))


def decode_q8_1(buf: bytes) -> list:
    # ggml has no dequantize_row_q8_1 (it is commented out in ggml-quants.h: Q8_1 is the
    # activation side of dot products). quantize_row_q8_1_ref stores d = amax/127 as f16 and
    # qs = round(x / d), exactly as Q8_0, plus s = d * sum(qs) for the dot product; so the
    # inverse is x = d * q, like dequantize_row_q8_0, and s is not needed. Checked against
    # ggml-org/llama.cpp ggml/src/ggml-quants.c (quantize_row_q8_1_ref) and ggml-common.h.
    return list(map(mul, repeat_each(f16s(Q8_1.col(buf, "d")), QK8_1), signed(Q8_1.col(buf, "qs"))))


def decode_q1_0(buf: bytes) -> list:
    # ggml dequantize_row_q1_0 (ggml-org/llama.cpp ggml/src/ggml-quants.c, read for this port):
    #     bit = (qs[j / 8] >> (j % 8)) & 1;  y[j] = bit ? d : -d;
    # i.e. a sign bit per element, least significant bit first, and one f16 scale per 128.
    pairs = [(-d, d) for d in f16s(Q1_0.col(buf, "d"))]
    return list(map(getitem, repeat_each(pairs, QK1_0), spread_bits(Q1_0.col(buf, "qs"))))


# E2M1 values doubled (ggml kvalues_mxfp4); the scales below carry the matching factor 1/2.
KVALUES_FP4 = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)
_FP4_LOW = byte_table(lambda b: KVALUES_FP4[b & 0x0F])
_FP4_HIGH = byte_table(lambda b: KVALUES_FP4[b >> 4])

# ggml_e8m0_to_fp32_half: the E8M0 code e scales by 2**(e - 127) / 2 (codes 0 and 1 are the
# float32 subnormals ggml builds by hand). gguf-py and ggml give code 0xFF no NaN meaning.
E8M0_HALF = tuple(math.ldexp(1.0, e - 128) for e in range(256))
# Above this code 2**(e-128) * 12 passes float32's largest finite value: those products are
# inf in float32, so they need the float32 rounding; below it every product is exact.
_MXFP4_EXACT_MAX_E = 252


def decode_mxfp4(buf: bytes) -> list:
    e = MXFP4.col(buf, "e")
    q = signed(nibbles(MXFP4.col(buf, "qs"), QK_MXFP4 // 2, _FP4_LOW, _FP4_HIGH))
    values = map(mul, repeat_each(map(E8M0_HALF.__getitem__, e), QK_MXFP4), q)
    return to_f32(values) if e and max(e) > _MXFP4_EXACT_MAX_E else list(values)


def _ue4m3_half(code: int) -> float:
    # ggml_ue4m3_to_fp32 (= gguf-py NVFP4.ue4m3_to_fp32): unsigned E4M3 with bias 7, halved for
    # the doubled E2M1 values. Bit 7 is ignored; 0x7F (E4M3's NaN) decodes as 0.
    if code in (0x00, 0x7F):
        return 0.0
    exp, man = (code >> 3) & 0x0F, code & 0x07
    raw = math.ldexp(man, -9) if exp == 0 else math.ldexp(1.0 + man / 8.0, exp - 7)
    return raw * 0.5


UE4M3_HALF = tuple(_ue4m3_half(code) for code in range(256))


def decode_nvfp4(buf: bytes) -> list:
    # One UE4M3 scale per 16 elements; scale * E2M1 value is exact (at most 4 + 4 bits).
    q = signed(nibbles(NVFP4.col(buf, "qs"), QK_NVFP4_SUB // 2, _FP4_LOW, _FP4_HIGH))
    scales = map(UE4M3_HALF.__getitem__, NVFP4.col(buf, "d"))
    return list(map(mul, repeat_each(scales, QK_NVFP4_SUB), q))
