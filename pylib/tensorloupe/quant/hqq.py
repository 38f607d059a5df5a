"""HQQ (mobiusml/hqq) linears as HQQLinear.state_dict writes them for safetensors: `W_q` packed,
`scale`, `zero`, and the meta as small tensors (`nbits`, `group_size`, `axis`, `shape` I64 [2],
`packing` and `compute_dtype` as U8 strings, `view_as_float` U8), beside `<module>.bias`.

hqq/core/quantize.py Quantizer.quantize / dequantize and hqq/core/bitpack.py: the weight
[out, in] is reshaped to [numel / group_size, group_size] (axis 1: a group is a row of it) or
[group_size, numel / group_size] (axis 0: a group is a column); scale and zero are [R, 1] or
[1, C]. Packing is PLANAR along the reshaped rows: with k codes a word, reshaped row i is
plane i // step of packed row i % step (step = R / k; 3-bit pads R to a multiple of 10, ten
codes an int32), the first plane in the highest bits. W = ((q - zero) * scale) in compute_dtype,
each operation rounded to it (float16 or float32), then reshaped to `shape`.
"""

from __future__ import annotations

import math
from array import array

from .decode import _in_dtype_of, _rows
from .groups import Logical, Scheme

# packing name -> (bits, codes a stored element, stored dtype)
PACKINGS = {"8bit_u8": (8, 1, "U8"), "4bit_u8": (4, 2, "U8"), "2bit_u8": (2, 4, "U8"),
            "1bit_u8": (1, 8, "U8"), "3bit_32": (3, 10, "I32")}
COMPUTE = {"torch.float32": "F32", "torch.float16": "F16", "torch.bfloat16": "BF16"}
META = ("nbits", "group_size", "axis", "shape", "packing", "compute_dtype", "view_as_float", "quant_scale",
        "quant_zero")
MAX_META_VALUES = 64


def _text(values: list) -> str:
    return "".join(chr(int(v)) for v in values[:MAX_META_VALUES])


def build(name: str, mine: dict, config: dict, source: str, read_small) -> Logical:
    codes, scale, zero = mine["codes"], mine["scale"], mine["zero"]
    scheme = Scheme("hqq", "HQQ", 0, facts={"method": f"{source} quant_method"})
    shape = tuple(codes.shape)

    def packed(why: str) -> Logical:
        return Logical(name, shape, scheme, mine, f"packed, not dequantised: {why}")
    if read_small is None:
        return packed("HQQ's meta tensors were not read")
    if any(math.prod(mine[k].shape) > MAX_META_VALUES for k in META if k in mine):
        return packed("an HQQ meta tensor is larger than its meta can be")
    meta = {k: read_small(mine[k].name) for k in META if k in mine}
    scheme.facts.update({k: f"{mine[k].name}" for k in meta})
    packing = _text(meta["packing"])
    compute = _text(meta.get("compute_dtype", []))
    nbits, gs, axis = (meta[k][0] if len(meta[k]) == 1 else None for k in ("nbits", "group_size", "axis"))
    logical = tuple(int(d) for d in meta["shape"])
    if packing not in PACKINGS or PACKINGS[packing][0] != nbits:
        return packed(f"packing {packing!r} with nbits {nbits!r}")
    flags = {k: meta[k] for k in ("view_as_float", "quant_scale", "quant_zero") if k in meta}
    if compute not in COMPUTE or any(v != [0] for v in flags.values()):
        # a float view of W_q, or scale / zero quantised themselves: not read
        return packed(f"compute_dtype {compute!r}, " + ", ".join(f"{k} {v!r}" for k, v in flags.items()))
    bits, k, stored = PACKINGS[packing]
    n = math.prod(logical)
    if len(logical) != 2 or min(logical) <= 0 or not isinstance(gs, int) or gs <= 0 or n % gs or axis not in (0, 1):
        return packed(f"shape {logical}, group_size {gs!r}, axis {axis!r}")
    rows, cols = (n // gs, gs) if axis == 1 else (gs, n // gs)
    step = -(-rows // k)
    if codes.dtype != stored or shape != (step, cols) or (bits != 3 and rows % k):
        return packed(f"W_q {codes.dtype} {shape} is not {stored} {(step, cols)} for {packing} of {rows} x {cols}")
    want = (rows, 1) if axis == 1 else (1, cols)
    dtype = COMPUTE[compute]
    if tuple(scale.shape) != want or tuple(zero.shape) != want or {scale.dtype, zero.dtype} != {dtype}:
        return packed(f"scale {scale.dtype} {scale.shape} and zero {zero.dtype} {zero.shape} are not "
                      f"{dtype} {want}")
    scheme.bits, scheme.group_size, scheme.strategy = bits, gs, f"axis {axis}"
    scheme.symmetric = False
    scheme.params.update({"axis": axis, "reshaped": (rows, cols), "step": step, "k": k, "dtype": dtype,
                          "described": f"HQQ {bits}-bit, group {gs} along axis {axis}, {compute[6:]}"})
    return Logical(name, logical, scheme, mine)


def dequant(t: Logical, read, r0: int, r1: int) -> array:
    p = t.scheme.params
    rows, cols = p["reshaped"]
    step, k, bits, dtype = p["step"], p["k"], t.scheme.bits, p["dtype"]
    width = t.shape[1]
    e0, e1 = r0 * width, r1 * width
    if e1 == e0:
        return array("f")
    g0, g1 = e0 // cols, (e1 - 1) // cols + 1          # the reshaped rows these elements are in
    # their packed rows: one contiguous run, or (wrapping past a plane's end) every packed row
    s0, s1 = (g0 % step, (g1 - 1) % step + 1) if g1 - g0 <= step and g0 % step <= (g1 - 1) % step \
        else (0, step)
    packed = t.parts["codes"]
    words = _rows(read, packed, s0, s1)
    top = 32 - 2 if bits == 3 else 8                     # 3bit_32 uses bits 29..0
    mask = (1 << bits) - 1
    if p["axis"] == 1:
        s = _rows(read, t.parts["scale"], g0, g1)
        z = _rows(read, t.parts["zero"], g0, g1)
    else:
        s, z = _rows(read, t.parts["scale"], 0, 1), _rows(read, t.parts["zero"], 0, 1)
    q = []
    for g in range(g0, g1):
        base = (g % step - s0) * cols
        shift = top - bits * (g // step + 1) if k > 1 else 0
        q.extend([(words[base + c] >> shift) & mask for c in range(cols)])
    q = q[e0 - g0 * cols:e1 - g0 * cols]
    if p["axis"] == 1:
        at = [(e0 + i) // cols - g0 for i in range(e1 - e0)]
    else:
        at = [(e0 + i) % cols for i in range(e1 - e0)]
    # each operation rounded to the compute dtype, as torch does in it
    diff = _in_dtype_of(array("f", (q[i] - z[at[i]] for i in range(e1 - e0))), dtype)
    return _in_dtype_of(array("f", (diff[i] * s[at[i]] for i in range(e1 - e0))), dtype)


BUILDERS = {"hqq": build}
DECODERS = {"hqq": dequant}
