"""bitsandbytes weights as transformers' save_pretrained writes them: 4-bit NF4 / FP4
(`load_in_4bit`, with or without double quantisation) and LLM.int8 (`load_in_8bit`).

4-bit (bitsandbytes functional.py QuantState.as_dict(packed=True), dequantize_4bit; the CPU kernel
and backends/default/ops.py _dequantize_4bit_compute): the weight flattened row-major, two codes a
byte, HIGH nibble first, stored as U8 `weight` [(n + 1) // 2, 1]; one absmax per `blocksize`
codes. value = CODE[q] * absmax[i // blocksize] in float32, then cast to the quant state's dtype.
The CODE table is the one named by quant_type (bnb ignores the stored quant_map when it
dequantises). Nested: absmax stored U8, absmax[k] = f32(nested_quant_map[a[k]] *
nested_absmax[k // nested_blocksize]) + nested_offset, in float32.
The quant state's other facts are JSON in a U8 tensor (`weight.quant_state.bitsandbytes__nf4`):
data, bounded and checked key by key.

int8 (bitsandbytes _ops.py int8_vectorwise_dequant): `weight` I8 [out, in], `SCB` F32 [out] beside
the weight (`<module>.SCB`, not `<module>.weight.SCB`), `weight_format` U8 0 ("row");
W = f32(f32(q * SCB) * f32(7.874015718698502e-3)).
"""

from __future__ import annotations

import json
import math
import struct
from array import array

from .decode import _in_dtype_of, _rows
from .groups import Logical, Scheme

QUANT_STATE = "weight.quant_state.bitsandbytes__"
MAX_QUANT_STATE_BYTES = 4096       # a few hundred bytes of JSON in practice
BLOCKSIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)   # dequantize_4bit's valid block sizes
OUT_DTYPES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


# functional.py get_4bit_type: NF4 listed as float32 literals; FP4 in bit-pattern order, divided
# by its largest magnitude (12) in float32.
CODES = {
    "nf4": tuple(_f32(v) for v in (
        -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
        -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
        0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
        0.7229568362236023, 1.0)),
    "fp4": tuple(_f32(v / 12.0) for v in (0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0,
                                          -0.0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0)),
}
INT8_RECIPROCAL = _f32(7.874015718698502e-3)   # 1/127 as _ops.py writes it, a float32 operand


def _packed(name, shape, scheme, mine, why: str) -> Logical:
    return Logical(name, shape, scheme, mine, f"packed, not dequantised: {why}")


def quant_state(raw: list, part_name: str) -> dict:
    """The JSON object a quant_state tensor holds (its U8 values, at most MAX_QUANT_STATE_BYTES:
    checked on its shape before it is read), or a ValueError saying why not."""
    value = json.loads(bytes(int(b) for b in raw).decode("utf-8"))
    if not isinstance(value, dict):
        raise ValueError(f"{part_name} is not a JSON object")
    return value


def build_4bit(name: str, mine: dict, config: dict, source: str, read_small) -> Logical:
    codes = mine["codes"]
    states = [s for s in ("nf4", "fp4") if QUANT_STATE + s in mine]
    scheme = Scheme("bnb-4bit", "bitsandbytes", 4, facts={"method": f"{source} quant_method"})
    shape = tuple(codes.shape)
    if len(states) != 1:
        return _packed(name, shape, scheme, mine, f"{len(states):,} quant_state tensors beside {codes.name!r}")
    qs_part = mine[QUANT_STATE + states[0]]
    if read_small is None:
        return _packed(name, shape, scheme, mine, "the quant_state was not read")
    if qs_part.dtype != "U8" or len(qs_part.shape) != 1 or qs_part.shape[0] > MAX_QUANT_STATE_BYTES:
        return _packed(name, shape, scheme, mine, f"quant_state is {qs_part.dtype} {qs_part.shape}, not U8 [n] "
                       f"of at most {MAX_QUANT_STATE_BYTES:,} bytes")
    try:
        qs = quant_state(read_small(qs_part.name), qs_part.name)
    except (ValueError, UnicodeError, RecursionError) as e:
        return _packed(name, shape, scheme, mine, f"quant_state is not readable: {e}")
    qtype, bs, dtype, logical = qs.get("quant_type"), qs.get("blocksize"), qs.get("dtype"), qs.get("shape")
    scheme.strategy, scheme.group_size = qtype if isinstance(qtype, str) else None, bs if isinstance(bs, int) else None
    scheme.symmetric = True
    scheme.facts.update({k: f"{qs_part.name} {k}" for k in ("quant_type", "blocksize", "dtype", "shape")})
    if qtype != states[0] or qtype not in CODES:
        return _packed(name, shape, scheme, mine, f"quant_type {qtype!r} in {qs_part.name!r}")
    if bs not in BLOCKSIZES or dtype not in OUT_DTYPES:
        return _packed(name, shape, scheme, mine, f"blocksize {bs!r}, dtype {dtype!r}")
    if not (isinstance(logical, list) and logical and all(type(d) is int and d > 0 for d in logical)):
        return _packed(name, shape, scheme, mine, f"quant_state shape {logical!r}")
    n = math.prod(logical)
    blocks = -(-n // bs)
    if codes.dtype != "U8" or math.prod(shape) != (n + 1) // 2:
        return _packed(name, shape, scheme, mine, f"{codes.dtype} {shape} does not hold {n:,} 4-bit codes "
                       "as U8 (bnb_4bit_quant_storage other than uint8 is not read)")
    absmax = mine["weight.absmax"]
    nested = "nested_absmax" in qs or "weight.nested_absmax" in mine
    if nested:
        nbs, ndtype, offset = qs.get("nested_blocksize"), qs.get("nested_dtype"), qs.get("nested_offset")
        nabs, nmap = mine.get("weight.nested_absmax"), mine.get("weight.nested_quant_map")
        if nabs is None or nmap is None or not isinstance(nbs, int) or nbs <= 0 or ndtype != "float32" \
                or not isinstance(offset, (int, float)) or isinstance(offset, bool) or not abs(offset) < 3e38:
            return _packed(name, shape, scheme, mine, f"double quantisation with nested_blocksize {nbs!r}, "
                           f"nested_dtype {ndtype!r}, nested_offset {offset!r}")
        if absmax.dtype != "U8" or tuple(absmax.shape) != (blocks,) or nabs.dtype != "F32" \
                or tuple(nabs.shape) != (-(-blocks // nbs),) or nmap.dtype != "F32" or tuple(nmap.shape) != (256,):
            return _packed(name, shape, scheme, mine, f"absmax {absmax.dtype} {absmax.shape}, nested_absmax "
                           f"{nabs.dtype} {nabs.shape}, nested_quant_map {nmap.dtype} {nmap.shape} are not "
                           f"U8 [{blocks}], F32 [{-(-blocks // nbs)}], F32 [256]")
        scheme.block = (nbs,)
        scheme.facts["offset"] = f"{qs_part.name} nested_offset"
        scheme.params["offset"] = _f32(float(offset))
    elif absmax.dtype != "F32" or tuple(absmax.shape) != (blocks,):
        return _packed(name, shape, scheme, mine, f"absmax {absmax.dtype} {absmax.shape} is not F32 [{blocks}]")
    scheme.params["dtype"] = OUT_DTYPES[dtype]
    scheme.params["described"] = (f"bitsandbytes {qtype.upper()}, block {bs}"
                                  + (f", double-quantised (absmax U8, blocks of {scheme.block[0]})" if nested else "")
                                  + ("" if dtype == "float32" else f", {dtype}"))
    return Logical(name, tuple(logical), scheme, mine, part_rows={codes.name: math.prod(shape)})


def build_int8(name: str, mine: dict, config: dict, source: str, read_small) -> Logical:
    codes, scb = mine["codes"], mine["SCB"]
    scheme = Scheme("bnb-int8", "bitsandbytes LLM.int8", 8, strategy="channel",
                    facts={"method": f"{source} quant_method", "scale": f"{scb.name} (absmax per row / 127)"},
                    params={"described": "bitsandbytes LLM.int8 (int8 per row, SCB / 127)"})
    shape = tuple(codes.shape)
    if codes.dtype != "I8" or len(shape) != 2 or scb.dtype != "F32" or tuple(scb.shape) != shape[:1]:
        return _packed(name, shape, scheme, mine, f"weight {codes.dtype} {shape} with SCB {scb.dtype} "
                       f"{scb.shape} is not I8 [out, in] with F32 [out]")
    fmt = mine.get("weight_format")
    if fmt is not None:
        value = read_small(fmt.name) if read_small is not None and math.prod(fmt.shape) == 1 else None
        if value != [0]:
            return _packed(name, shape, scheme, mine, f"weight_format {value!r} (only 0, 'row', is read)")
    return Logical(name, shape, scheme, mine)


def _absmax(t: Logical, read, k0: int, k1: int) -> list:
    absmax = t.parts["weight.absmax"]
    if t.scheme.block is None:
        return _rows(read, absmax, k0, k1)
    nbs = t.scheme.block[0]
    a = _rows(read, absmax, k0, k1)
    n0 = k0 // nbs
    nabs = _rows(read, t.parts["weight.nested_absmax"], n0, (k1 - 1) // nbs + 1)
    nmap = array("f", _rows(read, t.parts["weight.nested_quant_map"], 0, 256))
    scaled = array("f", (nmap[int(a[i])] * nabs[(k0 + i) // nbs - n0] for i in range(k1 - k0)))
    offset = t.scheme.params["offset"]
    return array("f", (v + offset for v in scaled))


def dequant_4bit(t: Logical, read, r0: int, r1: int) -> array:
    cols = t.rows_cols[1]
    e0, e1 = r0 * cols, r1 * cols
    out = array("f")
    if e1 == e0:
        return out
    bs = t.scheme.group_size
    b0 = e0 // 2
    raw = read(t.parts["codes"].name, b0, (e1 + 1) // 2 - b0)
    k0 = e0 // bs
    scale = _absmax(t, read, k0, (e1 - 1) // bs + 1)
    code = CODES[t.scheme.strategy]
    pairs = [(code[b >> 4], code[b & 15]) for b in range(256)]   # high nibble: the even element
    q = [v for b in raw for v in pairs[b]][e0 - 2 * b0:e0 - 2 * b0 + e1 - e0]
    out.extend([q[i] * scale[(e0 + i) // bs - k0] for i in range(e1 - e0)])
    return _in_dtype_of(out, t.scheme.params["dtype"])


def dequant_int8(t: Logical, read, r0: int, r1: int) -> array:
    cols = t.shape[1]
    q = _rows(read, t.parts["codes"], r0, r1)
    scb = _rows(read, t.parts["SCB"], r0, r1)
    once = array("f", (q[i] * scb[i // cols] for i in range(len(q))))
    return array("f", (v * INT8_RECIPROCAL for v in once))


BUILDERS = {"bnb-4bit": build_4bit, "bnb-int8": build_int8}
DECODERS = {"bnb-4bit": dequant_4bit, "bnb-int8": dequant_int8}
