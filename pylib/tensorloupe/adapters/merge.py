"""A base model with an adapter's ΔW added, as a checkpoint to compare a merged model against
(`tensorloupe diff BASE MERGED --adapter ADAPTER`): every adapted weight is a float32 tensor
whose rows are the base's rows plus ΔW's, computed on demand (nothing merged is held), as peft's
merge_and_unload computes it (peft/tuners/lora/layer.py `merge`):

  LoRA   W + ΔW                   (each element: the float32 sum, rounded once)
  DoRA   m_i / ‖W_i + ΔW_i‖ · (W_i + ΔW_i) for each output row i (the norm over the row: the
         weight's dim 1, conv dims 1..3), m the stored magnitude vector
  modules_to_save   the adapter's copy instead of the base's

Tensors of the base the adapter does not touch are the base's own. A kohya-named ΔW
(`lycoris_conv1.weight`, `lora_unet_down_blocks_0_conv1.weight`) is the base weight whose path,
dots as underscores, is its module name without the prefix (how sd-scripts and the lycoris
library name modules); a ΔW shown flat ([out, in·kh·kw]) adds to the base's conv weight of the
same rows and elements.
"""

from __future__ import annotations

import math
import sys
from array import array
from dataclasses import replace
from math import fsum
from operator import add, mul

from ..dtypes import lookup
from ..errors import LOW_LEVEL_ERRORS, FormatError, TensorloupeError
from ..model import Checkpoint, Tensor
from ..quant.logical import RowsSource


class MergedSource(RowsSource):
    """The float32 rows of base + ΔW (DoRA: rescaled row by row)."""

    def __init__(self, base: Tensor, delta: Tensor, magnitude: list | None):
        self.cols = math.prod(base.shape[1:])   # rows: dim 0, as ΔW's and DoRA's norms
        super().__init__(base, base.shape, self.cols)
        self.base, self.delta, self.magnitude = base, delta, magnitude
        self.item = base.nbytes // max(base.numel, 1)

    def _compute(self, r0: int, r1: int) -> array:
        b, n = self.base, self.cols
        try:
            w = lookup(b.dtype).decode(b.source.read_data(b.offset + r0 * n * self.item, (r1 - r0) * n * self.item),
                                       b.big_endian)
            d = array("f")
            d.frombytes(self.delta.source.read_data(r0 * n * 4, (r1 - r0) * n * 4))
        except TensorloupeError as e:
            raise e.located(file=self.name)
        except LOW_LEVEL_ERRORS as e:
            raise FormatError(f"{b.name!r} + ΔW cannot be computed: {e}", file=self.name) from e
        if sys.byteorder == "big":
            d.byteswap()
        summed = array("f", map(add, w, d))     # float32 W + ΔW, as peft adds them
        if self.magnitude is None:
            return summed
        out = array("f")
        for i in range(r1 - r0):
            row = summed[i * n:(i + 1) * n]
            norm = math.sqrt(fsum(map(mul, row, row)))
            factor = self.magnitude[r0 + i] / norm if norm else math.inf
            out.extend(map(mul, [factor] * n, row))
        return out


def _magnitude(delta: Tensor) -> list | None:
    lora = delta.info.get("lora") or {}
    if not lora.get("dora"):
        return None
    m = delta.parts[2]
    return lookup(m.dtype).decode(m.source.read_data(m.offset, m.nbytes), m.big_endian)


def with_adapter(base: Checkpoint, adapter: Checkpoint) -> tuple[Checkpoint, dict]:
    """`base` with `adapter` applied (a view: the same sources), and what was applied."""
    if "adapter" not in adapter.extras:
        raise FormatError("this is not a LoRA adapter tensorloupe reads (no lora_A/lora_B or "
                          "lora_down/lora_up tensors)", file=adapter.name)
    if adapter.extras["adapter"].get("problem"):
        raise FormatError(adapter.extras["adapter"]["problem"], file=adapter.name)
    by_name = {t.name: t for t in base.tensors}
    kohya = _kohya_names(base) if adapter.extras["adapter"].get("layout", "").startswith("kohya") else {}
    applied, replaced, problems = [], [], []
    changed: dict[str, Tensor] = {}
    for t in adapter.tensors:
        target = by_name.get(t.name) or by_name.get(kohya.get(_kohya_key(t.name)))
        lora = (t.info.get("lora") or t.info.get("lycoris")) if t.parts else None
        if lora is None and "adapter" not in t.info:
            continue
        why = _unpairable(t, target, lora)
        if why:
            problems.append(f"{t.name!r}: {why}")
            continue
        if lora is None:            # modules_to_save: the adapter's copy
            changed[t.name] = t
            replaced.append(t.name)
            continue
        changed[target.name] = replace(target, dtype="F32", offset=0, nbytes=4 * target.numel, strides=None,
                                  source=MergedSource(target, t, _magnitude(t)),
                                  info={"computed as": f"base + {t.info['computed as']}"}, parts=(target, t))
        applied.append(target.name)
    view = Checkpoint(base.format, f"{base.name} + {adapter.name}", base.size,
                      [changed.get(t.name, t) for t in base.tensors], base.metadata,
                      base.warnings + [f"adapter {p}; compared as in the base" for p in problems],
                      dict(base.extras), base.sources)
    return view, {"adapter": adapter.name, "applied": applied, "replaced": replaced, "problems": problems}


def _kohya_key(name: str) -> str | None:
    """A kohya-named ΔW's module without its prefix (`lora_unet_down_blocks_0_conv.weight` ->
    `down_blocks_0_conv`), or None for a name of no kohya prefix."""
    from .pairs import KOHYA_PREFIXES
    prefix = next((p for p in KOHYA_PREFIXES if name.startswith(p)), None)
    if prefix is None or not name.endswith(".weight"):
        return None
    return name[len(prefix):-len(".weight")]


def _kohya_names(base: Checkpoint) -> dict[str, str]:
    """kohya module name -> the base weight it is made from, as sd-scripts and the lycoris
    library name a module (its path with `.` as `_`). Two base weights of one kohya name are
    left out: which one the adapter meant is not known (it is then said: no tensor of that name)."""
    found: dict[str, str] = {}
    clashing = set()
    for t in base.tensors:
        if t.name.endswith(".weight"):
            key = t.name[:-len(".weight")].replace(".", "_")
            if key in found:
                clashing.add(key)
            found[key] = t.name
    return {k: v for k, v in found.items() if k not in clashing}


def _same_rows(target: Tensor, delta: Tensor) -> bool:
    """A ΔW whose base shape is not stored (a conv LoHa's [out, in·kh·kw], peft's conv1d Tucker
    [out, in, k, 1]) holds the base's elements in the same order: the same rows, as many values."""
    return target.shape[:1] == delta.shape[:1] and target.numel == delta.numel


def _unpairable(t: Tensor, target: Tensor | None, lora: dict | None) -> str | None:
    if target is None:
        return "the base has no tensor of that name"
    if tuple(target.shape) != tuple(t.shape) and not (lora is not None and _same_rows(target, t)):
        return f"the base's is {list(target.shape)}, the adapter's {list(t.shape)}"
    if lora is None:
        return None
    info = target.dtype_info
    if target.problem or target.source is None or not target.contiguous or info is None \
            or info.block_elems != 1:
        return f"the base's {target.dtype} weight cannot be read row by row here"
    if lora.get("dora") and lora.get("transposed"):
        return "DoRA on an embedding or fan_in_fan_out layer is not merged here"
    return None
