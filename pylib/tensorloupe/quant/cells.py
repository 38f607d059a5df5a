"""Cell decoders: the values of a product of logical rows x logical columns (a heatmap lattice),
decoding only those cells and reading only the stored bytes they lie in.

Row decoders (decode.py) decode whole logical rows. That is right for a sample window, but a
256 x 256 lattice of a 4096 x 4096 weight picks every 16th value of 256 rows: whole-row decoding
there costs 1M values in Python for 65,536 cells, and for layouts whose logical rows are columns
of the stored parts (GPTQ, gpt-oss MXFP4) one read per stored row per logical row: 130,000 reads
for a GPTQ lattice (AWQ alike), a million for MXFP4 (bench/quant_views.py measured 5.3 s and 17 s). Here
each needed stored row is read once, as one range over the columns the cells need, all issued
together (`run`), and each cell is a few integer operations.

Each decoder is a generator: it yields, once, the stored ranges it needs as a list of requests
(part, stored rows, c0, c1), receives for each request the bytes of elements [c0, c1) of each of
those rows, and returns the values of rows x cols, row-major (value i * len(cols) + j is
rows[i] x cols[j]), the same values the row decoders give.
`run` drives several at once, so that a sample's 32 windows (quant/order.py) are one vectored
read per source, as a float tensor's are.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from functools import lru_cache
from itertools import groupby, repeat
from array import array
from operator import add, itemgetter, mul, sub

from ..dtypes import lookup
from . import bnb, mlx
from .decode import _AWQ_NIBBLE, _E2M1_PAIRS, E2M1, _group_index, _in_dtype_of, _rows, gptq_groups
from .records import Logical
from .rounding import codes as bit_codes, round_to


# a cell decoder: yields its requests once, is sent their bytes, returns the values row-major
Decoder = Generator[list, list, list]

_WORDS = lookup("U32")     # GPTQ's I32 words read unsigned: a straddling code joins two of them


def _unpack(part, data: bytes) -> list:
    return lookup(part.dtype).decode(data)


def _row_major(by_col: list[list]) -> list:
    """The values of lists made column by column, row-major (one column: that list)."""
    return by_col[0] if len(by_col) == 1 else [v for row in zip(*by_col) for v in row]


def _gptq(t: Logical, read, rows: list[int], cols: list[int]) -> Decoder:
    """rows: outputs o, cols: inputs i. qweight [in*bits/32, out]: input i of output o is bits
    [i*bits, (i+1)*bits) of column o read down the packed rows (3 bits straddle two words)."""
    sch = t.scheme
    qweight, qzeros, scales = t.parts["codes"], t.parts["qzeros"], t.parts["scales"]
    bits, mask = sch.bits, (1 << sch.bits) - 1
    gidx = gptq_groups(t, read)
    o0, o1 = rows[0], rows[-1] + 1
    words = sorted({w for i in cols for w in (i * bits // 32, ((i + 1) * bits - 1) // 32)})
    groups = sorted({gidx[i] for i in cols})
    z0, z1 = o0 * bits // 32, ((o1 * bits) - 1) // 32 + 1
    qw, sc, zr = yield [(qweight.name, words, o0, o1), (scales.name, groups, o0, o1), (qzeros.name, groups, z0, z1)]
    packed = dict(zip(words, map(_WORDS.decode, qw)))
    s = dict(zip(groups, (_unpack(scales, b) for b in sc)))
    zw = dict(zip(groups, map(_WORDS.decode, zr)))
    v1 = sch.strategy in ("gptq", "gemm")

    def zeros(g):       # the zero point of group g for each output asked
        row, out = zw[g], []
        for o in rows:
            w, sh = divmod(o * bits - 32 * z0, 32)
            z = ((row[w] | ((row[w + 1] << 32) if sh + bits > 32 else 0)) >> sh) & mask
            out.append((z + 1) & mask if v1 else z)     # v1 stores z - 1
        return out

    zo = {g: zeros(g) for g in groups}
    js = [o - o0 for o in rows]
    by_col = []       # column by column: one comprehension over the rows, rounded at once
    for i in cols:
        (w, sh), g = divmod(i * bits, 32), gidx[i]
        low, sg, zg = packed[w], s[g], zo[g]
        if sh + bits > 32:      # straddles two words
            high = packed[w + 1]
            q = [((low[j] | (high[j] << 32)) >> sh) & mask for j in js]
        else:
            q = [(low[j] >> sh) & mask for j in js]
        by_col.append(round_to(scales.dtype, [sg[j] * (c - z) for j, c, z in zip(js, q, zg)]))
    return _row_major(by_col)


def _awq(t: Logical, read, rows: list[int], cols: list[int]) -> Decoder:
    """rows: outputs o, cols: inputs i. qweight [in, out/8]: output o of input i is nibble
    AWQ_NIBBLE[o % 8] of word o // 8 of row i; qzeros [groups, out/8] likewise; W = (q - z) * s."""
    qweight, qzeros, scales = t.parts["codes"], t.parts["qzeros"], t.parts["scales"]
    gidx = gptq_groups(t, read)
    o0, o1 = rows[0], rows[-1] + 1
    w0, w1 = o0 // 8, (o1 - 1) // 8 + 1
    groups = sorted({gidx[i] for i in cols})
    qw, sc, zr = yield [(qweight.name, cols, w0, w1), (scales.name, groups, o0, o1), (qzeros.name, groups, w0, w1)]
    q = [_WORDS.decode(b) for b in qw]
    s = dict(zip(groups, (_unpack(scales, b) for b in sc)))
    z = dict(zip(groups, map(_WORDS.decode, zr)))
    at = [(o // 8 - w0, 4 * _AWQ_NIBBLE[o % 8], o - o0) for o in rows]
    by_col = []       # column by column: one comprehension over the rows, rounded at once
    for j, i in enumerate(cols):
        qj, zg, sg = q[j], z[gidx[i]], s[gidx[i]]
        by_col.append(round_to(scales.dtype, [sg[k] * (((qj[w] >> sh) & 15) - ((zg[w] >> sh) & 15))
                                              for w, sh, k in at]))
    return _row_major(by_col)


def _mxfp4(t: Logical, read, rows: list[int], cols: list[int]) -> Decoder:
    """rows: k = (expert e, logical column c) of [E, G*32, R]; cols: stored rows r. The value is
    nibble c%2 of byte (c%32)//2 of block c//32 of stored row (e, r), times 2**(scale - 127)."""
    blocks, scales = t.parts["codes"], t.parts["scales"]
    _, width, stored = t.shape
    out = []
    asks, spans = [], []
    for e, ks in groupby(rows, key=lambda k: k // width):     # rows ascending: one run per expert
        cs = [k % width for k in ks]
        b0, b1 = cs[0] // 2, cs[-1] // 2 + 1       # code c is nibble c % 2 of byte c // 2 of the row
        g0, g1 = cs[0] // 32, cs[-1] // 32 + 1
        srows = [e * stored + r for r in cols]
        asks += [(blocks.name, srows, b0, b1), (scales.name, srows, g0, g1)]
        spans.append((cs, b0, g0))
    got = yield asks
    for (cs, b0, g0), codes, exps in zip(spans, got[::2], got[1::2]):
        scale = [[math.inf if x == 255 else math.ldexp(1.0, x - 127) for x in row] for row in exps]
        c0, n = cs[0], len(cs)
        if cs[-1] - c0 == n - 1 and not (c0 | n) & 1:
            # a run of whole bytes (a sample's window): every byte's two values, each times its
            # group's scale, at C speed
            first = c0 - 32 * g0
            by_row = [list(map(mul, [v for b in row for v in _E2M1_PAIRS[b]],
                               [x for x in sr for _ in range(32)][first:first + n])) for row, sr in zip(codes, scale)]
        else:
            at = [(c // 2 - b0, 4 * (c & 1), c // 32 - g0) for c in cs]
            # stored row by stored row: one comprehension over the logical rows it holds
            by_row = [[E2M1[(row[b] >> shift) & 15] * sr[g] for b, shift, g in at] for row, sr in zip(codes, scale)]
        out += _row_major(by_row)
    return out


def _fp8_block(t: Logical, read, rows: list[int], cols: list[int]) -> Decoder:
    codes, scale = t.parts["codes"], t.parts["weight_scale_inv"]
    bm, bn = t.scheme.block
    c0, c1 = cols[0], cols[-1] + 1
    srows = sorted({r // bm for r in rows})
    s0, s1 = c0 // bn, (c1 - 1) // bn + 1
    raw, sc = yield [(codes.name, rows, c0, c1), (scale.name, srows, s0, s1)]
    s = dict(zip(srows, (_unpack(scale, b) for b in sc)))
    at = _picker([c - c0 for c in cols])
    block_of = _picker([c // bn - s0 for c in cols])
    out: list = []
    for r, b in zip(rows, raw):
        out += map(mul, at(_unpack(codes, b)), block_of(s[r // bm]))
    return out


def _picker(at: list[int]):
    """A function giving the items at positions `at` of a sequence, as a list (at C speed)."""
    if len(at) == 1:
        (k,) = at
        return lambda seq: [seq[k]]
    get = itemgetter(*at)
    return lambda seq: list(get(seq))


def _codes_at(rows: list[bytes], bit_at: list[int], bits: int) -> list[int]:
    """The `bits`-bit code starting at each bit offset of `bit_at` in each row (little-endian
    bit streams), row-major. A code inside one byte is picked and masked by a byte table; where
    the offsets step evenly by whole bytes (a lattice's columns), a strided slice of the row."""
    mask = (1 << bits) - 1
    n, first = len(bit_at), bit_at[0]
    if n > 64 and bit_at[-1] - first == bits * (n - 1) and (first % 8) % bits == 0 \
            and (first % 8 == 0 or 8 % bits == 0):
        # a run of consecutive codes (a sample window): cut at C speed from the byte holding
        # the first (rounding.codes wants whole periods of 8 codes: padded with zero bytes)
        b0, back = first // 8, (first % 8) // bits
        out = []
        for row in rows:
            chunk = bytes(row[b0:])
            chunk += bytes(-len(chunk) % bits)
            out += bit_codes(chunk, bits)[back:back + n]
        return out
    at = [divmod(b, 8) for b in bit_at]
    shifts = {sh for _, sh in at}
    if all(sh + bits <= 8 for sh in shifts):        # 1, 2, 4 and 8 bits: never across bytes
        table = bytes(((b >> sh) & mask) for sh in sorted(shifts) for b in range(256)) \
            if len(shifts) == 1 else None
        first, n = at[0][0], len(at)
        step = at[1][0] - first if n > 1 else 1
        if table is not None and step > 0 and all(b == first + k * step for k, (b, _) in enumerate(at)):
            out: list = []
            for row in rows:
                out += row[first:first + step * (n - 1) + 1:step].translate(table)
            return out
        return [(row[b] >> sh) & mask for row in rows for b, sh in at]
    # 3, 5, 6, 7 bits: a code may take bits of the next byte (a zero byte after the last)
    return [((row[b] | (row[b + 1] << 8)) >> sh) & mask for row in (r + b"\0" for r in rows) for b, sh in at]


def _mlx(t: Logical, read, rows: list[int], cols: list[int]) -> Decoder:
    """MLX: code c of a row is bits [c*bits, (c+1)*bits) of its little-endian words. Affine:
    w = scales * q + biases in the scales' dtype; the float modes (mxfp4, nvfp4, mxfp8): the
    code's E2M1 or E4M3 value times its group's E8M0 or E4M3 scale, as mlx.decode gives.
    Every step runs over the whole lattice at once, at C speed (map, itemgetter, struct)."""
    sch = t.scheme
    fixed = mlx.MODES.get(sch.strategy)
    bits, gs = sch.bits, sch.group_size
    codes, scales = t.parts["codes"], t.parts["scales"]
    w0, w1 = cols[0] * bits // 32, ((cols[-1] + 1) * bits - 1) // 32 + 1
    g0, g1 = cols[0] // gs, cols[-1] // gs + 1
    asks = [(codes.name, rows, w0, w1), (scales.name, rows, g0, g1)]
    if fixed is None:
        asks.append((t.parts["biases"].name, rows, g0, g1))
    raw, sc, *bs = yield asks
    q = _codes_at(raw, [c * bits - 32 * w0 for c in cols], bits)
    group_of = _picker([c // gs - g0 for c in cols])      # each column's scale in a row's span
    scale_type = lookup(fixed.scale if fixed else scales.dtype)
    s = [v for x in sc for v in group_of(scale_type.decode(x))]
    if fixed is not None:
        table = mlx.E2M1 if bits == 4 else mlx.E4M3
        vals = list(map(mul, _picker(q)(table), s))
        # mxfp8 returns bfloat16: exact but for scales near the extremes (mlx.decode rounds then)
        return round_to("BF16", vals) if sch.strategy == "mxfp8" else vals
    b = [v for x in bs[0] for v in group_of(_unpack(scales, x))]
    dt = scales.dtype
    return round_to(dt, list(map(add, round_to(dt, list(map(mul, s, q))), b)))


def _ct_pack(t: Logical, read, rows: list[int], cols: list[int]) -> Decoder:
    """compressed-tensors pack-quantized: code c of a row is bits [c*bits, (c+1)*bits) of its
    words, stored unsigned (+2**(bits-1)); W = (q - offset - z) * s by the column's group, a
    float32 product rounded to the scale's dtype, as decode._ct_pack gives."""
    sch = t.scheme
    bits, offset = sch.bits, 1 << (sch.bits - 1)
    packed, scale = t.parts["codes"], t.parts["weight_scale"]
    n_groups = scale.shape[1] if len(scale.shape) > 1 else 1
    if "weight_g_idx" in t.parts:
        memo = getattr(read, "memo", None)
        gidx = memo.get("weight_g_idx") if memo is not None else None
        if gidx is None:
            gidx = _group_index(read, t.parts["weight_g_idx"], t.shape[1], scale, n_groups, "groups per row")
            if memo is not None:
                memo["weight_g_idx"] = gidx
        groups = [gidx[c] for c in cols]
    elif sch.strategy == "group":
        groups = [c // sch.group_size for c in cols]
    else:
        groups = [0] * len(cols)
    w0, w1 = cols[0] * bits // 32, ((cols[-1] + 1) * bits - 1) // 32 + 1
    g0, g1 = min(groups), max(groups) + 1
    asks = [(packed.name, rows, w0, w1), (scale.name, rows, g0, g1) if len(scale.shape) > 1
            else (scale.name, rows, 0, 1)]
    zp = None if sch.symmetric else t.parts["weight_zero_point"]
    if zp is not None:
        if zp.dtype == "I32":      # packed along rows: row r of group g is code r of column g's stream
            words = sorted({w for r in rows for w in (r * bits // 32, ((r + 1) * bits - 1) // 32)})
            asks.append((zp.name, words, g0, g1))
        else:
            asks.append((zp.name, rows, g0, g1))
    raw, sc, *zr = yield asks
    q = _codes_at(raw, [c * bits - 32 * w0 for c in cols], bits)
    group_of = _picker([g - g0 for g in groups]) if len(scale.shape) > 1 else _picker([0] * len(cols))
    sv = [v for x in sc for v in group_of(_unpack(scale, x))]
    if zp is None:
        v = [c - offset for c in q]
    else:
        if zp.dtype == "I32":
            column = dict(zip(words, map(_WORDS.decode, zr[0])))      # word -> its groups' words
            mask = (1 << bits) - 1
            z_rows = []
            for r in rows:
                w, sh = divmod(r * bits, 32)
                low, high = column[w], column.get(w + 1)
                z_rows.append([(((lo | (hi << 32)) if sh + bits > 32 else lo) >> sh) & mask
                               for lo, hi in zip(low, high if sh + bits > 32 else low)])
            z_rows = [[z - offset for z in row] for row in z_rows]
        else:
            z_rows = [_unpack(zp, x) for x in zr[0]]
        zv = [z for row in z_rows for z in group_of(row)]
        v = [c - offset - z for c, z in zip(q, zv)]
    out = array("f", map(mul, v, sv))
    return round_to(scale.dtype, out) if scale.dtype in ("BF16", "F16") else list(out)


def _nvfp4(t: Logical, read, rows: list[int], cols: list[int]) -> Decoder:
    """compressed-tensors nvfp4-pack-quantized: code c is nibble c % 2 (low first) of byte c // 2;
    W = bf16(e2m1[q] * f32(weight_scale / global)), as decode._nvfp4 gives."""
    packed, scale, gscale = t.parts["codes"], t.parts["weight_scale"], t.parts["weight_global_scale"]
    gs = t.scheme.group_size
    b0, b1 = cols[0] // 2, cols[-1] // 2 + 1
    g0, g1 = cols[0] // gs, cols[-1] // gs + 1
    (g,) = _rows(read, gscale, 0, gscale.shape[0] if gscale.shape else 1)
    raw, sc = yield [(packed.name, rows, b0, b1), (scale.name, rows, g0, g1)]
    q = _codes_at(raw, [4 * c - 8 * b0 for c in cols], 4)
    group_of = _picker([c // gs - g0 for c in cols])
    div = [v for x in sc for v in group_of(array("f", (s / g for s in _unpack(scale, x))))]
    return round_to("BF16", array("f", map(mul, _picker(q)(E2M1), div)))


def _quanto(t: Logical, read, rows: list[int], cols: list[int]) -> Decoder:
    """optimum-quanto, per-row scale: qint8 / qfloat8 w = scale * data; qint4 / qint2 planar
    along dim 0 (code row k*R + p is bits k*b of packed row p): w = scale * q - shift, each
    operation in the scale's dtype, as quanto.decode gives."""
    data, scale = t.parts["codes"], t.parts["_scale"]
    dt, bits = scale.dtype, t.scheme.bits
    c0, c1 = cols[0], cols[-1] + 1
    pick = _picker([c - c0 for c in cols])
    n = len(cols)
    if bits == 8:
        raw, sc = yield [(data.name, rows, c0, c1), (scale.name, rows, 0, 1)]
        sv = [v for x in sc for v in _unpack(scale, x) * n]
        return round_to(dt, list(map(mul, sv, [v for b in raw for v in pick(_unpack(data, b))])))
    stored, mask = data.shape[0], (1 << bits) - 1
    raw, sc, sh = yield [(data.name, [r % stored for r in rows], c0, c1), (scale.name, rows, 0, 1),
                         (t.parts["_shift"].name, rows, 0, 1)]
    tables = {}
    q: list = []
    for r, b in zip(rows, raw):
        k = r // stored
        table = tables.get(k) or tables.setdefault(k, bytes(((x >> (k * bits)) & mask) for x in range(256)))
        q += bytes(pick(b)).translate(table)
    sv = [v for x in sc for v in _unpack(scale, x) * n]
    zv = [v for x in sh for v in _unpack(scale, x) * n]
    return round_to(dt, list(map(sub, round_to(dt, list(map(mul, sv, q))), zv)))


@lru_cache(maxsize=None)
def _shifted(shift: int, mask: int) -> bytes:
    return bytes((b >> shift) & mask for b in range(256))


def _segments(rows: list[int], cols: list[int], width: int, key) -> list[tuple[int, list[int]]]:
    """Each logical row's cells cut where key(flat element) changes: (the row's first flat
    element r * width, the columns of one segment) in order; the cells of a segment are one
    ascending run of the flattened weight."""
    out = []
    first, last = cols[0], cols[-1]
    for r in rows:
        base = r * width
        if key(base + first) == key(base + last):       # (key never falls along a row: one segment)
            out.append((base, cols))
            continue
        for _, cs in groupby(cols, key=lambda c: key(base + c)):
            out.append((base, list(cs)))
    return out


def _hqq(t: Logical, read, rows: list[int], cols: list[int]) -> Decoder:
    """HQQ: the weight reshaped to [R, C] (axis 1: a group is a row of it; axis 0: a column),
    reshaped row i is plane i // step of packed row i % step (the first plane in the highest
    bits); W = ((q - zero) * scale), each operation rounded to the compute dtype, as hqq.dequant
    gives. Within one plane (and, on axis 0, one reshaped row) a logical row's cells are one run
    of the packed elements, e - plane * step * C: one flat read each, and one of their scales."""
    p = t.scheme.params
    big_c = p["reshaped"][1]
    step, k, dtype, axis = p["step"], p["k"], p["dtype"], p["axis"]
    bits, width = t.scheme.bits, t.shape[1]
    packed, scale, zero = t.parts["codes"], t.parts["scale"], t.parts["zero"]
    top = 32 - 2 if bits == 3 else 8                     # 3bit_32 uses bits 29..0
    mask = (1 << bits) - 1
    plane_of = (lambda e: e // big_c // step) if axis == 1 else (lambda e: e // big_c)
    segments = _segments(rows, cols, width, plane_of)
    asks, plan = [], []
    for base, cs in segments:
        e0, e1 = base + cs[0], base + cs[-1] + 1
        g0 = e0 // big_c
        lift = (g0 // step) * step * big_c      # the plane's packed elements start here
        asks.append((packed.name, None, e0 - lift, e1 - lift))
        s0, s1 = (g0, (e1 - 1) // big_c + 1) if axis == 1 else (e0 % big_c, (e1 - 1) % big_c + 1)
        plan.append((base, cs, e0, g0, s0))
        asks += [(scale.name, None, s0, s1), (zero.name, None, s0, s1)]
    got = yield asks
    q, sv, zv = [], [], []
    pickers: dict = {}      # the same columns at the same place in their runs: one picker
    for (base, cs, e0, g0, s0), (codes_run,), (s_run,), (z_run,) in zip(plan, got[::3], got[1::3], got[2::3]):
        shift = top - bits * (g0 // step + 1) if k > 1 else 0
        key = (cs[0], len(cs), e0 % big_c)
        if key not in pickers:
            offs = [c - cs[0] for c in cs]
            pickers[key] = (_picker(offs), _picker([(base + c) // big_c - s0 for c in cs]) if axis == 1 else None)
        pick, by_group = pickers[key]
        if packed.dtype == "U8":    # a byte table shifts and masks at C speed
            q += bytes(pick(codes_run)).translate(_shifted(shift, mask))
        else:
            q += [(w >> shift) & mask for w in pick(_unpack(packed, codes_run))]
        at = by_group or pick
        sv += at(_unpack(scale, s_run))
        zv += at(_unpack(zero, z_run))
    diff = _in_dtype_of(array("f", map(sub, q, zv)), dtype)
    return list(_in_dtype_of(array("f", map(mul, diff, sv)), dtype))


def _bnb_4bit(t: Logical, read, rows: list[int], cols: list[int]) -> Decoder:
    """bitsandbytes NF4 / FP4: the weight flattened row-major, two codes a byte, high nibble
    first; value = CODE[q] * absmax[e // blocksize] in float32 (nested: the absmax itself
    decoded from its U8 code), then cast to the quant state's dtype, as bnb.dequant_4bit gives.
    Each logical row's cells are one flat run of the codes, the absmax and the nested absmax."""
    width, bs = t.rows_cols[1], t.scheme.group_size
    codes, absmax = t.parts["codes"], t.parts["weight.absmax"]
    nested = t.scheme.block is not None
    nbs = t.scheme.block[0] if nested else 1
    asks = []
    for r in rows:
        e0, e1 = r * width + cols[0], r * width + cols[-1] + 1
        k0, k1 = e0 // bs, (e1 - 1) // bs + 1
        asks += [(codes.name, None, e0 // 2, (e1 - 1) // 2 + 1), (absmax.name, None, k0, k1)]
        if nested:
            asks.append((t.parts["weight.nested_absmax"].name, None, k0 // nbs, (k1 - 1) // nbs + 1))
    got = yield asks
    per = 3 if nested else 2
    if nested:
        nmap = array("f", _rows(read, t.parts["weight.nested_quant_map"], 0, 256))
        offset = t.scheme.params["offset"]
    code = bnb.CODES[t.scheme.strategy]
    out = array("f")
    plans: dict = {}        # rows whose first cell lies alike in its block share their pickers
    for i, r in enumerate(rows):
        (raw,), (am,) = got[per * i], got[per * i + 1]
        e0 = r * width + cols[0]
        b0, k0 = e0 // 2, e0 // bs
        key = e0 % bs           # (blocksizes are even: this says the parity too)
        if key not in plans:
            es = [e0 + c - cols[0] for c in cols]
            shifts = {0 if e & 1 else 4 for e in es}        # high nibble: the even element
            plans[key] = (_picker([e // 2 - b0 for e in es]), shifts.pop() if len(shifts) == 1 else None,
                          [(e // 2 - b0, 0 if e & 1 else 4) for e in es], _picker([e // bs - k0 for e in es]))
        pick, shift, at, by_block = plans[key]
        if nested:
            (na,) = got[per * i + 2]
            outer = _unpack(t.parts["weight.nested_absmax"], na)
            n0 = k0 // nbs
            scaled = array("f", (nmap[a] * outer[(k0 + j) // nbs - n0] for j, a in enumerate(am)))
            scale = array("f", (v + offset for v in scaled))
        else:
            scale = _unpack(absmax, am)
        if shift is not None:
            q = bytes(pick(raw)).translate(_shifted(shift, 15))
        else:
            q = [(raw[b] >> sh) & 15 for b, sh in at]
        out.extend(map(mul, _picker(q)(code), by_block(scale)))
    return list(_in_dtype_of(out, t.scheme.params["dtype"]))


CELLS = {"gptq": _gptq, "awq": _awq, "mxfp4": _mxfp4, "fp8-block": _fp8_block, "mlx": _mlx,
         "ct-pack": _ct_pack, "nvfp4": _nvfp4, "quanto": _quanto, "hqq": _hqq, "bnb-4bit": _bnb_4bit}


def decodable(t: Logical) -> bool:
    return t.scheme is not None and t.scheme.layout in CELLS and not t.reason


def run(t: Logical, read, pick_many, products: list) -> list:
    """For each (rows, cols) of `products` (both ascending), the values of rows x cols,
    row-major, or None where this layout has no cell decoder for it. Every decoder's requests
    are read in one `pick_many(requests) -> [per request: [bytes per stored row]]`."""
    fn = CELLS[t.scheme.layout]
    out: list = [None] * len(products)
    waiting, asks = [], []
    for k, (rows, cols) in enumerate(products):
        decoder = fn(t, read, rows, cols)
        try:
            asks.append(next(decoder))
            waiting.append((k, decoder))
        except StopIteration as done:      # a decoder that reads nothing (no cell path here)
            out[k] = done.value
    got = iter(pick_many([ask for these in asks for ask in these]))
    for (k, decoder), these in zip(waiting, asks):
        try:
            decoder.send([next(got) for _ in these])
        except StopIteration as done:
            out[k] = done.value
        else:
            raise RuntimeError(f"the {t.scheme.layout} cell decoder asked twice")
    return out


def cells(t: Logical, read, pick_many, rows: list[int], cols: list[int]) -> list[list] | None:
    """The values of logical rows x columns (both ascending), row-major, or None where this
    layout has no cell decoder (the caller decodes whole rows)."""
    return run(t, read, pick_many, [(rows, cols)])[0] if decodable(t) else None
