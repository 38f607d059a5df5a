"""Grouping: stored tensor descriptors + quantisation config -> logical tensors.

Each fact of a scheme carries where it came from (`facts`), as the architecture summary does.
A layout we cannot decode exactly is returned with `reason` set ("packed, not dequantised: ..."),
never as floats.
"""

from __future__ import annotations

import math
from typing import Callable

from . import mlx, quanto
from .records import Logical, Part, Scheme
from .schemes import BLOCK_DEFAULT, LAYOUTS

# Layouts whose grouping lives in their own module: (name, parts, config, source) -> Logical, or
# None where the config says that module is not quantised.
BUILDERS = {"mlx": mlx.build, "quanto": quanto.build}

SCALE_DTYPES = ("F32", "BF16", "F16", "F64")
CODE_BITS = {"I8": 8, "U8": 8, "I16": 16, "I32": 32}


def _method(config: dict) -> str:
    return str(config.get("quant_method") or config.get("format") or ("mlx" if mlx.is_mlx(config) else ""))


def _ct_weights(config: dict) -> dict:
    # compressed-tensors: config_groups.<name>.weights; the first group applies to every target here.
    for grp in (config.get("config_groups") or {}).values():
        if isinstance(grp, dict) and isinstance(grp.get("weights"), dict):
            return grp["weights"]
    return {}


def group(descriptors, config: dict, source: str,
          read_small: Callable[[str], list] | None = None) -> list[Logical]:
    """descriptors: iterable of (name, dtype, shape). read_small(name) returns a small stored tensor's
    values (compressed-tensors' `weight_shape`); without it such layouts stay packed."""
    parts = {name: Part(name, dtype, tuple(shape)) for name, dtype, shape in descriptors}
    method = _method(config)
    fmt = str(config.get("format") or "")
    out: list[Logical] = []
    used: set[str] = set()
    sparsity = config.get("sparsity_config")
    said = {method, fmt, str(sparsity.get("format")) if isinstance(sparsity, dict) else "",
            f"{method} {config.get('quant_algo')}"}      # ModelOpt: the algorithm picks the row
    for layout in LAYOUTS:
        if said.isdisjoint(layout.methods):
            continue
        for name in list(parts):
            if name in used or not (name == layout.codes or name.endswith(layout.joiner + layout.codes)):
                continue
            stem = name[: len(name) - len(layout.codes)]
            found = {s: parts.get(stem + s) for s in layout.needs + layout.optional}
            if any(found[s] is None for s in layout.needs):
                continue
            mine = {"codes": parts[name], **{s: p for s, p in found.items() if p is not None}}
            logical = stem + layout.logical if layout.logical else stem[: -len(layout.joiner)]
            if layout.name in BUILDERS:
                made = BUILDERS[layout.name](logical, mine, config, source)
            else:
                made = _build(layout.name, logical, mine, config, source, read_small)
            if made is not None:
                used.update(p.name for p in mine.values())
                out.append(made)
    if "sparse-24-bitmask" in said:
        # compressed-tensors' sparse compressor takes only names ending in `.weight`: packed codes
        # (weight_packed) beside a 2:4 sparsity_config are stored dense, their zeros coded (sparse24.py)
        for made in out:
            if made.scheme is not None and made.scheme.layout != "sparse-24":
                made.scheme.facts.setdefault("sparsity", f"stored dense (not 2:4-compressed: {source} sparsity_config "
                                             "sparse-24-bitmask compresses only the `.weight` tensors of its targets)")
    return out


# Layouts whose builder lives in a module that imports this one (bnb.py, hqq.py, ...): registered
# by the package's __init__ ((layout, name, parts, config, source, read_small) -> Logical);
# mlx.py and quanto.py import only records.py and are in BUILDERS above.
REGISTERED: dict[str, Callable] = {}


def _build(layout, name, mine, config, source, read_small) -> Logical:
    codes = mine["codes"]
    if layout in REGISTERED:
        return REGISTERED[layout](name, mine, config, source, read_small)
    if layout == "mxfp4":
        return _mxfp4(name, mine, source)
    if layout == "nvfp4":
        return _nvfp4(name, mine, config, source)
    if layout in ("gptq", "awq"):
        return _gptq_awq(layout, name, mine, config, source)
    if layout == "fp8-block":
        block = tuple(config.get("weight_block_size") or BLOCK_DEFAULT)
        where = f"{source} weight_block_size" if "weight_block_size" in config else "default 128x128"
        scheme = Scheme(layout, "fp8", 8, block=block, strategy="block",
                        facts={"method": f"{source} quant_method", "block": where,
                               "scale": "weight_scale_inv (multiplies)"})
        scale = mine["weight_scale_inv"]
        want = tuple(math.ceil(d / b) for d, b in zip(codes.shape, block))
        reason = None if len(codes.shape) == 2 and scale.shape == want else \
            f"packed, not dequantised: weight_scale_inv shape {scale.shape} is not {want}"
        if config.get("scale_fmt") not in (None, "ue8m0") or (scale.dtype not in ("F32", "BF16", "F16", "F8_E8M0")):
            reason = f"packed, not dequantised: scale dtype {scale.dtype!r}"
        return Logical(name, codes.shape, scheme, mine, reason)
    if layout == "fp8-scaled":
        scale = mine["weight_scale"]
        rows, cols = (tuple(codes.shape) + (1, 1))[:2]
        n = math.prod(scale.shape)
        w = _ct_weights(config)
        group_size = w.get("group_size")
        strategy = "tensor" if n == 1 else "channel" if n == rows else None
        if strategy is None and isinstance(group_size, int) and group_size > 0 \
                and tuple(scale.shape) == (rows, math.ceil(cols / group_size)):
            strategy = "group"
        block = w.get("block_structure")
        if strategy is None and isinstance(block, list) and len(block) == 2 \
                and all(isinstance(b, int) and b > 0 for b in block) \
                and tuple(scale.shape) == (math.ceil(rows / block[0]), math.ceil(cols / block[1])):
            strategy, block = "block", tuple(block)
        else:
            block = None
        integer = codes.dtype in ("I8", "U8", "I16", "I32")
        method = "compressed-tensors int-quantized" if integer else "fp8"
        scheme = Scheme(layout, method, CODE_BITS.get(codes.dtype, 8), strategy=strategy, block=block,
                        group_size=group_size if strategy == "group" else None,
                        symmetric="weight_zero_point" not in mine,
                        facts={"method": f"{source} quant_method", "strategy": "weight_scale shape",
                               "codes": f"{codes.name} dtype {codes.dtype}"})
        reason = None
        if not (strategy and len(codes.shape) == 2):
            reason = f"packed, not dequantised: weight_scale shape {scale.shape} is not per tensor, row or group"
        zp = mine.get("weight_zero_point")
        if zp is not None and tuple(zp.shape) != tuple(scale.shape):
            reason = f"packed, not dequantised: weight_zero_point shape {zp.shape} is not weight_scale's {scale.shape}"
        if scale.dtype not in SCALE_DTYPES:
            reason = f"packed, not dequantised: weight_scale dtype {scale.dtype!r}"
        return Logical(name, codes.shape, scheme, mine, reason)
    # ct-pack
    w = _ct_weights(config)
    src = f"{source} config_groups.*.weights"
    bits = int(w.get("num_bits", 4))
    strategy = str(w.get("strategy", "group"))
    scheme = Scheme(layout, "compressed-tensors pack-quantized", bits, group_size=w.get("group_size"),
                    symmetric=bool(w.get("symmetric", True)), act_order="weight_g_idx" in mine,
                    strategy=strategy, facts={k: src for k in ("bits", "group_size", "symmetric", "strategy")})
    reason = None
    shape = codes.shape
    if read_small is None:
        reason = "packed, not dequantised: weight_shape not read"
    else:
        shape = tuple(int(v) for v in read_small(mine["weight_shape"].name))
        if len(shape) != 2 or shape[0] != codes.shape[0] or math.ceil(shape[1] * bits / 32) != codes.shape[1]:
            reason = f"packed, not dequantised: weight_shape {shape} does not match weight_packed {codes.shape}"
    if strategy not in ("channel", "group") or not 1 <= bits <= 8 or str(w.get("type", "int")) != "int":
        reason = f"packed, not dequantised: strategy {strategy!r}, {bits} bits, type {w.get('type')!r}"
    if not scheme.symmetric and "weight_zero_point" not in mine:
        reason = "packed, not dequantised: asymmetric without weight_zero_point"
    if reason is None:
        reason = _ct_pack_shapes(mine, shape, scheme)
    return Logical(name, shape, scheme, mine, reason)


def _gptq_awq(layout: str, name: str, mine: dict, config: dict, source: str) -> Logical:
    qweight, qzeros, scales = mine["codes"], mine["qzeros"], mine["scales"]
    bits = config.get("bits", config.get("w_bit", 4))
    gs = config.get("group_size", config.get("q_group_size", 128))
    fmt = str(config.get("checkpoint_format") or config.get("version") or ("gptq" if layout == "gptq" else "gemm")).lower()
    sym = config.get("sym", not config.get("zero_point", True))
    facts = {"method": f"{source} quant_method", "bits": f"{source} bits", "group_size": f"{source} group_size",
             "format": f"{source} {'checkpoint_format' if layout == 'gptq' else 'version'}"}
    scheme = Scheme(layout, layout.upper() if layout == "gptq" else "AWQ GEMM", bits if isinstance(bits, int) else 0,
                    group_size=gs if isinstance(gs, int) else None, symmetric=bool(sym),
                    act_order=bool(config.get("desc_act")) and "g_idx" in mine, strategy=fmt, facts=facts)
    shape = tuple(qweight.shape)
    def packed(why: str) -> Logical:
        return Logical(name, shape, scheme, mine, f"packed, not dequantised: {why}")
    if not isinstance(bits, int) or bits not in ((2, 3, 4, 8) if layout == "gptq" else (4,)):
        return packed(f"{bits!r}-bit {scheme.method}")
    if layout == "gptq" and fmt not in ("gptq", "gptq_v2", "gemm"):
        return packed(f"GPTQ checkpoint_format {fmt!r} (planar and other layouts are not read)")
    if layout == "awq" and fmt != "gemm":
        return packed(f"AWQ version {fmt!r} (only GEMM)")
    if len(shape) != 2 or qweight.dtype != "I32" or qzeros.dtype != "I32" or len(scales.shape) != 2:
        return packed(f"qweight {qweight.dtype} {shape}, qzeros {qzeros.dtype} {qzeros.shape}, "
                      f"scales {scales.shape}")
    if layout == "gptq":
        if shape[0] * 32 % bits:
            return packed(f"qweight has {shape[0]:,} rows, not a whole number of {bits}-bit inputs")
        ins, outs = shape[0] * 32 // bits, shape[1]
    else:
        ins, outs = shape[0], shape[1] * 8
    if not isinstance(gs, int) or gs == 0 or gs < -1:
        return packed(f"group_size {gs!r}")
    groups = 1 if gs == -1 else -(-ins // gs)
    zcols = -(-outs * bits // 32)
    if tuple(scales.shape) != (groups, outs) or tuple(qzeros.shape) != (groups, zcols):
        return packed(f"scales {scales.shape} and qzeros {qzeros.shape} are not {(groups, outs)} and "
                      f"{(groups, zcols)} for {ins} inputs in groups of {gs}")
    if scales.dtype not in SCALE_DTYPES:
        return packed(f"scales dtype {scales.dtype!r}")
    gidx = mine.get("g_idx")
    if gidx is not None and (tuple(gidx.shape) != (ins,) or gidx.dtype not in ("I32", "I64")):
        return packed(f"g_idx {gidx.dtype} {gidx.shape} is not I32 [{ins}]")
    return Logical(name, (outs, ins), scheme, mine)


def _nvfp4(name: str, mine: dict, config: dict, source: str) -> Logical:
    packed, scale, gscale = mine["codes"], mine["weight_scale"], mine["weight_global_scale"]
    w = _ct_weights(config)
    gs = w.get("group_size") or 16
    scheme = Scheme("nvfp4", "compressed-tensors nvfp4-pack-quantized", 4, group_size=gs, strategy="tensor_group",
                    facts={"method": f"{source} format", "group_size": f"{source} config_groups.*.weights"})
    rows, half = (tuple(packed.shape) + (0, 0))[:2]
    shape = (rows, 2 * half)
    reason = None
    if len(packed.shape) != 2 or packed.dtype != "U8":
        reason = f"packed, not dequantised: weight_packed is {packed.dtype} {packed.shape}, not U8 [rows, cols/2]"
    elif gs != 16 or tuple(scale.shape) != (rows, -(-2 * half // gs)):
        reason = (f"packed, not dequantised: weight_scale shape {scale.shape} is not "
                  f"{(rows, -(-2 * half // gs))} (groups of {gs!r})")
    elif scale.dtype not in ("F8_E4M3",) + SCALE_DTYPES or math.prod(gscale.shape) != 1:
        reason = f"packed, not dequantised: {scale.dtype} weight_scale, weight_global_scale shape {gscale.shape}"
    elif w.get("symmetric") is False:
        reason = "packed, not dequantised: asymmetric NVFP4"
    return Logical(name, shape, scheme, mine, reason)


def _mxfp4(name: str, mine: dict, source: str) -> Logical:
    blocks, scales = mine["codes"], mine["scales"]
    scheme = Scheme("mxfp4", "mxfp4", 4, group_size=32, block=(32,), strategy="group",
                    facts={"method": f"{source} quant_method", "layout": "gpt-oss *_blocks / *_scales"})
    shape = tuple(blocks.shape)
    if len(shape) != 4 or shape[-1] != 16 or tuple(scales.shape) != shape[:-1] \
            or blocks.dtype != "U8" or scales.dtype != "U8":
        return Logical(name, shape, scheme, mine,
                       f"packed, not dequantised: {blocks.dtype} {shape} blocks with {scales.dtype} "
                       f"{tuple(scales.shape)} scales are not gpt-oss MXFP4 ([E, R, G, 16] U8 and [E, R, G] U8)")
    experts, rows, groups, _ = shape
    # Decoded [E, R, G*32], then transpose(1, 2): the parameter is [E, G*32, R]. Its logical rows
    # are columns of the stored rows (decode.py reads them with read.cols, as GPTQ's).
    return Logical(name, (experts, groups * 32, rows), scheme, mine,
                   part_rows={blocks.name: experts * rows, scales.name: experts * rows})


def _ct_pack_shapes(mine: dict, shape: tuple, scheme: Scheme) -> str | None:
    """What is wrong with the parts' shapes for this weight and scheme, or None. Checked before
    anything is read: a scale of the wrong shape would otherwise read its neighbour's bytes."""
    rows, cols = shape
    gs = scheme.group_size
    if scheme.strategy == "group" and not (isinstance(gs, int) and gs > 0):
        return f"packed, not dequantised: strategy 'group' with group_size {gs!r}"
    groups = -(-cols // gs) if scheme.strategy == "group" else 1
    scale = mine["weight_scale"]
    if tuple(scale.shape) not in ((rows, groups),) + (((rows,),) if groups == 1 else ()):
        return (f"packed, not dequantised: weight_scale shape {scale.shape} is not "
                f"{(rows, groups)} ({scheme.strategy} of {cols} columns)")
    zp = mine.get("weight_zero_point")
    if zp is not None:
        want = (-(-rows * scheme.bits // 32), groups) if zp.dtype == "I32" else (rows, groups)
        if tuple(zp.shape) != want:
            return f"packed, not dequantised: weight_zero_point shape {zp.shape} is not {want}"
    gidx = mine.get("weight_g_idx")
    if gidx is not None and tuple(gidx.shape) != (cols,):
        return f"packed, not dequantised: weight_g_idx shape {gidx.shape} is not {(cols,)}"
    return None
