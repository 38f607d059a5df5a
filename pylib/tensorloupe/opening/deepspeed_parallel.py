"""DeepSpeed checkpoints of model-parallel runs: pipeline stages joined, tensor-parallel ranks shown
apart.

Pipeline (deepspeed/runtime/pipe/module.py `save_state_dict`, `ckpt_layer_path`): a
PipelineModule writes each of its layers' state_dict to `layer_XX-model_states.pt` (XX the layer's
index in the whole pipeline; `layer_XX-model_YY-model_states.pt` with tensor parallelism, YY the
tensor-parallel rank), and each stage an `mp_rank_SS_model_states.pt` without the module (its
optimizer, steps, `mp_world_size`). The model is the layers' tensors named as the PipelineModule
names them, "<layer index>.<name in the layer>" (it registers layer XX as submodule "XX"): what
`load_state_dir` loads. The stage files are its training state.

Tensor parallel (an `mpu` with model-parallel world > 1, as Megatron-DeepSpeed): each rank r writes
`mp_rank_0r_model_states.pt` and its own ZeRO optimizer states; each rank's model is read as one
ZeRO checkpoint (opening/deepspeed.py) and its tensors are shown under "mp_rank_0r/". They are NOT
joined: which dimension of each tensor is split (column or row parallel), and which tensors are
replicated, is in the model's code, not in the checkpoint (DeepSpeed records no split rule), so any
join would be a guess. A rank file not given is an error naming it.
"""

from __future__ import annotations

import dataclasses

from . import training
from ..errors import UsageError
from ..model import Checkpoint

PIPELINE_FORMAT = "deepspeed-pipeline"
LAYER_STATES = training.ZERO_LAYER_STATES
MAX_LAYERS = 1 << 16
MAX_LISTED = 20


def is_layer(name: str) -> bool:
    return LAYER_STATES.fullmatch(training.basename(name)) is not None


def layer_of(name: str) -> tuple[int, int]:
    """(layer index, tensor-parallel rank) of a pipeline layer file's name."""
    m = LAYER_STATES.fullmatch(training.basename(name))
    return int(m["layer"]), int(m["mp"] or 0)


def rank_prefix(mp: int) -> str:
    return f"mp_rank_{mp:02d}/"


def read_pipeline(sources: list, read, stage_of) -> Checkpoint:
    """The model a pipeline checkpoint's layer files make, its stage files beside it.
    `stage_of(name)` is (role, data-parallel rank, model-parallel rank) of a stage file."""
    layers, stages, sizes = {}, {}, {}
    for s in sources:
        base = training.basename(s.name)
        sizes[base] = s.size
        if is_layer(base):
            layer, mp = layer_of(base)
            if layer >= MAX_LAYERS:
                raise UsageError(f"layer {layer:,} is more layers than a pipeline has", file=base,
                                 format=PIPELINE_FORMAT)
            if (layer, mp) in layers:
                raise UsageError(f"two files of layer {layer:,} were given", format=PIPELINE_FORMAT,
                                 found=f"{layers[layer, mp].name} and {base}")
            layers[layer, mp] = read(s)
        else:
            stages[base] = read(s)
    ranks = sorted({mp for _, mp in layers})
    split = len(ranks) > 1 or ranks != [0]
    tensors = []
    for (layer, mp), ckpt in sorted(layers.items()):
        prefix = rank_prefix(mp) if split else ""
        for t in ckpt.tensors:
            info = {**t.info, "pipeline": {"layer": layer, "file": ckpt.name, "stored_as": t.name}}
            if split:
                info["tensor_parallel"] = {"rank": mp, "ranks": len(ranks)}
            tensors.append(dataclasses.replace(t, name=f"{prefix}{layer}.{t.name}", info=info))
    errors = _missing_stages(stages, stage_of)
    warnings = list(errors)
    if split:
        warnings.append(_apart(len(ranks)))
    parts = [training.Part(c.name, sizes[c.name], training.match(c.name)[0], checkpoint=c)
             for c in stages.values()]
    report, part_warnings = training.report(parts) if parts else ({}, [])
    files = list(layers.values()) + list(stages.values())
    from ..formats.multifile import merge_reports
    extras = {"safety": merge_reports([(c.name, c.extras.get("safety") or {}) for c in files]),
              "deepspeed": {"pipeline": True, "layers": sorted({layer for layer, _ in layers}),
                            "tensor_parallel": len(ranks), "files": sorted(sizes)},
              "shards": {"count": len(sizes), "missing": [], "errors": errors, "missing_count": 0,
                         "parts": [{"no": None, "name": n, "size": sizes[n], "tensors": None}
                                   for n in sorted(sizes)]}}
    if parts:
        extras["training"] = report
    if not stages:
        warnings.append("no stage file (mp_rank_SS_model_states.pt) was given: the layer files "
                        "given are shown, but other layers and the optimizer state may be missing")
    first = min(layers.items())[1].name if layers else next(iter(sizes))
    count = len({k for k, _ in layers})
    more = f" + {len(sizes) - 1} more" if len(sizes) > 1 else ""
    name = f"{first}{more} (DeepSpeed pipeline, {count} layer file{'s' if count != 1 else ''})"
    return Checkpoint(PIPELINE_FORMAT, name, sum(sizes.values()), tensors,
                      metadata={"pipeline_layers": len({k for k, _ in layers}),
                                "tensor_parallel": len(ranks)},
                      warnings=warnings + part_warnings, extras=extras,
                      sources=[s for c in files for s in c.sources])


def _missing_stages(stages: dict, stage_of) -> list[str]:
    """Sentences for the stage files (mp_rank_SS_model_states.pt) that `mp_world_size` names
    but were not given."""
    found, world = set(), None
    for name, ckpt in stages.items():
        role, _, mp = stage_of(name)
        summary = ckpt.extras.get("deepspeed") or {}
        if summary.get("role") == "model states":
            found.add(mp)
            world = summary.get("mp_world_size") if world is None else world
    if not found or type(world) is not int or world > MAX_LAYERS:
        return []
    lost = [r for r in range(world) if r not in found]
    out = [f"stage {r:,}'s file mp_rank_{r:02d}_model_states.pt is missing: its optimizer state "
           "cannot be shown" for r in lost[:MAX_LISTED]]
    return out + ([f"{len(lost) - MAX_LISTED:,} more stage files are missing"] if len(lost) > MAX_LISTED else [])


def tensor_parallel(ranks: dict, files: int) -> Checkpoint:
    """Each tensor-parallel rank's ZeRO checkpoint (`ranks`: {rank: Checkpoint}, read from
    `files` files in all), side by side under its rank's prefix."""
    first = ranks[min(ranks)]
    world = first.extras["deepspeed"].get("mp_world_size")
    world = world if type(world) is int and world >= len(ranks) else max(ranks) + 1
    lost = [r for r in range(world) if r not in ranks]
    errors = [f"tensor-parallel rank {r:,}'s files (mp_rank_{r:02d}_model_states.pt and its "
              "optimizer states) are missing: its partition of the model is not shown"
              for r in lost[:MAX_LISTED]]
    tensors, warnings, parts, safety = [], [], [], []
    for mp, ckpt in ranks.items():
        for t in ckpt.tensors:
            info = {**t.info, "tensor_parallel": {"rank": mp, "ranks": world}}
            tensors.append(dataclasses.replace(t, name=rank_prefix(mp) + t.name, info=info))
        warnings += [f"rank {mp:,}: {w}" for w in ckpt.warnings]
        parts += ckpt.extras["training"]["parts"]
        safety.append((f"mp_rank_{mp:02d}", ckpt.extras.get("safety") or {}))
    from ..formats.multifile import merge_reports
    ds = {**first.extras["deepspeed"], "tensor_parallel": world,
          "files": sorted(f for c in ranks.values() for f in c.extras["deepspeed"]["files"])}
    shards = [p for c in ranks.values() for p in c.extras["shards"]["parts"]]
    rank_errors = [e for c in ranks.values() for e in c.extras["shards"]["errors"]]
    extras = {"training": {**first.extras["training"], "parts": parts},
              "safety": merge_reports(safety), "deepspeed": ds,
              "shards": {"count": len(shards) + len(lost), "missing": [], "missing_count": len(lost),
                         "errors": errors + rank_errors, "parts": shards}}
    stage = first.metadata.get("zero_stage")
    name = (f"{first.name.split(' + ')[0]} + {files - 1} more "
            f"(DeepSpeed ZeRO-{stage}, tensor parallel {world})")
    return Checkpoint(first.format, name, sum(c.size for c in ranks.values()), tensors,
                      metadata={**first.metadata, "tensor_parallel": world},
                      warnings=errors + [_apart(world)] + warnings, extras=extras,
                      sources=[s for c in ranks.values() for s in c.sources])


def _apart(ranks: int) -> str:
    return (f"tensor parallel over {ranks:,} ranks: each rank's partition is shown under its rank "
            "(mp_rank_00/..., mp_rank_01/...), not joined: the checkpoint does not say which "
            "dimension of each tensor is split or which are replicated (that is in the model's "
            "code), so parameter counts add the ranks' partitions as stored")
