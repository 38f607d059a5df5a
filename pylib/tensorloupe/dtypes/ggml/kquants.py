"""ggml's k-quants (Q2_K ... Q8_K) and ternary quants (TQ1_0, TQ2_0): 256-element super-blocks.

Layouts are the block structs of ggml-common.h; formulas and element order are gguf-py's
`quants.py` (0.19.0), which our output must equal bit for bit, float32 rounding included. Q8_K has no
gguf-py dequantizer: see decode_q8_k.
"""

from __future__ import annotations

from operator import mul, sub

from .columns import (BITS, CRUMBS, HIGH_NIBBLE, LOW_NIBBLE, Layout, bit_or, byte_table, f16s,
                      f32s, interleave, nibbles, repeat_each, signed, to_f32)

QK_K = 256
K_SCALE_SIZE = 12

Q2_K = Layout("block_q2_K", ("scales", 1, QK_K // 16), ("qs", 1, QK_K // 4),
              ("d", 2, 1), ("dmin", 2, 1))
Q3_K = Layout("block_q3_K", ("hmask", 1, QK_K // 8), ("qs", 1, QK_K // 4), ("scales", 1, 12),
              ("d", 2, 1))
Q4_K = Layout("block_q4_K", ("d", 2, 1), ("dmin", 2, 1), ("scales", 1, K_SCALE_SIZE),
              ("qs", 1, QK_K // 2))
Q5_K = Layout("block_q5_K", ("d", 2, 1), ("dmin", 2, 1), ("scales", 1, K_SCALE_SIZE),
              ("qh", 1, QK_K // 8), ("qs", 1, QK_K // 2))
Q6_K = Layout("block_q6_K", ("ql", 1, QK_K // 2), ("qh", 1, QK_K // 4), ("scales", 1, QK_K // 16),
              ("d", 2, 1))
Q8_K = Layout("block_q8_K", ("d", 4, 1), ("qs", 1, QK_K), ("bsums", 2, QK_K // 16))
# 5 base-3 digits per qs byte (3**5 = 243 < 256), 4 per qh byte.
TQ1_0 = Layout("block_tq1_0", ("qs", 1, (QK_K - 4 * QK_K // 64) // 5), ("qh", 1, QK_K // 64),
               ("d", 2, 1))
TQ2_0 = Layout("block_tq2_0", ("qs", 1, QK_K // 4), ("d", 2, 1))


def _planes(packed: bytes, run: int, tables) -> bytes:
    """`run` bytes of packed through tables[0], the same run through tables[1], ..., next run.

    This is the k-quant element order: for each run of `run` bytes, the 2-bit (or 1-bit) fields
    at shift 0 of every byte, then those at shift 2, and so on.
    """
    return interleave(*((packed.translate(t), run) for t in tables))


def _shifted(tables, by: int) -> tuple[bytes, ...]:
    return tuple(bytes(v << by for v in t) for t in tables)


_CRUMBS_AT_4 = _shifted(CRUMBS, 4)
_BITS_AT_2 = _shifted(BITS, 2)
_BITS_AT_4 = _shifted(BITS, 4)
_MINUS_4 = byte_table(lambda b: b - 4)
_MINUS_32 = byte_table(lambda b: b - 32)


def _affine(scales, mins, q, group: int) -> list:
    # x = (scale * q) - min: the product is exact in float32, the difference is rounded.
    return to_f32(map(sub, map(mul, repeat_each(scales, group), q), repeat_each(mins, group)))


def decode_q2_k(buf: bytes) -> list:
    # 16 groups of 16; each scales byte is (min << 4) | scale, both 4 bits, times d / dmin.
    sc = Q2_K.col(buf, "scales")
    dl = map(mul, repeat_each(f16s(Q2_K.col(buf, "d")), 16), sc.translate(LOW_NIBBLE))
    ml = map(mul, repeat_each(f16s(Q2_K.col(buf, "dmin")), 16), sc.translate(HIGH_NIBBLE))
    q = _planes(Q2_K.col(buf, "qs"), 32, CRUMBS)
    return _affine(list(dl), list(ml), q, 16)


def decode_q3_k(buf: bytes) -> list:
    # 16 signed 6-bit scales (minus 32): low 4 bits from scales[0:8] (low nibbles, then high
    # nibbles), top 2 bits from scales[8:12] (2-bit fields at shift 0, 2, 4, 6).
    low = nibbles(Q3_K.col(buf, "scales", 0, 8), 8)
    high = _planes(Q3_K.col(buf, "scales", 8, 4), 4, _CRUMBS_AT_4)
    sc = signed(bit_or(low, high).translate(_MINUS_32))
    dl = map(mul, repeat_each(f16s(Q3_K.col(buf, "d")), 16), sc)
    # q = low 2 bits - 4, except where the hmask bit is set (then the offset is 0): i.e.
    # q = (low | hbit << 2) - 4. The hmask bits go 32 elements per bit, bit 0 first.
    low_q = _planes(Q3_K.col(buf, "qs"), 32, CRUMBS)
    high_q = _planes(Q3_K.col(buf, "hmask"), 32, _BITS_AT_2)
    q = signed(bit_or(low_q, high_q).translate(_MINUS_4))
    # d * scale is exact (17 bits) and so is times q (20 bits).
    return list(map(mul, repeat_each(dl, 16), q))


# get_scale_min_k4 / gguf-py Q4_K.get_scale_min: 8 six-bit scales and 8 six-bit mins in 12 bytes.
#   bytes 0-3:  scale j (low 6 bits) | top 2 bits of scale j+4
#   bytes 4-7:  min j   (low 6 bits) | top 2 bits of min j+4
#   bytes 8-11: low 4 bits of scale j+4 | low 4 bits of min j+4 << 4
_LOW_6 = byte_table(lambda b: b & 0x3F)
_TOP_2_TO_4 = byte_table(lambda b: (b >> 6) << 4)


def _scale_min_k4(s: bytes) -> tuple[bytes, bytes]:
    """From the 12-byte scales column: (8 scales per block, 8 mins per block) as bytes."""
    byte = [s[k::K_SCALE_SIZE] for k in range(K_SCALE_SIZE)]
    scales = [byte[j].translate(_LOW_6) for j in range(4)]
    scales += [bit_or(byte[j + 4].translate(LOW_NIBBLE), byte[j - 4].translate(_TOP_2_TO_4))
               for j in range(4, 8)]
    mins = [byte[j + 4].translate(_LOW_6) for j in range(4)]
    mins += [bit_or(byte[j + 4].translate(HIGH_NIBBLE), byte[j].translate(_TOP_2_TO_4))
             for j in range(4, 8)]
    return interleave(*((c, 1) for c in scales)), interleave(*((c, 1) for c in mins))


def _k4_scales(layout: Layout, buf: bytes) -> tuple[list, list]:
    sc, m = _scale_min_k4(layout.col(buf, "scales"))
    dsc = list(map(mul, repeat_each(f16s(layout.col(buf, "d")), 8), sc))
    dm = list(map(mul, repeat_each(f16s(layout.col(buf, "dmin")), 8), m))
    return dsc, dm


def decode_q4_k(buf: bytes) -> list:
    # 8 groups of 32: x = (d * scale) * q - dmin * min.
    dsc, dm = _k4_scales(Q4_K, buf)
    return _affine(dsc, dm, nibbles(Q4_K.col(buf, "qs"), 32), 32)


def decode_q5_k(buf: bytes) -> list:
    # As Q4_K with a 5th bit per element from qh: bit b of qh[l] for element 32*b + l.
    dsc, dm = _k4_scales(Q5_K, buf)
    q = bit_or(nibbles(Q5_K.col(buf, "qs"), 32), _planes(Q5_K.col(buf, "qh"), 32, _BITS_AT_4))
    return _affine(dsc, dm, q, 32)


def decode_q6_k(buf: bytes) -> list:
    # 16 groups of 16 with int8 scales: x = (d * scale) * (q - 32), q = ql nibble | qh crumb << 4.
    # Exact: |d| has 11 significant bits, |scale| <= 128 and |q| <= 32 add at most 12 more.
    q = bit_or(nibbles(Q6_K.col(buf, "ql"), 64), _planes(Q6_K.col(buf, "qh"), 32, _CRUMBS_AT_4))
    dl = map(mul, repeat_each(f16s(Q6_K.col(buf, "d")), 16), signed(Q6_K.col(buf, "scales")))
    return list(map(mul, repeat_each(dl, 16), signed(q.translate(_MINUS_32))))


def decode_q8_k(buf: bytes) -> list:
    # gguf-py has no Q8_K dequantizer. ggml's dequantize_row_q8_K (ggml-quants.c; read in
    # several ggml copies found by code search, all identical) is `*y++ = x[i].d * x[i].qs[j]`
    # with a float32 d: one float32 product, rounded. bsums (sums of 16 quants, kept for dot
    # products) are not needed. tests/test_ggml_quants.py has a known answer that rounds.
    d = f32s(Q8_K.col(buf, "d"))
    return to_f32(map(mul, repeat_each(d, QK_K), signed(Q8_K.col(buf, "qs"))))


# TQ1_0 packs 5 (qs) or 4 (qh) base-3 digits per byte as a fixed-point fraction: digit k of byte b
# is ((b * 3**k mod 256) * 3) >> 8, and the value is digit - 1. gguf-py's order: for qs[0:32] all
# bytes' digit 0, then digit 1, ... 4; then the same for qs[32:48]; then qh's 4 digits.
_TERNARY = tuple(byte_table(lambda b, m=m: ((((b * m) & 0xFF) * 3) >> 8) - 1)
                 for m in (1, 3, 9, 27, 81))


def decode_tq1_0(buf: bytes) -> list:
    # x = d * (digit - 1): exact.
    head, tail = TQ1_0.col(buf, "qs", 0, 32), TQ1_0.col(buf, "qs", 32, 16)
    qh = TQ1_0.col(buf, "qh")
    q = interleave(*((head.translate(t), 32) for t in _TERNARY),
                   *((tail.translate(t), 16) for t in _TERNARY),
                   *((qh.translate(t), 4) for t in _TERNARY[:4]))
    return list(map(mul, repeat_each(f16s(TQ1_0.col(buf, "d")), QK_K), signed(q)))


_CRUMBS_MINUS_1 = tuple(byte_table(lambda b, t=t: t[b] - 1) for t in CRUMBS)


def decode_tq2_0(buf: bytes) -> list:
    # 2 bits per element, x = d * (crumb - 1), in the k-quant plane order: exact.
    q = signed(_planes(TQ2_0.col(buf, "qs"), 32, _CRUMBS_MINUS_1))
    return list(map(mul, repeat_each(f16s(TQ2_0.col(buf, "d")), QK_K), q))
