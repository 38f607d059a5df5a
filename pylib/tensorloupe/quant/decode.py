"""Decoders: a logical tensor's float32 rows [r0, r1) from only the stored rows they need.

`read(part_name, row_start, row_count) -> bytes` returns whole rows (along dim 0) of one stored
part. Element decoders are the existing `dtypes` rows (F8_E4M3, F8_E8M0, F16, BF16, ...).
Each value is computed in double from exact operands and rounded once to float32 (array('f')),
which is what the reference's float32 multiply does: an 8-bit code times a float32 scale is
exact in double.
"""

from __future__ import annotations

import math
import sys
from array import array
from typing import Callable

from ..dtypes import lookup
from ..errors import FormatError, UnsupportedError, UsageError
from . import mlx, quanto, torchao
from .groups import Logical
from .rounding import round_to

Read = Callable[[str, int, int], bytes]


def _values(part, raw: bytes) -> list:
    return lookup(part.dtype).decode(raw)


def _rows(read: Read, part, r0: int, r1: int) -> list:
    return _values(part, read(part.name, r0, r1 - r0))


def _fp8_block(t: Logical, read: Read, r0: int, r1: int) -> array:
    codes, scale = t.parts["codes"], t.parts["weight_scale_inv"]
    bm, bn = t.scheme.block
    cols = t.shape[1]
    q = _rows(read, codes, r0, r1)
    s0, s1 = r0 // bm, (r1 - 1) // bm + 1
    s = _rows(read, scale, s0, s1)
    sc = scale.shape[1]
    out = array("f", bytes(4 * (r1 - r0) * cols))
    for i in range(r1 - r0):
        srow = ((r0 + i) // bm - s0) * sc
        base = i * cols
        for c in range(cols):
            out[base + c] = q[base + c] * s[srow + c // bn]
    return out


def _fp8_scaled(t: Logical, read: Read, r0: int, r1: int) -> array:
    codes, scale = t.parts["codes"], t.parts["weight_scale"]
    zp = t.parts.get("weight_zero_point")
    cols = t.shape[1]
    q = _rows(read, codes, r0, r1)
    strategy = t.scheme.strategy
    if strategy == "tensor":
        one = scale.shape[0] if scale.shape else 1
        s = _rows(read, scale, 0, one) * (r1 - r0)
        z = _rows(read, zp, 0, one) * (r1 - r0) if zp is not None else None
    elif strategy == "block":   # compressed-tensors FP8 blocks: scale [ceil(M/bm), ceil(N/bn)]
        bm, bn = t.scheme.block
        s0, s1 = r0 // bm, (r1 - 1) // bm + 1
        s = _rows(read, scale, s0, s1)
        z = _rows(read, zp, s0, s1) if zp is not None else None
    else:
        s = _rows(read, scale, r0, r1)
        z = _rows(read, zp, r0, r1) if zp is not None else None
    per = 1 if strategy not in ("group", "block") else scale.shape[1]
    gs = t.scheme.group_size or cols
    # index of element i's scale: its row's (its row block's), and its column's group in that row
    if strategy == "group":
        at = [(i // cols) * per + (i % cols) // gs for i in range(len(q))]
    elif strategy == "block":
        at = [((r0 + i // cols) // bm - s0) * per + (i % cols) // bn for i in range(len(q))]
    else:
        at = [i // cols for i in range(len(q))]
    if z is None:
        out = array("f", (q[i] * s[at[i]] for i in range(len(q))))
    else:
        out = array("f", ((q[i] - z[at[i]]) * s[at[i]] for i in range(len(q))))
    return _in_dtype_of(out, scale.dtype)


def _in_dtype_of(out: array, dtype: str) -> array:
    """compressed-tensors returns the weight in the scale's dtype: a BF16/F16 scale rounds each
    float32 product once more (round to nearest even), as torch's bf16/f16 multiply does."""
    return array("f", round_to(dtype, out)) if dtype in ("BF16", "F16") else out


def _bitstream(raw: bytes, n: int, bits: int, first_bit: int = 0) -> list:
    # Little-endian bit stream: element i is bits [i*bits, (i+1)*bits) of the stored words read as
    # one little-endian integer (compressed-tensors pack_to_int32, MLX); codes may straddle words
    # (3, 5, 6, 7 bits). safetensors is little-endian, so the raw bytes are the stream on any host.
    # 32 codes fill exactly `bits` words, so the row is cut into such chunks: linear in the row
    # (one big integer per row would make every shift cost the row's length).
    mask = (1 << bits) - 1
    if first_bit:
        stream = int.from_bytes(raw, "little")
        return [(stream >> (first_bit + i * bits)) & mask for i in range(n)]
    shifts = range(0, 32 * bits, bits)
    chunk = 4 * bits
    out: list = []
    for j in range(0, len(raw), chunk):
        word = int.from_bytes(raw[j:j + chunk], "little")
        out += [(word >> k) & mask for k in shifts]
    return out[:n]


def _group_index(read: Read, part, count: int, scale, groups: int, what: str) -> list[int]:
    """An act-order group index (`g_idx`: the group of each input column), every entry checked
    to name one of the `groups` that `scale` holds."""
    gidx = [int(g) for g in _rows(read, part, 0, count)]
    bad = next((g for g in gidx if not 0 <= g < groups), None)
    if bad is not None:
        raise FormatError(f"tensor {part.name!r} names group {bad:,}, but {scale.name!r} holds "
                          f"{groups:,} {what}", expected=f"0..{groups - 1:,}", found=bad)
    return gidx


def _ct_pack(t: Logical, read: Read, r0: int, r1: int) -> array:
    sch = t.scheme
    bits, cols = sch.bits, t.shape[1]
    offset = 1 << (bits - 1)
    packed = t.parts["codes"]
    wpr = packed.shape[1]
    raw = read(packed.name, r0, r1 - r0)
    scale = t.parts["weight_scale"]
    s = _rows(read, scale, r0, r1)
    ns = scale.shape[1] if len(scale.shape) > 1 else 1
    if "weight_g_idx" in t.parts:
        gidx = _group_index(read, t.parts["weight_g_idx"], cols, scale, ns, "groups per row")
    elif sch.strategy == "group":
        gidx = [c // sch.group_size for c in range(cols)]
    else:
        gidx = [0] * cols
    zeros = None
    if not sch.symmetric:
        zp = t.parts["weight_zero_point"]
        if zp.dtype == "I32":
            # packed along rows (packed_dim=0): row r of group g is code r of column g's stream
            w0, w1 = r0 * bits // 32, -(-(r1 * bits) // 32)
            zraw = read(zp.name, w0, w1 - w0)
            ng = zp.shape[1]
            first = r0 * bits - w0 * 32
            column = [b"".join(zraw[4 * (k * ng + g): 4 * (k * ng + g) + 4] for k in range(w1 - w0))
                      for g in range(ng)]
            cols_z = [_bitstream(column[g], r1 - r0, bits, first) for g in range(ng)]
            zeros = [[cols_z[g][i] - offset for g in range(ng)] for i in range(r1 - r0)]
        else:
            z = _rows(read, zp, r0, r1)
            zeros = [z[i * ns:(i + 1) * ns] for i in range(r1 - r0)]
    out = array("f", bytes(4 * (r1 - r0) * cols))
    for i in range(r1 - r0):
        q = _bitstream(raw[4 * wpr * i: 4 * wpr * (i + 1)], cols, bits)
        srow = s[i * ns:(i + 1) * ns]
        zrow = zeros[i] if zeros else None
        base = i * cols
        for c in range(cols):
            g = gidx[c]
            v = q[c] - offset
            if zrow is not None:
                v -= zrow[g]
            out[base + c] = v * srow[g]
    return _in_dtype_of(out, scale.dtype)


# E2M1 (FP4) code -> value: sign bit 3, the OCP MX table (transformers' FP4_VALUES).
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
# A byte -> its two values, low nibble first (NVFP4).
_E2M1_PAIRS = tuple((E2M1[b & 15], E2M1[b >> 4]) for b in range(256))


def _mxfp4(t: Logical, read: Read, k0: int, k1: int) -> array:
    """Logical rows k = (expert e, column c) of [E, G*32, R]: value r is the code at position c of
    stored row (e, r) times its group's E8M0 scale. One 16-byte column of every stored row of the
    expert per group of 32 logical rows (read.cols), not the stored rows whole."""
    blocks, scales = t.parts["codes"], t.parts["scales"]
    _, cols, rows = t.shape
    out = array("f")
    k = k0
    while k < k1:
        e, c = divmod(k, cols)
        g = c // 32
        end = min(k1, e * cols + 32 * g + 32)
        raw = read.cols(blocks.name, 16 * g, 16 * g + 16, e * rows, (e + 1) * rows)
        exps = read.cols(scales.name, g, g + 1, e * rows, (e + 1) * rows)
        # ldexp as torch.ldexp on finite operands: exact (powers of two times 4-bit values); the
        # scale 255 gives inf, as torch's 2**128 in float32 does
        scale = [math.inf if x == 255 else math.ldexp(1.0, x - 127) for x in exps]
        for j in range(c % 32, c % 32 + end - k):
            shift = 4 * (j & 1)           # low nibble: the even position
            codes = raw[j // 2::16]
            out.extend([E2M1[(b >> shift) & 15] * s for b, s in zip(codes, scale)])
        k = end
    return out


def _nvfp4(t: Logical, read: Read, r0: int, r1: int) -> array:
    packed, scale, gscale = t.parts["codes"], t.parts["weight_scale"], t.parts["weight_global_scale"]
    cols, gs, ns = t.shape[1], t.scheme.group_size, scale.shape[1]
    raw = read(packed.name, r0, r1 - r0)
    (g,) = _rows(read, gscale, 0, gscale.shape[0] if gscale.shape else 1)
    # f32(scale / global): torch's float32 division, rounded once
    div = array("f", (s / g for s in _rows(read, scale, r0, r1)))
    out = e2m1_groups(raw, div, r1 - r0, cols, gs, ns)
    return _in_dtype_of(out, "BF16")   # decompress unpacks to bf16 and returns that dtype


def e2m1_groups(raw: bytes, scales, rows: int, cols: int, gs: int, ns: int) -> array:
    """rows x cols E2M1 codes (two a byte, low nibble first) times their group's float32 scale
    (`ns` groups of `gs` a row), each product rounded once to float32."""
    pairs = _E2M1_PAIRS
    out = array("f")
    half = cols // 2
    for i in range(rows):
        q = [v for b in raw[i * half:(i + 1) * half] for v in pairs[b]]
        d = scales[i * ns:(i + 1) * ns]
        out.extend([q[c] * d[c // gs] for c in range(cols)])
    return out


def _words(raw: bytes) -> array:
    w = array("I", raw)
    if sys.byteorder == "big":
        w.byteswap()
    return w


def gptq_groups(t: Logical, read: Read) -> list[int]:
    """The group of each input of a GPTQ/AWQ weight: its act-order g_idx, else i // group_size."""
    scales, ins = t.parts["scales"], t.shape[1]
    if "g_idx" in t.parts:
        memo = getattr(read, "memo", None)      # a reader kept for many calls: checked once
        if memo is not None and "g_idx" in memo:
            return memo["g_idx"]
        gidx = _group_index(read, t.parts["g_idx"], ins, scales, scales.shape[0], "groups")
        if memo is not None:
            memo["g_idx"] = gidx
        return gidx
    gs = ins if t.scheme.group_size == -1 else t.scheme.group_size
    return [i // gs for i in range(ins)]


def _gptq_awq(t: Logical, read: Read, o0: int, o1: int) -> array:
    """Logical rows = output features [o0, o1): their columns of every packed part (read.cols)."""
    sch, layout = t.scheme, t.scheme.layout
    qweight, qzeros, scales = t.parts["codes"], t.parts["qzeros"], t.parts["scales"]
    bits, n = sch.bits, o1 - o0
    outs, ins = t.shape
    mask = (1 << bits) - 1
    ng = scales.shape[0]
    gidx = gptq_groups(t, read)
    s = _values(scales, read.cols(scales.name, o0, o1))          # [ng, n]
    # Zero points: `bits`-bit codes along each group's row; columns o0..o1 of it.
    if layout == "gptq":
        w0, w1 = o0 * bits // 32, -(-o1 * bits // 32)
        first = o0 * bits - 32 * w0
    else:
        w0, w1 = o0 // 8, -(-o1 // 8)
    zraw = read.cols(qzeros.name, w0, w1)
    span = 4 * (w1 - w0)
    z: list = []
    for g in range(ng):
        row = zraw[g * span:(g + 1) * span]
        if layout == "gptq":
            codes = _bitstream(row, n, bits, first) if first else _bitstream(row, n, bits)
            if sch.strategy in ("gptq", "gemm"):    # v1: stored z - 1 (model.py v1 -> v2 adds 1)
                codes = [(c + 1) & mask for c in codes]
        else:
            codes = _awq_columns(row, o0 - 8 * w0, n)
        z.append(codes)
    if layout == "gptq":
        columns = _words(read.cols(qweight.name, o0, o1))       # [in*bits/32, n]
        q_of = [_bitstream(columns[j::n].tobytes(), ins, bits) for j in range(n)]
    else:
        raw = read.cols(qweight.name, w0, w1)                 # [in, w1 - w0]
        rows = [_awq_columns(raw[i * span:(i + 1) * span], o0 - 8 * w0, n) for i in range(ins)]
        q_of = [[rows[i][j] for i in range(ins)] for j in range(n)]
    out = array("f")
    for j in range(n):
        q = q_of[j]
        sj = [s[g * n + j] for g in range(ng)]
        zj = [z[g][j] for g in range(ng)]
        out.extend([sj[g] * (q[i] - zj[g]) for i, g in enumerate(gidx)])
    # GPTQModel's dequantize_weight and AutoAWQ's dequantize_gemm multiply in the scales' dtype
    return _in_dtype_of(out, scales.dtype)


# AWQ packs output column 8w + AWQ_ORDER[k] into nibble k of word w (packing_utils.py).
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
_AWQ_NIBBLE = tuple(AWQ_ORDER.index(k) for k in range(8))     # column 8w + k -> its nibble


def _awq_columns(raw: bytes, skip: int, n: int) -> list:
    """n 4-bit AWQ codes from one row's words, starting `skip` columns into the first word."""
    words = _words(raw)
    return [(words[(skip + j) // 8] >> (4 * _AWQ_NIBBLE[(skip + j) % 8])) & 15 for j in range(n)]


DECODERS = {"fp8-block": _fp8_block, "fp8-scaled": _fp8_scaled, "ct-pack": _ct_pack, "mxfp4": _mxfp4,
            "nvfp4": _nvfp4, "gptq": _gptq_awq, "awq": _gptq_awq, "mlx": mlx.decode, "quanto": quanto.decode,
            "torchao": torchao.decode}


def dequantise(t: Logical, read: Read, r0: int, r1: int) -> array:
    """float32 values of logical rows [r0, r1), all columns, row-major."""
    if t.reason:
        raise UnsupportedError(f"tensor {t.name!r}: {t.reason}")
    rows = t.rows_cols[0]
    if not 0 <= r0 <= r1 <= rows:
        raise UsageError(f"tensor {t.name!r}: rows [{r0:,}, {r1:,}) are outside its {rows:,} rows")
    return DECODERS[t.scheme.layout](t, read, r0, r1)
