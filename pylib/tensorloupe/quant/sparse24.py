"""compressed-tensors `sparse-24-bitmask` (quantization_config.sparsity_config.format): a 2:4
sparse weight stored as `<module>.shape` (I64 [2, 1]), `<module>.compressed` [rows, cols / 2]
(the kept values, in the weight's dtype) and `<module>.bitmask` U8 [rows, ceil(cols / 8)].

compressed-tensors 0.12 compressors/sparse_compressors/sparse_24_bitmask.py (the format left the
library in 0.20; its files are still written by llm-compressor's older releases):
pack_bitmasks is numpy.packbits(mask, axis=-1, bitorder="little"), so column c of a row is bit
c % 8 of byte c // 8; sparse24_bitmask_decompress scatters the kept values, in row-major order,
to the set bits, zeros elsewhere. get_24_bytemasks picks the two of each four over the
*flattened* weight (tensor.view(-1, 4); only numel % 4 == 0 is asked). For cols a multiple of 4
every row keeps cols / 2 values, so a row decodes from its own row of each part. For cols = 4k + 2
(rows then even) a four may straddle rows 2m and 2m + 1: a row may keep more or fewer than cols / 2,
but the pair keeps cols, at kept positions [m * cols, (m + 1) * cols), rows 2m and 2m + 1 of
`compressed`: such a weight decodes by row pairs (`span`). A row (pair) whose mask marks another
count is a FormatError. The library cannot write an odd width (values.reshape(rows, cols // 2)
raises) nor 4k + 2 over odd rows (numel % 4): refused by name.

Over quantised codes ("2of4 FP8/INT8" models: config_groups beside the sparsity_config):
ModelCompressor.compress runs the quantisation compressor first, so `<module>.weight` holds the
codes (F8_E4M3 for float-quantized, I8 for int-quantized, naive_quantized.py), then the sparsity
compressor, which takes every name ending in `.weight` and leaves `weight_scale` and
`weight_zero_point` beside `compressed` as they were. Decompressing is the reverse: the codes
scattered (code 0 where pruned: torch.zeros in the codes' dtype), then dequantize over every
element, so a pruned element of an asymmetric int8 weight is (0 - z) * s, not 0. That second step
is the fp8-scaled row's (decode.py `_fp8_scaled`), run here on the scattered code bytes.
A module the quantisation leaves out (float values, no weight_scale) is plain 2:4 in such a file.
The sparse compressor never sees `weight_packed`, so a pack-quantized file with a 2:4
sparsity_config stores its codes dense (the ct-pack row reads it; its scheme says so).

compressed-tensors writes 2:4 int4 as marlin-24 (Marlin's tiles), which it cannot decompress
itself: refused by name (`marlin24`).

A heatmap lattice (`cells`) decodes only its cells: kept value k of a row (pair) is column c where
k is the number of set bits before c in the row (pair), found from running popcounts of the mask
bytes; it reads only the rows (pairs) the lattice touches.
"""

from __future__ import annotations

from array import array
from dataclasses import replace
from itertools import accumulate

from ..dtypes import lookup
from ..errors import FormatError
from .decode import _fp8_scaled, _rows, _values
from .groups import SCALE_DTYPES, Logical, Part, Scheme, _build, _ct_weights
from .rounding import round_to

FORMAT = "sparse-24-bitmask"
SPARSE = "2:4 sparse (bitmask)"
# the quantisation a 2:4 file's codes may carry: config type -> the codes' stored dtype
CODE_DTYPES = {"float": "F8_E4M3", "int": "I8"}
# column positions of the set bits of a mask byte (bit c % 8 of byte c // 8 is column c)
_SET_BITS = tuple(tuple(b for b in range(8) if byte >> b & 1) for byte in range(256))
_POPCOUNT = bytes(len(b) for b in _SET_BITS)


def build(name: str, mine: dict, config: dict, source: str, read_small) -> Logical:
    values, bitmask, shape_part = mine["codes"], mine["bitmask"], mine["shape"]
    stem = name[: -len(".weight")]
    weights = _ct_weights(config)
    scheme = Scheme("sparse-24", "compressed-tensors sparse-24-bitmask", 0, strategy="2:4",
                    facts={"method": f"{source} sparsity_config.format", "shape": shape_part.name},
                    params={"described": f"compressed-tensors {SPARSE}"})
    stored = tuple(values.shape)

    def packed(why: str) -> Logical:
        return Logical(name, stored, scheme, mine, f"packed, not dequantised: {why}")
    if read_small is None or len(shape_part.shape) > 2 or sum(shape_part.shape) > 3:
        return packed(f"{shape_part.name} {shape_part.shape} is not a weight's shape")
    shape = tuple(int(v) for v in read_small(shape_part.name))
    if len(shape) != 2 or min(shape) <= 0:
        return packed(f"{stem}.shape {shape} is not [rows, cols]")
    rows, cols = shape
    if cols % 2 or rows * cols % 4:
        return packed(f"{stem}.shape {shape} is not a width compressed-tensors writes: it keeps two of each four "
                      "of the flattened weight (rows x cols a multiple of 4) as [rows, cols / 2] (cols even)")
    if tuple(bitmask.shape) != (rows, -(-cols // 8)) or bitmask.dtype != "U8" or stored != (rows, cols // 2):
        return packed(f"compressed {values.dtype} {stored} and bitmask {bitmask.dtype} {bitmask.shape} are "
                      f"not [{rows}, {cols // 2}] values and U8 [{rows}, {-(-cols // 8)}] for {shape}")
    if weights and not (values.dtype in SCALE_DTYPES and "weight_scale" not in mine):
        return _over_codes(name, mine, shape, config, source, scheme, packed)
    if values.dtype not in SCALE_DTYPES:
        return packed(f"compressed {values.dtype} values without a quantisation config_groups in {source}")
    if weights:     # a module the quantisation leaves out (its ignore list): float values, no scale
        scheme.facts["quantisation"] = f"none: float {values.dtype} values, no weight_scale beside them"
    return Logical(name, shape, scheme, mine)


def marlin24(name: str, mine: dict, config: dict, source: str, read_small) -> Logical:
    """compressed-tensors' own format for 2:4 int4 (config/format.py: weight-only int4 or int8,
    channel or group, with a 2:4 sparsity_structure), never dequantised here: the library itself
    cannot decompress it (Marlin24Compressor.decompress raises NotImplementedError), and its
    weight_packed / scale_packed / meta are the Marlin kernel's permuted 16x64 tiles and CUTLASS
    metadata (sparse_quantized_compressors/marlin_24.py), not a row-major layout."""
    w = _ct_weights(config)
    bits = w.get("num_bits") if isinstance(w.get("num_bits"), int) else 0
    scheme = Scheme("marlin-24", "compressed-tensors marlin-24", bits, group_size=w.get("group_size"),
                    strategy=w.get("strategy"), facts={"method": f"{source} format"},
                    params={"described": f"compressed-tensors marlin-24 (int{bits}, 2:4)"})
    return Logical(name, tuple(mine["codes"].shape), scheme, mine,
                   "packed, not dequantised: marlin-24 (2:4 int4 in the Marlin kernel's permuted tiles, with "
                   "scale_packed and CUTLASS meta) is not read: compressed-tensors itself has no decompression "
                   "for it (Marlin24Compressor.decompress raises NotImplementedError)")


def _over_codes(name, mine, shape, config, source, sparse: Scheme, packed) -> Logical:
    """2:4 over int-quantized / float-quantized codes: the codes' scheme is the fp8-scaled row's,
    built on the dense shape (its scale shapes say the strategy), with the sparsity's facts."""
    weights = _ct_weights(config)
    values = mine["codes"]
    kind, bits = weights.get("type", "int"), weights.get("num_bits", 8)
    fmt, fmt_from = _format(config, source)
    if kind not in CODE_DTYPES or bits != 8 or values.dtype != CODE_DTYPES[kind]:
        return packed(f"{FORMAT} over {bits!r}-bit {kind!r} codes stored as {values.dtype} ({fmt!r}): "
                      f"compressed-tensors writes 2:4 over 8-bit codes only (F8_E4M3 float, I8 int)")
    if "weight_scale" not in mine:
        return packed(f"{source} config_groups quantises the weights, but no "
                      f"{name[: -len('weight')]}weight_scale is stored beside the codes")
    dense = {"codes": Part(values.name, values.dtype, shape),
             **{k: v for k, v in mine.items() if k.startswith(("weight_", "input_"))}}
    # the fp8-scaled row's own grouping: scale shapes -> strategy, the zero point's shape checked
    inner = _build("fp8-scaled", name, dense, config, source, None)
    if inner.reason:
        return packed(inner.reason.removeprefix("packed, not dequantised: "))
    q = inner.scheme
    codes_words = ("FP8 e4m3" if kind == "float" else "int8") + f", per {q.strategy}"
    if kind == "int":
        codes_words += ", symmetric" if q.symmetric else ", asymmetric"
    scheme = replace(q, layout="sparse-24",
                     facts={**q.facts, "format": fmt_from, "sparsity": sparse.facts["method"],
                            "shape": sparse.facts["shape"]},
                     params={"described": f"compressed-tensors {codes_words} ({fmt}) + {SPARSE}",
                             "codes": "fp8-scaled"})
    return Logical(name, shape, scheme, mine)


def _format(config: dict, source: str) -> tuple[str, str]:
    for key, grp in (config.get("config_groups") or {}).items():
        if isinstance(grp, dict) and grp.get("format"):
            return str(grp["format"]), f"{source} config_groups.{key}.format"
    return str(config.get("format") or "?"), f"{source} format"


def span(cols: int) -> int:
    """Rows that hold whole fours of the flattened weight, and so decode together: one for cols a
    multiple of 4; two for cols = 4k + 2, where a four may straddle rows 2m and 2m + 1 (the pair
    keeps cols values, at kept positions [m * cols, (m + 1) * cols): its two rows of compressed)."""
    return 1 if cols % 4 == 0 else 2


def dense_codes(t: Logical, read, r0: int, r1: int) -> bytes:
    """The stored bytes rows [r0, r1) would have dense: the kept elements of each unit of
    `span` rows, in row-major order, scattered to its set bits, zero bytes elsewhere
    (torch.zeros in the stored dtype: +0.0, code 0). Row pairs are read whole; only the rows
    asked for are returned."""
    rows, cols = t.shape
    values, bitmask = t.parts["codes"], t.parts["bitmask"]
    half, width, unit = cols // 2, -(-cols // 8), span(cols)
    item = max(1, int(lookup(values.dtype).bits) // 8)
    a0, a1 = r0 - r0 % unit, min(rows, -(-r1 // unit) * unit)
    kept = read(values.name, a0, a1 - a0)
    mask = read(bitmask.name, a0, a1 - a0)
    row_bytes, unit_kept = cols * item, unit * half
    out = bytearray(row_bytes * (a1 - a0))
    for u in range((a1 - a0) // unit):
        # columns of the unit's set bits, counted over its rows laid end to end
        at = [i * cols + 8 * j + b for i in range(unit) for j in range(width)
              for b in _SET_BITS[mask[(u * unit + i) * width + j]] if 8 * j + b < cols]
        if len(at) != unit_kept:
            raise _not_two_of_four(bitmask, a0 + u * unit, unit, len(at), unit_kept)
        src, base = u * unit_kept * item, u * unit * row_bytes
        if item == 1:
            for k, c in enumerate(at):
                out[base + c] = kept[src + k]
        else:
            for k, c in enumerate(at):
                out[base + c * item:base + (c + 1) * item] = kept[src + k * item:src + (k + 1) * item]
    return bytes(out[(r0 - a0) * row_bytes:(r1 - a0) * row_bytes])


def _not_two_of_four(bitmask: Part, row: int, unit: int, found: int, want: int) -> FormatError:
    if unit == 1:
        return FormatError(f"row {row:,} of tensor {bitmask.name!r} marks {found:,} kept values, not {want:,} "
                           "(two of each four)", expected=want, found=found)
    return FormatError(f"rows {row:,} and {row + 1:,} of tensor {bitmask.name!r} mark {found:,} kept values, not {want:,} "
                       "(two of each four of the flattened weight, whose fours straddle these rows)",
                       expected=want, found=found)


def dequant(t: Logical, read, r0: int, r1: int) -> array:
    if t.scheme.params.get("codes") == "fp8-scaled":
        codes = t.parts["codes"]
        inner = Logical(t.name, t.shape, replace(t.scheme, layout="fp8-scaled"),
                        {**t.parts, "codes": Part(codes.name, codes.dtype, t.shape)})

        def dense(name: str, row_start: int, row_count: int) -> bytes:
            # the codes read as their dense rows; the scale and zero point rows as stored
            if name == codes.name:
                return dense_codes(t, read, row_start, row_start + row_count)
            return read(name, row_start, row_count)
        return _fp8_scaled(inner, dense, r0, r1)
    return array("f", _values(t.parts["codes"], dense_codes(t, read, r0, r1)))


def cells(t: Logical, read, rows: list[int], cols: list[int]):
    """Cell decoder (cells.py) of a heatmap lattice: the mask and kept values of each unit of
    `span` rows the lattice touches read whole (the unit check needs every bit), but only the
    cells decoded: column c of a unit's row is kept value (set bits of the unit's rows before it +
    popcount(the row's mask before c)) of the unit, found from running counts of the mask bytes,
    not by scattering the row; over codes, that code's (q - z) * s as the fp8-scaled row decoder
    computes it."""
    values, bitmask = t.parts["codes"], t.parts["bitmask"]
    width_cols = t.shape[1]
    half, width, unit = width_cols // 2, -(-width_cols // 8), span(width_cols)
    item = max(1, int(lookup(values.dtype).bits) // 8)
    quant = t.scheme.params.get("codes") == "fp8-scaled"
    # the stored rows of the units the lattice touches: a pair's both rows for cols = 4k + 2
    stored = sorted({r - r % unit + i for r in rows for i in range(unit)})
    asks = [(bitmask.name, stored, 0, width), (values.name, stored, 0, half)]
    scale, zp = t.parts.get("weight_scale"), t.parts.get("weight_zero_point")
    strategy = t.scheme.strategy if quant else None
    if quant and strategy != "tensor":      # the scale (and zero point) rows of these rows
        bm = t.scheme.block[0] if strategy == "block" else 1
        srows = sorted({r // bm for r in rows})
        per = scale.shape[1] if len(scale.shape) > 1 else 1
        asks += [(p.name, srows, 0, per) for p in (scale, zp) if p is not None]
    got = yield asks
    at_stored = {r: i for i, r in enumerate(stored)}
    masks, kept = got[0], got[1]
    tail = width_cols % 8           # bits past the last column in the last byte are not columns
    last = (1 << tail) - 1 if tail else 0xFF
    running, before = {}, {}        # per stored row: popcounts before each mask byte; kept before the row
    for u in range(0, len(stored), unit):
        found = 0
        for r in stored[u:u + unit]:
            m = masks[u + r - stored[u]]
            counts = list(accumulate(m[:-1].translate(_POPCOUNT), initial=0)) if width > 1 else [0]
            running[r], before[r] = counts, found
            found += counts[-1] + _POPCOUNT[m[-1] & last]
        if found != unit * half:
            raise _not_two_of_four(bitmask, stored[u], unit, found, unit * half)
    zero = bytes(item)
    out: list = []
    for r in rows:
        m, counts, first, base = masks[at_stored[r]], running[r], before[r], r - r % unit
        unit_rows = [kept[at_stored[base + i]] for i in range(unit)]    # the unit's rows of compressed
        picked = []
        for c in cols:
            j, b = divmod(c, 8)
            byte = m[j]
            if byte >> b & 1:
                k, at = divmod(first + counts[j] + _POPCOUNT[byte & ((1 << b) - 1)], half)
                picked.append(unit_rows[k][at * item:(at + 1) * item])
            else:
                picked.append(zero)
        out += lookup(values.dtype).decode(b"".join(picked))
    if not quant:
        return out
    n = len(cols)
    # element (row i, column c) takes scale s[at[i] + c // gs]: its row's (block row's) scales
    if strategy == "tensor":
        one = scale.shape[0] if scale.shape else 1
        s = _rows(read, scale, 0, one)
        z = _rows(read, zp, 0, one) if zp is not None else None
        at, gs = [0] * len(rows), width_cols
    else:
        s = [v for b in got[2] for v in _values(scale, b)]
        z = [v for b in got[3] for v in _values(zp, b)] if zp is not None else None
        where = {sr: k * per for k, sr in enumerate(srows)}
        at = [where[r // bm] for r in rows]
        gs = t.scheme.group_size if strategy == "group" else t.scheme.block[1] if strategy == "block" else width_cols
    products = []
    for i in range(len(rows)):
        q, base = out[i * n:(i + 1) * n], at[i]
        if z is None:
            products += [qc * s[base + c // gs] for qc, c in zip(q, cols)]
        else:
            products += [(qc - z[base + c // gs]) * s[base + c // gs] for qc, c in zip(q, cols)]
    # as the row decoder: each product rounded to float32, then to a BF16/F16 scale's dtype
    return round_to(scale.dtype, products) if scale.dtype in ("BF16", "F16") else list(array("f", products))


BUILDERS = {"sparse-24": build, "marlin-24": marlin24}
DECODERS = {"sparse-24": dequant}
CELLS = {"sparse-24": cells}
