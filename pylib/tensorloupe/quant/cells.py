"""Cell decoders: the values of a product of logical rows x logical columns (a heatmap lattice),
decoding only those cells and reading only the stored bytes they lie in.

Row decoders (decode.py) decode whole logical rows. That is right for a sample window, but a
256 x 256 lattice of a 4096 x 4096 weight picks every 16th value of 256 rows: whole-row decoding
there costs 1M values in Python for 65,536 cells, and for layouts whose logical rows are columns
of the stored parts (GPTQ, gpt-oss MXFP4) one read per stored row per logical row: 130,000 reads
for a GPTQ lattice (AWQ alike), a million for MXFP4 (bench/quant_views.py measured 5.3 s and 17 s). Here
each needed stored row is read once, as one range over the columns the cells need, all issued
together (`pick`), and each cell is a few integer operations.

`pick(part, rows, c0, c1)` returns, for each stored row in `rows`, its elements [c0, c1) as bytes.
Each decoder returns values[i][j] for rows[i] x cols[j], the same values the row decoders give.
"""

from __future__ import annotations

import math

from ..dtypes import lookup
from .decode import _AWQ_NIBBLE, E2M1, _rows, gptq_groups
from .records import Logical
from .rounding import round_to


_WORDS = lookup("U32")     # GPTQ's I32 words read unsigned: a straddling code joins two of them


def _unpack(part, data: bytes) -> list:
    return lookup(part.dtype).decode(data)


def _gptq(t: Logical, read, pick, rows: list[int], cols: list[int]) -> list[list]:
    """rows: outputs o, cols: inputs i. qweight [in*bits/32, out]: input i of output o is bits
    [i*bits, (i+1)*bits) of column o read down the packed rows (3 bits straddle two words)."""
    sch = t.scheme
    qweight, qzeros, scales = t.parts["codes"], t.parts["qzeros"], t.parts["scales"]
    bits, mask = sch.bits, (1 << sch.bits) - 1
    gidx = gptq_groups(t, read)
    o0, o1 = rows[0], rows[-1] + 1
    words = sorted({w for i in cols for w in (i * bits // 32, ((i + 1) * bits - 1) // 32)})
    packed = dict(zip(words, (_WORDS.decode(b) for b in pick(qweight.name, words, o0, o1))))
    groups = sorted({gidx[i] for i in cols})
    s = dict(zip(groups, (_unpack(scales, b) for b in pick(scales.name, groups, o0, o1))))
    z0, z1 = o0 * bits // 32, ((o1 * bits) - 1) // 32 + 1
    zw = dict(zip(groups, (_WORDS.decode(b) for b in pick(qzeros.name, groups, z0, z1))))
    v1 = sch.strategy in ("gptq", "gemm")

    def zero(g, o):
        at = o * bits - 32 * z0
        w, sh = divmod(at, 32)
        word = zw[g][w] | ((zw[g][w + 1] << 32) if sh + bits > 32 else 0)
        z = (word >> sh) & mask
        return (z + 1) & mask if v1 else z     # v1 stores z - 1

    at = [divmod(i * bits, 32) + (gidx[i],) for i in cols]
    out = []
    for o in rows:
        j = o - o0
        zo = {g: zero(g, o) for g in groups}
        vals = []
        for w, sh, g in at:
            word = packed[w][j] | ((packed[w + 1][j] << 32) if sh + bits > 32 else 0)
            vals.append(s[g][j] * (((word >> sh) & mask) - zo[g]))
        out.append(round_to(scales.dtype, vals))
    return out


def _awq(t: Logical, read, pick, rows: list[int], cols: list[int]) -> list[list]:
    """rows: outputs o, cols: inputs i. qweight [in, out/8]: output o of input i is nibble
    AWQ_NIBBLE[o % 8] of word o // 8 of row i; qzeros [groups, out/8] likewise; W = (q - z) * s."""
    qweight, qzeros, scales = t.parts["codes"], t.parts["qzeros"], t.parts["scales"]
    gidx = gptq_groups(t, read)
    o0, o1 = rows[0], rows[-1] + 1
    w0, w1 = o0 // 8, (o1 - 1) // 8 + 1
    q = [_WORDS.decode(b) for b in pick(qweight.name, cols, w0, w1)]
    groups = sorted({gidx[i] for i in cols})
    s = dict(zip(groups, (_unpack(scales, b) for b in pick(scales.name, groups, o0, o1))))
    z = dict(zip(groups, (_WORDS.decode(b) for b in pick(qzeros.name, groups, w0, w1))))
    out = []
    for o in rows:
        w, shift = o // 8 - w0, 4 * _AWQ_NIBBLE[o % 8]
        vals = []
        for j, i in enumerate(cols):
            g = gidx[i]
            vals.append(s[g][o - o0] * (((q[j][w] >> shift) & 15) - ((z[g][w] >> shift) & 15)))
        out.append(round_to(scales.dtype, vals))
    return out


def _mxfp4(t: Logical, read, pick, rows: list[int], cols: list[int]) -> list[list]:
    """rows: k = (expert e, logical column c) of [E, G*32, R]; cols: stored rows r. The value is
    nibble c%2 of byte (c%32)//2 of block c//32 of stored row (e, r), times 2**(scale - 127)."""
    blocks, scales = t.parts["codes"], t.parts["scales"]
    _, width, stored = t.shape
    out = []
    by_expert: dict[int, list[int]] = {}
    for k in rows:
        by_expert.setdefault(k // width, []).append(k)
    for e, ks in by_expert.items():
        cs = [k % width for k in ks]
        b0, b1 = 16 * (cs[0] // 32) + (cs[0] % 32) // 2, 16 * (cs[-1] // 32) + (cs[-1] % 32) // 2 + 1
        g0, g1 = cs[0] // 32, cs[-1] // 32 + 1
        srows = [e * stored + r for r in cols]
        codes = pick(blocks.name, srows, b0, b1)
        exps = pick(scales.name, srows, g0, g1)
        scale = [[math.inf if x == 255 else math.ldexp(1.0, x - 127) for x in row] for row in exps]
        for c in cs:
            at, shift, g = 16 * (c // 32) + (c % 32) // 2 - b0, 4 * (c & 1), c // 32 - g0
            out.append([E2M1[(codes[j][at] >> shift) & 15] * scale[j][g] for j in range(len(cols))])
    return out


def _fp8_block(t: Logical, read, pick, rows: list[int], cols: list[int]) -> list[list]:
    codes, scale = t.parts["codes"], t.parts["weight_scale_inv"]
    bm, bn = t.scheme.block
    c0, c1 = cols[0], cols[-1] + 1
    q = [_unpack(codes, b) for b in pick(codes.name, rows, c0, c1)]
    srows = sorted({r // bm for r in rows})
    s = dict(zip(srows, (_rows(read, scale, r, r + 1) for r in srows)))
    return [[q[i][c - c0] * s[r // bm][c // bn] for c in cols] for i, r in enumerate(rows)]


def _mlx(t: Logical, read, pick, rows: list[int], cols: list[int]) -> list[list]:
    """MLX affine: code c of a row is bits [c*bits, (c+1)*bits) of its little-endian words."""
    sch = t.scheme
    if sch.strategy != "affine":
        return None
    bits, gs, mask = sch.bits, sch.group_size, (1 << sch.bits) - 1
    codes, scales, biases = t.parts["codes"], t.parts["scales"], t.parts["biases"]
    w0, w1 = cols[0] * bits // 32, ((cols[-1] + 1) * bits - 1) // 32 + 1
    g0, g1 = cols[0] // gs, cols[-1] // gs + 1
    raw = pick(codes.name, rows, w0, w1)
    s = [_unpack(scales, b) for b in pick(scales.name, rows, g0, g1)]
    b = [_unpack(biases, x) for x in pick(biases.name, rows, g0, g1)]
    dt = scales.dtype
    out = []
    for i in range(len(rows)):
        stream = int.from_bytes(raw[i], "little")
        q = [(stream >> (c * bits - 32 * w0)) & mask for c in cols]
        sg = [s[i][c // gs - g0] for c in cols]
        bg = [b[i][c // gs - g0] for c in cols]
        out.append(round_to(dt, [p + z for p, z in zip(round_to(dt, [x * y for x, y in zip(sg, q)]), bg)]))
    return out


CELLS = {"gptq": _gptq, "awq": _awq, "mxfp4": _mxfp4, "fp8-block": _fp8_block, "mlx": _mlx}


def cells(t: Logical, read, pick, rows: list[int], cols: list[int]) -> list[list] | None:
    """values[i][j] of logical rows[i] x columns[j] (both ascending), or None where this layout
    has no cell decoder (the caller decodes whole rows)."""
    fn = CELLS.get(t.scheme.layout)
    return fn(t, read, pick, rows, cols) if fn and not t.reason else None
