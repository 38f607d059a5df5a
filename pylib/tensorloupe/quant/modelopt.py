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
    if config.get("quant_algo") != ALGO:
        reason = f"quant_algo {config.get('quant_algo')!r} (only {ALGO!r} is read)"
    elif len(packed.shape) != 2 or packed.dtype != "U8":
        reason = f"weight is {packed.dtype} {packed.shape}, not U8 [rows, cols/2]"
    elif gs != 16 or 2 * half % gs or tuple(scale.shape) != (rows, 2 * half // gs):
        # a swizzled (TensorRT-LLM) scale is 1-D U8; a padded K would need the unpadded width
        reason = f"weight_scale {scale.dtype} {scale.shape} is not [{rows}, {2 * half // 16}] (groups of {gs!r})"
    elif scale.dtype not in ("F8_E4M3",) + SCALE_DTYPES or scale2.dtype not in SCALE_DTYPES \
            or math.prod(scale2.shape) != 1:
        reason = f"{scale.dtype} weight_scale with {scale2.dtype} weight_scale_2 of shape {scale2.shape}"
    return Logical(name, (rows, 2 * half), scheme, mine,
                   None if reason is None else f"packed, not dequantised: {reason}")


def dequant_nvfp4(t: Logical, read, r0: int, r1: int) -> array:
    packed, scale, scale2 = t.parts["codes"], t.parts["weight_scale"], t.parts["weight_scale_2"]
    cols, gs, ns = t.shape[1], t.scheme.group_size, scale.shape[1]
    (g,) = _rows(read, scale2, 0, scale2.shape[0] if scale2.shape else 1)
    per_block = array("f", (s * g for s in _rows(read, scale, r0, r1)))
    return e2m1_groups(read(packed.name, r0, r1 - r0), per_block, r1 - r0, cols, gs, ns)


BUILDERS = {"modelopt-nvfp4": build_nvfp4}
DECODERS = {"modelopt-nvfp4": dequant_nvfp4}
