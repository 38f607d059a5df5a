"""LoRA adapters shown as what they change (issue 26): each adapted weight becomes one float32
tensor ΔW = scale · B · A under the base model's weight name, with A and B (and DoRA's magnitude,
kohya's alpha) as its stored parts, like a dequantised weight (quant/logical.py): its values are
computed from A and B, only those a read asks for (delta.py), so values, stats, heatmaps, health
and diff read it like any tensor. The Summary's facts are `ckpt.extras["adapter"]`.

PEFT adapters need their adapter_config.json (r, lora_alpha, patterns, rsLoRA, DoRA) beside the
file; without it the factors are shown as stored and a warning says why. kohya/A1111 LoRA files
carry everything in their tensors (`.alpha`) and header (`ss_*`).

Imported only when a checkpoint's names look like an adapter's (`looks_like`, kept here with no
import of its own beyond pairs.py's table).
"""

from __future__ import annotations

import math

from ..errors import LOW_LEVEL_ERRORS, TensorloupeError
from ..model import Checkpoint, Tensor
from .pairs import (KOHYA, KOHYA_LYCORIS, LOCON_MID, LYCORIS_COMPUTED, NEEDS_CONFIG, PEFT, PEFT_LYCORIS, Pair,
                    find_pairs, kind_of, layout_of, scalar)

EXTRAS_KEY = "adapter"


def looks_like(ckpt: Checkpoint) -> str | None:
    """The adapter layout its tensor names say (PEFT or KOHYA), or None."""
    return layout_of(t.name for t in ckpt.tensors)


def adopt(ckpt: Checkpoint, files: list) -> Checkpoint:
    """A checkpoint opened from `files` (paths or URLs): if it is an adapter, its ΔW (with the
    adapter_config.json beside it, for PEFT). A PEFT adapter opened from no named file (bytes,
    a ByteSource) is left as it is: its opener may know where its config is (the page's
    dropped files) and adopt or `apply` it then."""
    layout = looks_like(ckpt)
    files = [f for f in files if isinstance(f, str)]
    if layout is None or EXTRAS_KEY in ckpt.extras or (layout in NEEDS_CONFIG and not files):
        return ckpt
    config, where = None, None
    if layout in NEEDS_CONFIG:
        from ..opening import beside
        found = beside.find(files, beside.ADAPTER_CONFIG_NAME)
        config, where = found.data, found.where.rsplit("/", 1)[-1]
        if found.problem:
            ckpt.warnings.append(f"{found.where} was not used: {found.problem}")
    apply(ckpt, config, where or "adapter_config.json")
    return ckpt


def apply(ckpt: Checkpoint, config: dict | None, where: str = "adapter_config.json") -> None:
    """Replace the adapter's LoRA pairs by their ΔW tensors and say what the adapter is in
    `ckpt.extras["adapter"]`. PEFT needs `config` (adapter_config.json's object)."""
    layout = looks_like(ckpt)
    if layout is None or EXTRAS_KEY in ckpt.extras:
        return
    from .config import kohya_facts, peft_settings
    lora_layout = {PEFT_LYCORIS: PEFT, KOHYA_LYCORIS: KOHYA}.get(layout, layout)
    found, others = find_pairs(ckpt.tensors, lora_layout)
    # a kohya `.alpha` of no lora_down/lora_up is a LyCORIS module's (lycoris.py)
    others += [t for p in found if p.down is None and p.up is None for t in p.stored]
    found = [p for p in found if p.down is not None or p.up is not None]
    # a pair with a lora_mid is LyCORIS LoCon with a Tucker core: one module of three (lycoris.py)
    with_mid = {t.name[:-len(LOCON_MID)] for t in others if t.name.endswith(LOCON_MID)}
    others += [t for p in found if p.module in with_mid for t in p.stored]
    found = [p for p in found if p.module not in with_mid]
    summary = {"layout": layout, "kind": kind_of(layout),
               "source": where if layout in NEEDS_CONFIG else "tensor names and ss_* metadata",
               "pairs": len(found), "parameters": ckpt.parameter_count}
    settings = None
    if layout in NEEDS_CONFIG:
        if config is None:
            said = (f"these are PEFT adapter factors, but no {where} was found beside them: without "
                    "its r and alpha the scale of ΔW is not known, so they are shown as stored")
            ckpt.warnings.append(said)
            ckpt.extras[EXTRAS_KEY] = {**summary, "delta": 0, "problem": said}
            return
        try:
            settings = peft_settings(config, where, ("LORA",) if layout == PEFT else ("LOHA", "LOKR"))
        except TensorloupeError as e:
            said = f"{where} cannot be used: {e.message}; the factors are shown as stored"
            ckpt.warnings.append(said)
            ckpt.extras[EXTRAS_KEY] = {**summary, "delta": 0, "problem": said}
            return
        summary.update(base_model=settings.base_model, r=settings.r, alpha=settings.alpha,
                       rslora=settings.rslora, dora=settings.dora, targets=settings.targets,
                       modules_to_save=settings.modules_to_save, fan_in_fan_out=settings.fan_in_fan_out,
                       rank_pattern=settings.rank_pattern, alpha_pattern=settings.alpha_pattern)
    else:
        facts = kohya_facts(ckpt.metadata if isinstance(ckpt.metadata, dict) else {})
        summary.update(base_model=facts.get("sd_model_name") or facts.get("base_model_version"),
                       training=facts, dora=False, rslora=False)
    made: dict[str, Tensor] = {}    # first stored part's name -> ΔW in its place
    dropped: set[str] = set()
    scales, ranks, alphas = set(), set(), set()
    for pair in found:
        if settings is not None and settings.fan_in_fan_out and pair.down is not None \
                and pair.down.name.endswith(".lora_A.weight"):
            pair.transposed = True    # Conv1D (GPT-2): ΔW = (B·A)^T, as peft merges it
        why = pair.problem() or (_rank_mismatch(pair, settings) if settings else None)
        if why is None:
            try:
                scale, alpha = _scale(pair, settings)
            except (TensorloupeError, *LOW_LEVEL_ERRORS) as e:
                why = f"its alpha cannot be read: {e}"
        if why is not None:
            ckpt.warnings.append(f"adapter module {pair.module!r}: {why}; no ΔW is shown for it")
            continue
        scales.add(scale)
        ranks.add(pair.rank)
        alphas.add(alpha)
        made[pair.stored[0].name] = _delta_tensor(pair, scale, alpha, settings)
        dropped.update(t.name for t in pair.stored)
        if pair.bias is not None:
            made[pair.bias.name] = _bias_tensor(pair, scale)
    if layout in (PEFT_LYCORIS, KOHYA_LYCORIS) or any(t.name.endswith((*LYCORIS_COMPUTED, LOCON_MID)) for t in others):
        others, summary["algorithms"] = _apply_lycoris(ckpt, others, layout, settings, made, dropped,
                                                       (scales, ranks, alphas))
    renamed = _modules_to_save(others, settings) if settings else {}
    tensors = [made.get(t.name) or renamed.get(t.name, t) for t in ckpt.tensors
               if t.name in made or t.name not in dropped]
    ckpt.replace_tensors(tensors)
    weights = [t for t in made.values() if not t.info["computed as"].startswith("Δb")]
    summary.update(delta=len(weights), biases=len(made) - len(weights), ranks=sorted(ranks),
                   alphas=sorted(alphas), scales=sorted(scales),
                   delta_values=sum(t.numel for t in weights),
                   replaced=sorted(t.name for t in renamed.values()))
    summary["kind"] = kind_of(layout, summary.get("algorithms"))
    if layout in (KOHYA, KOHYA_LYCORIS):
        summary["r"] = max(ranks) if len(ranks) == 1 else None
        summary["alpha"] = max(alphas) if len(alphas) == 1 else None
    ckpt.extras[EXTRAS_KEY] = summary


def _bias_tensor(pair: Pair, scale: float) -> Tensor:
    """lora_bias=True: B's bias times the scale, what peft's merge adds to the base's bias."""
    from .delta import ScaledSource
    b = pair.bias
    info = {"computed as": f"Δb = {scale:.6g} · lora_B.bias (lora_bias: peft adds it to the bias)",
            "lora": {"layout": pair.layout, "module": pair.module, "scale": scale, "bias": True}}
    return Tensor(pair.module + ".bias", "F32", b.shape, 0, 4 * b.numel,
                  source=ScaledSource(b, scale), info=info, parts=(b,))


def _apply_lycoris(ckpt: Checkpoint, others: list[Tensor], layout: str, settings, made: dict,
                   dropped: set, seen: tuple) -> tuple[list[Tensor], dict]:
    """The LyCORIS modules among `others` as ΔW tensors (into `made`/`dropped`): the tensors
    left in none of them, and the count of modules computed by algorithm."""
    from . import lycoris
    scales, ranks, alphas = seen
    modules, rest = lycoris.find_modules(others, layout == PEFT_LYCORIS)
    algorithms = {}
    for m in modules:
        shape, rank, why = lycoris.plan(m)
        if why is None and settings is not None:
            r, alpha = settings.rank_alpha(m.module)
            if rank is not None and rank != r:
                why = (f"its factors have rank {rank} but the adapter config says {r}: its scale "
                       "would be wrong")
            scale = alpha / r
        elif why is None:
            try:
                scale, alpha = lycoris.kohya_scale(m, rank)
            except (TensorloupeError, *LOW_LEVEL_ERRORS) as e:
                why = f"its alpha cannot be read: {e}"
        if why is not None:
            ckpt.warnings.append(f"adapter module {m.module!r}: {why}; no ΔW is shown for it")
            rest.extend(m.stored)
            continue
        scales.add(scale)
        alphas.add(alpha)
        if rank is not None:
            ranks.add(rank)
        algorithms[m.algorithm] = algorithms.get(m.algorithm, 0) + 1
        made[m.stored[0].name] = lycoris.delta_tensor(m, shape, rank, scale, alpha, layout)
        dropped.update(t.name for t in m.stored)
    order = {t.name: i for i, t in enumerate(ckpt.tensors)}
    return sorted(rest, key=lambda t: order[t.name]), algorithms


def _rank_mismatch(pair: Pair, settings) -> str | None:
    r, _ = settings.rank_alpha(pair.module)
    if pair.rank != r:
        return (f"A has rank {pair.rank} but {'rank_pattern' if settings.rank_pattern else 'r'} "
                f"in the adapter config says {r}: its scale would be wrong")
    return None


def _scale(pair: Pair, settings) -> tuple[float, float]:
    """(scale, alpha): peft's alpha / r (or / sqrt r with rsLoRA); kohya's alpha / r, alpha
    from the pair's `.alpha` tensor (sd-scripts: none or 0 means alpha = r, scale 1)."""
    if settings is not None:
        return settings.scale(pair.module), settings.rank_alpha(pair.module)[1]
    alpha = scalar(pair.alpha) if pair.alpha is not None else 0.0
    if not math.isfinite(alpha):
        raise ValueError(f"alpha is {alpha}")
    alpha = alpha or float(pair.rank)
    return alpha / pair.rank, alpha


def _delta_tensor(pair: Pair, scale: float, alpha: float, settings) -> Tensor:
    from .delta import DeltaSource
    rsl = bool(settings and settings.rslora)
    how = (f"ΔW = {alpha:g}/{'√' if rsl else ''}{pair.rank} · B · A = {scale:.6g} · B · A"
           + (" ((B·A)ᵀ)" if pair.transposed else ""))
    if settings is not None and settings.dora:
        how += "; DoRA: ΔW is the LoRA part only (the merged weight is also rescaled per row by the magnitude)"
    shape = pair.shape
    info = {"computed as": how,
            "lora": {"layout": pair.layout, "module": pair.module, "r": pair.rank, "alpha": alpha,
                     "scale": scale, "rslora": rsl, "transposed": pair.transposed,
                     "dora": pair.magnitude is not None}}
    return Tensor(pair.base_name, "F32", shape, 0, 4 * math.prod(shape),
                  source=DeltaSource(pair, scale), info=info, parts=pair.stored)


def _modules_to_save(others: list[Tensor], settings) -> dict[str, Tensor]:
    """PEFT's modules_to_save: the trained copy of a whole module, listed under the base
    model's name it replaces (`base_model.model.lm_head.weight` -> `lm_head.weight`)."""
    from dataclasses import replace
    from .pairs import PEFT_PREFIX
    out = {}
    for t in others:
        name = t.name[len(PEFT_PREFIX):] if t.name.startswith(PEFT_PREFIX) else t.name
        module = name.rsplit(".", 1)[0]
        if any(module == m or module.endswith("." + m) for m in settings.modules_to_save):
            out[t.name] = replace(t, name=name, info={**t.info, "stored as": t.name, "adapter":
                                                      "replaces the base model's weight (modules_to_save)"})
    return out
