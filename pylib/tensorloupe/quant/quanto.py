"""optimum-quanto weights in safetensors (its state_dict saved with safetensors' save_file, as its
README says; transformers' QuantoConfig writes config.json quantization_config quant_method "quanto").

Reference: optimum-quanto 0.2.7 `tensor/qbytes.py` and `tensor/qbits.py` (the Dequantizer
forwards), `tensor/packed.py` (pack_weights), `tensor/grouped.py` (group / ungroup):
- qint8: `<w>._data` I8, `<w>._scale` [rows, 1]: w = scale * data (in the scale's dtype).
- qfloat8: `<w>._data` F8_E4M3 / F8_E5M2: w = scale * data.to(scale dtype).
- qint4 / qint2: `<w>._data._data` U8 holds the unsigned codes packed PLANAR along dim 0: packed
  row r, bits [k*b, (k+1)*b) is code row k*R + r, R = ceil(rows / (8/b)); `<w>._shift` is a float
  (the zero point times the scale): w = scale * q - shift, each op in the scale's dtype.
  Grouped weights (axis 0, group_size g) are stored as [rows*cols/g, g] and `ungroup` is a plain
  reshape; the original [rows, cols] is not in the file, so the logical tensor keeps the stored
  (grouped) shape and says so. Its values are in the weight's own row-major order.
"""

from __future__ import annotations

from array import array

from ..dtypes import lookup
from .records import Logical, Scheme
from .rounding import round_to

# the `weights` value of transformers' QuantoConfig -> bits of a packed code
PACKED_BITS = {"int4": 4, "qint4": 4, "int2": 2, "qint2": 2}
SCALE_DTYPES = ("F32", "F16", "BF16")
DATA_DTYPES = {"I8": "qint8", "F8_E4M3": "qfloat8_e4m3fn", "F8_E5M2": "qfloat8_e5m2"}


def build(name: str, mine: dict, config: dict, source: str) -> Logical:
    data, scale, shift = mine["codes"], mine["_scale"], mine.get("_shift")
    weights = str(config.get("weights") or "")
    packed_codes = data.name.endswith("._data._data")
    bits = PACKED_BITS.get(weights, 0) if packed_codes else 8
    qtype = f"qint{bits}" if packed_codes else DATA_DTYPES.get(data.dtype, data.dtype)
    scheme = Scheme("quanto", "optimum-quanto", bits, strategy=qtype, symmetric=shift is None,
                    facts={"qtype": f"{source} weights" if packed_codes else f"{data.name} dtype {data.dtype}",
                           "layout": "optimum-quanto ._data / ._scale / ._shift",
                           "shape": "as stored: quanto keeps a grouped weight as [rows*cols/group, group]"})
    shape = tuple(data.shape)

    def packed(why: str) -> Logical:
        return Logical(name, shape, scheme, mine, f"packed, not dequantised: {why}")

    if scale.dtype not in SCALE_DTYPES or (shift is not None and shift.dtype != scale.dtype):
        return packed(f"{scale.dtype} _scale with {shift.dtype if shift else 'no'} _shift")
    if len(shape) != 2 or len(scale.shape) != 2 or scale.shape[1] != 1:
        return packed(f"_data {shape} with _scale {tuple(scale.shape)} (only per-row scales)")
    rows = scale.shape[0]
    if not packed_codes:
        if data.dtype not in DATA_DTYPES or shift is not None or rows != shape[0]:
            return packed(f"{data.dtype} _data {shape} with _scale {tuple(scale.shape)}")
        return Logical(name, shape, scheme, mine)
    if bits == 0:
        return packed(f"{source} weights {weights!r} does not say the bits of the packed ._data._data")
    per = 8 // bits
    if data.dtype != "U8" or shape[0] != -(-rows // per) or shift is None or tuple(shift.shape) != (rows, 1):
        return packed(f"U8 ._data._data [{-(-rows // per)}, ...] and _shift [{rows}, 1] expected for "
                      f"{rows} rows of {bits} bits, found {data.dtype} {shape}")
    return Logical(name, (rows, shape[1]), scheme, mine)


def describe(scheme: Scheme) -> str:
    return f"optimum-quanto {scheme.strategy}, per-row scale" + ("" if scheme.symmetric else " and shift")


def decode(t: Logical, read, r0: int, r1: int) -> array:
    data, scale = t.parts["codes"], t.parts["_scale"]
    dt = scale.dtype
    s = lookup(dt).decode(read(scale.name, r0, r1 - r0))
    cols = t.shape[1]
    out: list = []
    if t.scheme.bits == 8:
        q = lookup(data.dtype).decode(read(data.name, r0, r1 - r0))
        for i in range(r1 - r0):
            si = s[i]
            out += round_to(dt, [si * v for v in q[i * cols:(i + 1) * cols]])
        return array("f", out)
    bits = t.scheme.bits
    stored = data.shape[0]
    z = lookup(dt).decode(read(t.parts["_shift"].name, r0, r1 - r0))
    mask = (1 << bits) - 1
    r = r0
    while r < r1:
        k, p = divmod(r, stored)       # planar: code row k*R + p is bits k*b of packed row p
        end = min(r1, (k + 1) * stored)
        table = bytes(((b >> (k * bits)) & mask) for b in range(256))
        rows = read(data.name, p, end - r).translate(table)
        for i in range(end - r):
            si, zi = s[r - r0 + i], z[r - r0 + i]
            q = rows[i * cols:(i + 1) * cols]
            out += round_to(dt, [v - zi for v in round_to(dt, [si * c for c in q])])
        r = end
    return array("f", out)
