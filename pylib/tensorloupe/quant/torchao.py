"""torchao tensor subclasses (torch.save of a `quantize_`d model): the logical weight from the
subclass's inner tensors and attributes, as formats/pytorch/subclasses.py finds them.

Reference: torchao 0.18 `quantization/quantize_/workflows/int8/int8_tensor.py` (Int8Tensor),
`.../intx/intx_unpacked_to_int8_tensor.py` (IntxUnpackedToInt8Tensor): `dequantize_affine`
(quant_primitives.py _dequantize_affine_no_dtype_check): d = qdata.to(out) - zero_point.to(out);
d * scale (torch's type promotion of out and the scale's dtype), then .to(out).
`.../float8/float8_tensor.py` (Float8Tensor): `_dequantize_affine_float8`:
(qdata.to(float32) * scale).to(out). `block_size` [b0, b1]: one scale (and zero point) per
b0 x b1 block, the scale tensor [rows/b0, cols/b1]. `out` is the subclass's dtype.
"""

from __future__ import annotations

import math
from array import array

from ..dtypes import lookup
from .records import Logical, Scheme
from .rounding import round_to

# class name (its last component; the module must be torchao's) -> its kind
CLASSES = {"Int8Tensor": "affine", "IntxUnpackedToInt8Tensor": "affine", "Float8Tensor": "float8"}
CODES = {"affine": ("I8",), "float8": ("F8_E4M3", "F8_E5M2")}
FLOATS = ("F32", "F16", "BF16")
TORCH_FLOATS = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def kind_of(subclass: str) -> str | None:
    module, _, name = subclass.rpartition(".")
    return CLASSES.get(name) if module.split(".")[0] == "torchao" else None


def _promoted(a: str, b: str) -> str:
    return a if a == b else "F32"     # torch: f16 with bf16, or either with f32, gives f32


def build(name: str, shape: tuple, subclass: str, attributes: dict, out_dtype: str, mine: dict) -> Logical:
    """mine: "codes" (qdata), "scale" and maybe "zero_point" Parts."""
    kind = kind_of(subclass)
    block = attributes.get("block_size")
    scheme = Scheme("torchao", subclass.rpartition(".")[2], 8, strategy=kind,
                    block=tuple(block) if isinstance(block, (list, tuple)) else None,
                    symmetric="zero_point" not in mine,
                    facts={"layout": f"the pickle's {subclass} state", "block": "its block_size attribute"})

    def packed(why: str) -> Logical:
        return Logical(name, shape, scheme, mine, f"not read: {subclass} {why}")

    codes, scale, zp = mine.get("codes"), mine.get("scale"), mine.get("zero_point")
    if kind is None:
        return packed("is a tensor subclass whose layout tensorloupe does not know")
    if codes is None or scale is None or (kind == "float8" and zp is not None):
        return packed(f"without the inner tensors its layout has (found {', '.join(sorted(mine)) or 'none'})")
    if out_dtype not in FLOATS or scale.dtype not in FLOATS or codes.dtype not in CODES[kind]:
        return packed(f"with {codes.dtype} qdata, {scale.dtype} scale and output dtype {out_dtype}")
    if len(shape) != 2 or tuple(codes.shape) != tuple(shape) or not (
            isinstance(block, (list, tuple)) and len(block) == 2 and all(type(b) is int and b > 0 for b in block)):
        return packed(f"of shape {shape} with qdata {tuple(codes.shape)} and block_size {block!r}")
    rows, cols = shape
    if rows % block[0] or cols % block[1]:
        return packed(f"block_size {list(block)} does not divide its shape {list(shape)}")
    grid = (rows // block[0], cols // block[1])
    for part in (scale, zp):
        if part is not None and (math.prod(part.shape) != math.prod(grid) or part.shape[:1] != grid[:1]):
            return packed(f"{part.name} {tuple(part.shape)} is not one value per block {grid}")
    if zp is not None and zp.dtype not in ("I8", "I32", "I64") + FLOATS:
        return packed(f"zero_point dtype {zp.dtype}")
    scheme.facts["dtype"] = f"its dtype {out_dtype}"
    scheme.method = f"torchao {scheme.method}"
    scheme.dtype = out_dtype
    return Logical(name, shape, scheme, mine)


def describe(scheme: Scheme) -> str:
    b0, b1 = scheme.block
    zero = "" if scheme.symmetric else " and zero point"
    return f"{scheme.method} ({'float8' if scheme.strategy == 'float8' else 'int8'} codes, scale{zero} per {b0}x{b1} block)"


def decode(t: Logical, read, r0: int, r1: int) -> array:
    codes, scale, zp = t.parts["codes"], t.parts["scale"], t.parts.get("zero_point")
    out_dtype = t.scheme.dtype
    b0, b1 = t.scheme.block
    cols = t.shape[1]
    per = cols // b1
    s0, s1 = r0 // b0, (r1 - 1) // b0 + 1
    q = lookup(codes.dtype).decode(read(codes.name, r0, r1 - r0))
    s = lookup(scale.dtype).decode(read(scale.name, s0, s1 - s0))
    z = lookup(zp.dtype).decode(read(zp.name, s0, s1 - s0)) if zp is not None else None
    float8 = t.scheme.strategy == "float8"
    product = "F32" if float8 else _promoted(out_dtype, scale.dtype)
    out: list = []
    for i in range(r1 - r0):
        at = ((r0 + i) // b0 - s0) * per
        for g in range(per):
            seg = q[i * cols + g * b1:i * cols + (g + 1) * b1]
            if z is not None:     # integer codes and zero points: the difference is exact
                seg = round_to(out_dtype, [v - z[at + g] for v in seg])
            sg = s[at + g]
            out += round_to(product, [v * sg for v in seg])
    return array("f", round_to(out_dtype, out) if product != out_dtype else out)
