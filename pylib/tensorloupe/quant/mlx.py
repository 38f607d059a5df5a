"""MLX quantised weights (mlx-lm's safetensors): `<m>.weight` U32 codes + `<m>.scales` (+ `<m>.biases`).

config.json `quantization` (mlx-lm also copies it to `quantization_config`) holds `group_size`,
`bits`, `mode` and per-module overrides: `"<module path>": {group_size, bits[, mode]}` or false.
Reference: `mlx.core.quantize` / `mlx.core.dequantize` (mlx 0.32, its docstring's table of modes):
- affine: codes are a little-endian bit stream per row (3, 5, 6 bits cross 32-bit words), groups
  of `group_size` along the row, w = scales * q + biases, each operation rounded to the scales'
  dtype (MLX computes in the input type: checked on its CPU backend for f32, f16 and bf16).
- mxfp4 / nvfp4: E2M1 codes (low nibble first), E8M0 scale per 32 / E4M3 scale per 16, no bias.
- mxfp8: E4M3 codes, E8M0 scale per 32. The float modes return bfloat16.
"""

from __future__ import annotations

import math
from array import array
from operator import itemgetter
from typing import NamedTuple

from ..dtypes import lookup
from .records import Logical, Scheme
from .rounding import codes as bit_codes, round_to

AFFINE_SCALE_DTYPES = ("F32", "F16", "BF16")


class Mode(NamedTuple):
    bits: int
    group: int
    scale: str        # the scales' element type


# the float modes fix their bits and group size; affine takes the config's
MODES = {"mxfp4": Mode(4, 32, "F8_E8M0"), "nvfp4": Mode(4, 16, "F8_E4M3"), "mxfp8": Mode(8, 32, "F8_E8M0")}
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
E4M3 = tuple(lookup("F8_E4M3").decode(bytes(range(256))))


def is_mlx(config: dict) -> bool:
    """An mlx-lm `quantization` object: group_size and bits, and no other library's method."""
    return not (config.get("quant_method") or config.get("format")) \
        and isinstance(config.get("bits"), int) and isinstance(config.get("group_size"), int)


def build(name: str, mine: dict, config: dict, source: str) -> Logical | None:
    """The logical weight of `mine` (codes, scales, biases?), or None where the config says the
    module is not quantised (its `weight` is then an ordinary tensor)."""
    module = name[: -len(".weight")] if name.endswith(".weight") else name
    own = config.get(module)
    if own is False:
        return None
    said = f"{source} {module!r}" if isinstance(own, dict) else source
    cfg = {**config, **own} if isinstance(own, dict) else config
    mode = str(cfg.get("mode") or "affine")
    codes, scales, biases = mine["codes"], mine["scales"], mine.get("biases")
    fixed = MODES.get(mode)
    bits = fixed.bits if fixed else cfg.get("bits")
    gs = fixed.group if fixed else cfg.get("group_size")
    scheme = Scheme("mlx", f"MLX {mode}", bits if isinstance(bits, int) else 0,
                    group_size=gs if isinstance(gs, int) else None, strategy=mode,
                    symmetric=biases is None,
                    facts={"bits": f"{said} bits", "group_size": f"{said} group_size",
                           "mode": f"{said} mode" if "mode" in cfg else "MLX default (affine)"})
    shape = tuple(codes.shape)

    def packed(why: str) -> Logical:
        return Logical(name, shape, scheme, mine, f"packed, not dequantised: {why}")

    if mode != "affine" and fixed is None:
        return packed(f"MLX mode {mode!r}")
    if not isinstance(bits, int) or not 1 <= bits <= 8 or not isinstance(gs, int) or gs < 2 or gs % 8:
        return packed(f"MLX {mode} with bits {bits!r} and group_size {gs!r}")
    if codes.dtype != "U32" or not shape or shape[-1] * 32 % bits:
        return packed(f"weight {codes.dtype} {shape} is not U32 [..., columns * {bits} / 32]")
    cols = shape[-1] * 32 // bits
    want = shape[:-1] + (cols // gs,)
    if cols % gs or tuple(scales.shape) != want:
        return packed(f"scales {tuple(scales.shape)} is not {want} for {cols} columns in groups of {gs}")
    if fixed:
        if scales.dtype != "U8" or biases is not None or "global_scale" in mine:
            return packed(f"MLX {mode} with {scales.dtype} scales"
                          + (" and biases" if biases is not None else "")
                          + (" and a global_scale" if "global_scale" in mine else ""))
    elif biases is None or scales.dtype not in AFFINE_SCALE_DTYPES \
            or biases.dtype != scales.dtype or tuple(biases.shape) != want:
        return packed(f"MLX affine needs biases of the scales' shape {want} and dtype, found "
                      f"{scales.dtype} scales and {'no biases' if biases is None else biases.dtype}")
    rows = math.prod(shape[:-1])
    return Logical(name, shape[:-1] + (cols,), scheme, mine,
                   part_rows={p.name: rows for p in mine.values()})


def describe(scheme: Scheme) -> str:
    if scheme.strategy == "affine":
        return f"MLX affine {scheme.bits}-bit, group {scheme.group_size} (w = scales * q + biases)"
    scale = "E4M3" if scheme.strategy == "nvfp4" else "E8M0"
    return f"MLX {scheme.strategy} ({'E4M3' if scheme.bits == 8 else 'E2M1'}, {scale} scale per {scheme.group_size})"


def decode(t: Logical, read, r0: int, r1: int) -> array:
    """float values of logical rows [r0, r1): one C-level pass cuts every code out of the rows'
    words (rounding.codes), then each group maps its codes through a table of its 2**bits values
    (or computes its values directly where a table would be larger than the group)."""
    sch, cols = t.scheme, t.shape[-1]
    bits, gs, mode = sch.bits, sch.group_size, sch.strategy
    codes = bit_codes(read(t.parts["codes"].name, r0, r1 - r0), bits)
    scales = t.parts["scales"]
    fixed = MODES.get(mode)
    s = lookup(fixed.scale if fixed else scales.dtype).decode(read(scales.name, r0, r1 - r0))
    if fixed is None:
        b = lookup(scales.dtype).decode(read(t.parts["biases"].name, r0, r1 - r0))
    out: list = []
    size = 1 << bits
    table = size < gs
    for g in range(len(s)):
        group = codes[g * gs:(g + 1) * gs]
        domain = range(size) if table else group
        if fixed is None:
            sg, bg = s[g], b[g]
            values = round_to(scales.dtype, [p + bg for p in round_to(scales.dtype, [sg * q for q in domain])])
        elif bits == 4:
            values = [E2M1[q] * s[g] for q in domain]
        else:
            values = [E4M3[q] * s[g] for q in domain]
        out += itemgetter(*group)(values) if table else values
    if fixed is not None and mode == "mxfp8" and not all(-100 <= math.log2(v) <= 100 for v in s if v == v):
        out = round_to("BF16", out)     # products can leave bfloat16's range only near the extremes
    return array("f", out)
