"""NVFP4 as NVIDIA ModelOpt exports it (its unified HF export: config.json quantization_config
{"quant_method": "modelopt", "quant_algo": "NVFP4", config_groups.*.weights.group_size 16}, and
hf_quant_config.json beside it).

modelopt/torch/quantization/qtensor/nvfp4_tensor.py NVFP4QTensor.dequantize: `weight` U8
[N, K/2], low nibble the even element, E2M1; `weight_scale` F8_E4M3 [N, K/16]; `weight_scale_2`
F32, one per tensor, which MULTIPLIES (compressed-tensors' global scale divides):
per_block = f32(f32(weight_scale) * weight_scale_2); W = f32(e2m1[q] * per_block). The values are
shown in float32, the dtype of that arithmetic (dequantize's final cast is to the caller's dtype).
`input_scale` is the activations' and is kept as a part.
"""

from __future__ import annotations

import math
from array import array

from ..dtypes import lookup
from .decode import _rows, e2m1_groups
from .groups import SCALE_DTYPES, Logical, Scheme, _ct_weights

ALGO = "NVFP4"


def build_nvfp4(name: str, mine: dict, config: dict, source: str, read_small) -> Logical:
    packed, scale, scale2 = mine["codes"], mine["weight_scale"], mine["weight_scale_2"]
    gs = _ct_weights(config).get("group_size") or config.get("group_size") or 16
    scheme = Scheme("modelopt-nvfp4", "ModelOpt NVFP4", 4, group_size=gs, strategy="tensor_group",
                    facts={"method": f"{source} quant_method", "algo": f"{source} quant_algo",
                           "group_size": f"{source} config_groups.*.weights"},
                    params={"described": f"ModelOpt NVFP4 (E2M1, F8 scale per {gs}, times weight_scale_2)"})
    rows, half = (tuple(packed.shape) + (0, 0))[:2]
    reason = None
    layout = scale_layout(rows, 2 * half // 16, tuple(scale.shape)) if gs == 16 and not 2 * half % gs else None
    if layout == SWIZZLED:
        scheme.params["described"] += ", scales in cuBLAS 128x4 blocks"
        scheme.facts["scale layout"] = "weight_scale shape (cuBLAS block-scaling layout, swizzled)"
    scheme.params["scale layout"] = layout
    if config.get("quant_algo") != ALGO:
        reason = f"quant_algo {config.get('quant_algo')!r} (only {ALGO!r} is read)"
    elif len(packed.shape) != 2 or packed.dtype != "U8":
        reason = f"weight is {packed.dtype} {packed.shape}, not U8 [rows, cols/2]"
    elif layout is None:
        reason = (f"weight_scale {scale.dtype} {scale.shape} is not [{rows}, {2 * half // 16}] (groups of {gs!r}), "
                  "padded, nor swizzled in cuBLAS 128x4 blocks")
    elif scale.dtype not in ("F8_E4M3",) + SCALE_DTYPES or scale2.dtype not in SCALE_DTYPES \
            or math.prod(scale2.shape) != 1:
        reason = f"{scale.dtype} weight_scale with {scale2.dtype} weight_scale_2 of shape {scale2.shape}"
    return Logical(name, (rows, 2 * half), scheme, mine,
                   None if reason is None else f"packed, not dequantised: {reason}")


def dequant_nvfp4(t: Logical, read, r0: int, r1: int) -> array:
    packed, scale, scale2 = t.parts["codes"], t.parts["weight_scale"], t.parts["weight_scale_2"]
    cols, gs, ns = t.shape[1], t.scheme.group_size, scale.shape[1]
    (g,) = _rows(read, scale2, 0, scale2.shape[0] if scale2.shape else 1)
    if t.scheme.params.get("scale layout") == SWIZZLED:
        scales, ns = unswizzled(read, scale, r0, r1, cols // gs), cols // gs
    else:
        scales = _rows(read, scale, r0, r1)
    per_block = array("f", (s * g for s in scales))
    return e2m1_groups(read(packed.name, r0, r1 - r0), per_block, r1 - r0, cols, gs, ns)


# Block scales as ModelOpt's export leaves them ([rows, groups]; pad_nvfp4_weights "row_col" pads
# the groups to a multiple of 16), or rearranged for cuBLAS (swizzle_nvfp4_scales, its _to_blocked,
# modelopt/torch/export/diffusers_utils.py; the cuBLAS "2-D block scaling factors layout"): the
# matrix padded to 128 x 4 tiles, tile (rb, cb) stored at (rb * tiles across + cb) * 512, its
# element (32 * a + b, c) at b * 16 + a * 4 + c. Where rows are a multiple of 128 and groups of
# 4 the two layouts have one shape, and the file's own (flat) layout is read.
FLAT, SWIZZLED = "flat", "swizzled"


def scale_layout(rows: int, groups: int, shape: tuple) -> str | None:
    """FLAT, SWIZZLED or None (neither) for a weight_scale of this shape."""
    wide = -(-groups // 16) * 16
    if shape in ((rows, groups), (rows, wide)):
        return FLAT
    if len(shape) == 2 and shape[0] == -(-rows // 128) * 128 and shape[1] % 4 == 0 \
            and groups <= shape[1] <= -(-wide // 4) * 4:
        return SWIZZLED
    return None


def unswizzled(read, scale, r0: int, r1: int, groups: int) -> list:
    """The scales of rows [r0, r1) ([r1 - r0, groups], row-major) from a swizzled weight_scale:
    the 128-row tiles that hold them are whole stored rows of it, read as such."""
    t0, t1 = r0 // 128, (r1 - 1) // 128 + 1
    raw = read(scale.name, 128 * t0, 128 * (t1 - t0))
    across = scale.shape[1] // 4
    picked = bytes(raw[((r // 128 - t0) * across + c // 4) * 512 + (r % 32) * 16 + (r % 128) // 32 * 4 + c % 4]
                   for r in range(r0, r1) for c in range(groups))
    return lookup(scale.dtype).decode(picked)


BUILDERS = {"modelopt-nvfp4": build_nvfp4}
DECODERS = {"modelopt-nvfp4": dequant_nvfp4}
