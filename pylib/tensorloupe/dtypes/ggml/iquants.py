"""ggml's i-quants: grid codebooks (IQ1_S ... IQ3_S) and the non-linear 4-bit IQ4_NL / IQ4_XS.

Layouts are the block structs of ggml-common.h; formulas and element order are gguf-py's
`quants.py` (0.19.0), which our output must equal bit for bit; they agree with ggml's
dequantize_row_iq* in ggml-quants.c. A grid quant picks one row of a fixed grid (grids.py)
per group of 8 elements (IQ3: per 4), then flips signs per element (IQ1: shifts by +-1/8) and
scales per sub-block. Every product here is exact in float32 (an f16 times a few-bit scale times a
6-bit grid value), so no float32 rounding pass is needed; comments give the bit counts.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from itertools import chain
from operator import getitem, mul

from .columns import (CRUMBS, Layout, bit_or, byte_table, column, f16s, interleave, nibbles,
                      repeat_each, signed, spread_bits, u16s, u32s)
from .grids import grid

QK_K = 256
QK4_NL = 32

IQ2_XXS = Layout("block_iq2_xxs", ("d", 2, 1), ("qs", 2, QK_K // 8))
IQ2_XS = Layout("block_iq2_xs", ("d", 2, 1), ("qs", 2, QK_K // 8), ("scales", 1, QK_K // 32))
# qs holds 32 grid-index bytes and then 32 sign bytes.
IQ2_S = Layout("block_iq2_s", ("d", 2, 1), ("qs", 1, QK_K // 4), ("qh", 1, QK_K // 32),
               ("scales", 1, QK_K // 32))
# qs holds 64 grid-index bytes and then 8 uint32 of signs and scale (ggml memcpy's them).
IQ3_XXS = Layout("block_iq3_xxs", ("d", 2, 1), ("qs", 1, 3 * (QK_K // 8)))
IQ3_S = Layout("block_iq3_s", ("d", 2, 1), ("qs", 1, QK_K // 4), ("qh", 1, QK_K // 32),
               ("signs", 1, QK_K // 8), ("scales", 1, QK_K // 64))
IQ1_S = Layout("block_iq1_s", ("d", 2, 1), ("qs", 1, QK_K // 8), ("qh", 2, QK_K // 32))
# No d field: IQ1_M spreads its f16 scale over the top nibbles of the four uint16 scale words.
IQ1_M = Layout("block_iq1_m", ("qs", 1, QK_K // 8), ("qh", 1, QK_K // 16), ("scales", 1, QK_K // 32))
IQ4_NL = Layout("block_iq4_nl", ("d", 2, 1), ("qs", 1, QK4_NL // 2))
IQ4_XS = Layout("block_iq4_xs", ("d", 2, 1), ("scales_h", 2, 1), ("scales_l", 1, QK_K // 64),
                ("qs", 1, QK_K // 2))

# --- signs ------------------------------------------------------------------------------------
# Sign bytes: bit k set = element k of the group of 8 is negated. The XXS/XS types store only 7
# bits; ggml's ksigns_iq2xs table adds the 8th as parity, so every pattern has an even count.
KSIGNS = tuple(i | (bin(i).count("1") & 1) << 7 for i in range(128))
SIGNS = tuple(tuple(-1 if (b >> k) & 1 else 1 for k in range(8)) for b in range(256))
_KSIGNS_8 = tuple(SIGNS[b] for b in KSIGNS)


def _signs7(words, shifts) -> list:
    """The 8 element signs of each group, from 7-bit ksigns indices packed in words."""
    return [_KSIGNS_8[(w >> s) & 0x7F] for w in words for s in shifts]


def _grid_decode(scales, group: int, rows, signs) -> list:
    # gguf-py: db * grid * signs, i.e. (scale * grid value) * sign. Both products are exact.
    values = map(mul, repeat_each(scales, group), chain.from_iterable(rows))
    return list(map(mul, values, chain.from_iterable(signs)))


@lru_cache(maxsize=None)
def _rows_by_high(name: str, high_values: int) -> tuple[tuple, ...]:
    """The grid split into 256-row pages, so `page[high][low]` is row high << 8 | low."""
    rows = grid(name)
    return tuple(rows[h << 8:(h + 1) << 8] for h in range(high_values))


def _paged_rows(name: str, pages: int, high: bytes, low: bytes):
    return map(getitem, map(_rows_by_high(name, pages).__getitem__, high), low)


# --- IQ2 ----------------------------------------------------------------------------------------

def _quarter_scales(d_column: bytes, scales, per_block: int) -> list:
    # gguf-py: d * (0.5 + scale) * 0.25; exact (f16 times a 5-bit odd number, times 1/4).
    return [d * (0.5 + s) * 0.25 for d, s in zip(repeat_each(f16s(d_column), per_block), scales)]


def decode_iq2_xxs(buf: bytes) -> list:
    # Per 32 elements two uint32 (little-endian, read from the uint16 qs): four grid-row bytes;
    # then four 7-bit sign indices (bits 0, 7, 14, 21) and a 4-bit scale (bits 28-31).
    qs = IQ2_XXS.col(buf, "qs")
    aux = u32s(column(qs, 8, 4, 4))
    ds = repeat_each(f16s(IQ2_XXS.col(buf, "d")), 8)
    db = [d * (0.5 + (w >> 28)) * 0.25 for d, w in zip(ds, aux)]
    rows = map(grid("iq2xxs").__getitem__, column(qs, 8, 0, 4))
    return _grid_decode(db, 32, rows, _signs7(aux, (0, 7, 14, 21)))


def decode_iq2_xs(buf: bytes) -> list:
    # One uint16 per 8 elements: 9-bit grid row, 7-bit sign index. A 4-bit scale per 16.
    words = u16s(IQ2_XS.col(buf, "qs"))
    db = _quarter_scales(IQ2_XS.col(buf, "d"), nibbles(IQ2_XS.col(buf, "scales"), 1), 16)
    rows = map(grid("iq2xs").__getitem__, [w & 0x1FF for w in words])
    return _grid_decode(db, 16, rows, _signs7(words, (9,)))


def decode_iq2_s(buf: bytes) -> list:
    # 10-bit grid rows: a low byte in qs[0:32], 2 high bits per row from qh; plain sign bytes.
    high = interleave(*((IQ2_S.col(buf, "qh").translate(t), 1) for t in CRUMBS))
    rows = _paged_rows("iq2s", 4, high, IQ2_S.col(buf, "qs", 0, QK_K // 8))
    db = _quarter_scales(IQ2_S.col(buf, "d"), nibbles(IQ2_S.col(buf, "scales"), 1), 16)
    signs = map(SIGNS.__getitem__, IQ2_S.col(buf, "qs", QK_K // 8, QK_K // 8))
    return _grid_decode(db, 16, rows, signs)


# --- IQ3 ----------------------------------------------------------------------------------------

def decode_iq3_xxs(buf: bytes) -> list:
    # 64 grid-row bytes (4 elements each), then per 32 elements a uint32 of four 7-bit sign
    # indices and a 4-bit scale: d * (0.5 + scale) * 0.5, exact.
    aux = u32s(IQ3_XXS.col(buf, "qs", QK_K // 4, QK_K // 8))
    ds = repeat_each(f16s(IQ3_XXS.col(buf, "d")), 8)
    db = [d * (0.5 + (w >> 28)) * 0.5 for d, w in zip(ds, aux)]
    rows = map(grid("iq3xxs").__getitem__, IQ3_XXS.col(buf, "qs", 0, QK_K // 4))
    return _grid_decode(db, 32, rows, _signs7(aux, (0, 7, 14, 21)))


def decode_iq3_s(buf: bytes) -> list:
    # 9-bit grid rows of 4: low byte in qs, 9th bit from qh (bit k of qh[j] for row 8j + k);
    # plain sign bytes; a 4-bit scale per 32: d * (1 + 2 * scale), exact.
    rows = _paged_rows("iq3s", 2, spread_bits(IQ3_S.col(buf, "qh")), IQ3_S.col(buf, "qs"))
    scales = nibbles(IQ3_S.col(buf, "scales"), 1)
    db = [d * (1 + 2 * s) for d, s in zip(repeat_each(f16s(IQ3_S.col(buf, "d")), 8), scales)]
    return _grid_decode(db, 32, rows, map(SIGNS.__getitem__, IQ3_S.col(buf, "signs")))


# --- IQ1 ----------------------------------------------------------------------------------------
# IQ1 grids hold -1/0/+1; every group of 8 also gets a shift of +-1/8 (IQ1S_DELTA, IQ1M_DELTA).
# Both types give each group a 4-bit code: 3 high bits of the 11-bit row, and a delta sign bit
# (bit 3). _iq1_pages()[code][low byte] is the grid row with the delta already added (exact).
_IQ1_DELTA = 0.125


@lru_cache(maxsize=None)
def _iq1_pages() -> tuple[tuple, ...]:
    rows = grid("iq1s")
    pages = []
    for code in range(16):
        delta = -_IQ1_DELTA if code & 8 else _IQ1_DELTA
        page = rows[(code & 7) << 8:((code & 7) + 1) << 8]
        pages.append(tuple(tuple(g + delta for g in row) for row in page))
    return tuple(pages)


def _iq1_decode(dl, group: int, codes, low: bytes) -> list:
    # gguf-py: dl * (grid + delta).
    rows = map(getitem, map(_iq1_pages().__getitem__, codes), low)
    return list(map(mul, repeat_each(dl, group), chain.from_iterable(rows)))


def decode_iq1_s(buf: bytes) -> list:
    # One uint16 per 32 elements: 3 high row bits per group (bits 0, 3, 6, 9), a 3-bit scale
    # (bits 12-14: d * (2 * scale + 1), exact) and the delta sign (bit 15).
    words = u16s(IQ1_S.col(buf, "qh"))
    ds = repeat_each(f16s(IQ1_S.col(buf, "d")), 8)
    dl = [d * (2 * ((w >> 12) & 7) + 1) for d, w in zip(ds, words)]
    codes = [((w >> s) & 7) | ((w >> 12) & 8) for w in words for s in (0, 3, 6, 9)]
    return _iq1_decode(dl, 32, codes, IQ1_S.col(buf, "qs"))


def decode_iq1_m(buf: bytes) -> list:
    # The scales are four uint16: 3-bit scales at bits 0, 3, 6, 9 (one per 16 elements) and the
    # block's f16 d in the four top nibbles (word 0's nibble is d's lowest). qh holds a 4-bit code
    # per group of 8, low nibble first.
    words = u16s(IQ1_M.col(buf, "scales"))
    top = [w >> 12 for w in words]
    d_bits = [a | b << 4 | c << 8 | e << 12
              for a, b, c, e in zip(top[0::4], top[1::4], top[2::4], top[3::4])]
    ds = f16s(struct.pack("<%dH" % len(d_bits), *d_bits))
    dl = [d * (2 * ((w >> s) & 7) + 1) for d, w in zip(repeat_each(ds, 4), words) for s in (0, 3, 6, 9)]
    return _iq1_decode(dl, 16, nibbles(IQ1_M.col(buf, "qh"), 1), IQ1_M.col(buf, "qs"))


# --- IQ4 ----------------------------------------------------------------------------------------
# kvalues_iq4nl: a 4-bit code picks one of 16 non-uniform int8 levels.
KVALUES_IQ4NL = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
_IQ4_LOW = byte_table(lambda b: KVALUES_IQ4NL[b & 0x0F])
_IQ4_HIGH = byte_table(lambda b: KVALUES_IQ4NL[b >> 4])
_MINUS_32 = byte_table(lambda b: b - 32)
_CRUMBS_AT_4 = tuple(bytes(v << 4 for v in t) for t in CRUMBS)


def decode_iq4_nl(buf: bytes) -> list:
    # x = d * level: exact (11 + 7 bits). Q4_0 nibble order.
    q = signed(nibbles(IQ4_NL.col(buf, "qs"), QK4_NL // 2, _IQ4_LOW, _IQ4_HIGH))
    return list(map(mul, repeat_each(f16s(IQ4_NL.col(buf, "d")), QK4_NL), q))


def decode_iq4_xs(buf: bytes) -> list:
    # 8 sub-blocks of 32 with 6-bit scales minus 32: low 4 bits from scales_l (low nibble first),
    # high 2 bits from scales_h (bits 2i, 2i+1). x = (d * scale) * level: exact, as
    # 11 + 5 + 7 bits < 24. Within a sub-block: 16 low nibbles, then their 16 high nibbles.
    low = nibbles(IQ4_XS.col(buf, "scales_l"), 1)
    high = interleave(*((IQ4_XS.col(buf, "scales_h").translate(t), 1) for t in _CRUMBS_AT_4))
    sc = signed(bit_or(low, high).translate(_MINUS_32))
    dl = map(mul, repeat_each(f16s(IQ4_XS.col(buf, "d")), 8), sc)
    q = signed(nibbles(IQ4_XS.col(buf, "qs"), 16, _IQ4_LOW, _IQ4_HIGH))
    return list(map(mul, repeat_each(dl, 32), q))
