"""A DeepSpeed ZeRO checkpoint folder opened as one model, its training state beside it.

`engine.save_checkpoint(dir)` writes `dir/latest` (the tag, e.g. "global_step2"),
`dir/zero_to_fp32.py` (DeepSpeed's converter: never run here) and `dir/<tag>/` with one
model-states file (one per rank with ZeRO 3) and one optimizer-states file per rank
(formats/pytorch/zerostate.py has what each holds). The model is what zero_to_fp32's
`get_fp32_state_dict_from_zero_checkpoint` makes of them: the buffers (from rank 0's module), the
frozen parameters (their fragments in the model states), the trainable parameters' fp32 master
weights (from the flat partitions, formats/pytorch/zerolayout.py), and shared names. Each
parameter is one Tensor over the bytes its elements span in the rank files (a JoinedSource of
pieces), so its values are read in place, never gathered whole. A parameter of the module that
none of these names (the bf16 optimizer keeps no frozen list) is shown as the module stores it,
with a warning. Every file is also a part of the training state (opening/training.py's report:
the optimizer moments, the model states), each with its own safety report.
extras["deepspeed"] = {"stage", "world_size", "ds_version", "global_steps", "files"}; a missing
rank file is an error (extras["shards"]["errors"]) and the parameters with elements in it say so.
"""

from __future__ import annotations

import math

from . import deepspeed_parallel, training
from .beside import small_text
from ..errors import FormatError, UsageError
from ..model import Checkpoint, Tensor
from ..source.joined import JoinedSource, Piece

FORMAT = "deepspeed-zero"
LATEST = "latest"            # the tag of the last save, beside the tag folders
MODEL_STATES, OPTIM_STATES = training.ZERO_MODEL_STATES, training.ZERO_OPTIM_STATES
# formats/pytorch/zerostate.py's roles (named without importing the torch readers)
MODEL_ROLE, OPTIMIZER_ROLE = "model states", "optimizer states"
MAX_TAG_BYTES = 4096
MAX_RANKS = 1 << 12          # data-parallel ranks (the largest ZeRO runs: a few thousand GPUs)
MAX_LISTED = 20              # missing rank files named one by one; the rest are counted


def is_member(name: str) -> bool:
    base = training.basename(name)
    return (MODEL_STATES.fullmatch(base) is not None or OPTIM_STATES.fullmatch(base) is not None
            or deepspeed_parallel.is_layer(base))


def read_tag(path: str) -> str | None:
    """The tag a `latest` file names (a folder name beside it), or None if it names none."""
    tag = small_text(path, MAX_TAG_BYTES, "utf-8")
    return tag if tag and "/" not in tag and "\\" not in tag and tag not in (".", "..") else None


def _rank(name: str) -> tuple[str, int, int]:
    """(role, data-parallel rank, model-parallel rank) of a ZeRO file's name."""
    base = training.basename(name)
    m = OPTIM_STATES.fullmatch(base)
    if m:
        return OPTIMIZER_ROLE, int(m["rank"]), int(m["mp"])
    m = MODEL_STATES.fullmatch(base)
    return MODEL_ROLE, int(m["rank"] or 0), int(m["mp"])


def read_set(sources: list, read) -> Checkpoint:
    """The model the ZeRO files `sources` make; `read(source)` reads one file (its Checkpoint).
    Pipeline layer files and tensor-parallel ranks: opening/deepspeed_parallel.py."""
    if any(deepspeed_parallel.is_layer(s.name) for s in sources):
        return deepspeed_parallel.read_pipeline(sources, read, _rank)
    by_mp: dict[int, list] = {}
    for s in sources:
        mp = _rank(s.name)[2]
        if mp >= MAX_RANKS:
            raise UsageError(f"model-parallel rank {mp:,} is more ranks than a checkpoint has",
                             format=FORMAT, file=training.basename(s.name))
        by_mp.setdefault(mp, []).append(s)
    ranks = {mp: _read_rank(group, read, mp) for mp, group in sorted(by_mp.items())}
    world = ranks[min(ranks)].extras["deepspeed"]["mp_world_size"]
    if list(ranks) == [0] and (type(world) is not int or world <= 1):
        return ranks[0]
    return deepspeed_parallel.tensor_parallel(ranks, len(sources))


def _read_rank(sources: list, read, mp: int) -> Checkpoint:
    """The model of one model-parallel rank `mp`'s ZeRO files (all of `sources`)."""
    by_role: dict[str, dict[int, Checkpoint]] = {}
    sizes = {}
    for s in sources:
        role, rank, _ = _rank(s.name)
        if rank >= MAX_RANKS:
            raise UsageError(f"rank {rank:,} is more ranks than a ZeRO checkpoint has",
                             file=training.basename(s.name), format=FORMAT)
        if rank in by_role.get(role, {}):
            raise UsageError(f"two {role} files of rank {rank:,} were given", format=FORMAT,
                             found=f"{by_role[role][rank].name} and {training.basename(s.name)}")
        sizes[training.basename(s.name)] = s.size
        by_role.setdefault(role, {})[rank] = read(s)
    models = by_role.get(MODEL_ROLE, {})
    optims = by_role.get(OPTIMIZER_ROLE, {})
    if 0 not in models:
        raise UsageError(f"the ZeRO checkpoint's rank-0 model states (mp_rank_{mp:02d}_model_states.pt"
                         f" or zero_pp_rank_0_mp_rank_{mp:02d}_model_states.pt) were not given: they "
                         "list the parameters", format=FORMAT, file=sources[0].name)
    head = _summary(models[0], "model states")
    if not optims:
        raise UsageError("no *_optim_states.pt file was given: the fp32 master weights are in "
                         "them; open the checkpoint's folder", file=models[0].name, format=FORMAT)
    first = _summary(optims[min(optims)], "optimizer states")
    stage, counts = first["zero_stage"], first["partition_count"]
    world = max(counts) if isinstance(counts, list) and counts and None not in counts else counts
    if stage not in (1, 2, 3) or type(world) is not int or not 0 < world <= MAX_RANKS:
        raise FormatError("the optimizer states give no ZeRO stage 1-3 and partition count",
                          file=optims[min(optims)].name, format=FORMAT,
                          found=f"stage {stage}, partition_count {counts}")
    errors, problems = _missing(optims, models, world, stage, sources, mp)
    flat = _flat_groups(optims, world, first)
    tensors, warnings = _tensors(models, head, stage, world, flat, first)
    files = [c for ranks in by_role.values() for c in ranks.values()]
    parts = [training.Part(c.name, sizes[c.name], training.match(c.name)[0], checkpoint=c)
             for c in files]
    report, part_warnings = training.report(parts)
    from ..formats.multifile import merge_reports
    extras = {"training": report,
              "safety": merge_reports([(c.name, c.extras.get("safety") or {}) for c in files]),
              "deepspeed": {"stage": stage, "world_size": world, "ds_version": head["ds_version"],
                            "global_steps": head["global_steps"],
                            "mp_world_size": head.get("mp_world_size"),
                            "files": sorted(sizes)},
              "shards": {"count": world, "missing": sorted(problems)[:MAX_LISTED], "errors": errors,
                         "missing_count": len(problems),
                         "parts": [{"no": None, "name": n, "size": sizes[n], "tensors": None}
                                   for n in sorted(sizes)]}}
    all_sources = [s for c in files for s in c.sources]
    name = f"{models[0].name} + {len(sizes) - 1} more (DeepSpeed ZeRO-{stage}, {world} ranks)"
    return Checkpoint(FORMAT, name, sum(sizes.values()), tensors,
                      metadata={"zero_stage": stage, "world_size": world,
                                "ds_version": head["ds_version"],
                                "global_steps": head["global_steps"]},
                      warnings=errors + warnings + part_warnings, extras=extras,
                      sources=all_sources)


def _summary(ckpt: Checkpoint, role: str) -> dict:
    found = ckpt.extras.get("deepspeed")
    if not found or found.get("role") != role:
        raise FormatError(f"the file is named like DeepSpeed ZeRO {role} but does not hold them",
                          file=ckpt.name, format=FORMAT)
    return found


def _missing(optims: dict, models: dict, world: int, stage: int, sources, mp: int = 0) -> tuple[list, dict]:
    """Sentences for the rank files not given, and {file name: rank}."""
    like = training.basename(next(s.name for s in sources if OPTIM_STATES.fullmatch(
        training.basename(s.name))))
    m = OPTIM_STATES.fullmatch(like)
    out, errors = {}, []
    for r in range(world):
        if r not in optims:
            out[f"{m['bf16'] or ''}zero_pp_rank_{r}_mp_rank_{mp:02d}_optim_states.pt"] = r
        if stage == 3 and r not in models:
            out[f"zero_pp_rank_{r}_mp_rank_{mp:02d}_model_states.pt"] = r
    extra = sorted(r for r in optims if r >= world)
    if extra:
        raise FormatError(f"optimizer states of rank {extra[0]:,} were given, but the partition "
                          f"count is {world:,}", format=FORMAT)
    for name, r in sorted(out.items(), key=lambda item: item[1])[:MAX_LISTED]:
        errors.append(f"rank {r:,}'s file {name} is missing: the parameters with elements in it "
                      "cannot be read")
    if len(out) > MAX_LISTED:
        errors.append(f"{len(out) - MAX_LISTED:,} more rank files of the {world:,} ranks are missing")
    return errors, out


def _flat_groups(optims: dict, world: int, first: dict) -> list:
    """flat[r][g]: rank r's flat group g Tensor, or None for a missing rank (whose lengths are
    taken to be those of a rank at hand: DeepSpeed partitions evenly)."""
    count = len(first["flat_groups"] or ())
    out = []
    for r in range(world):
        if r not in optims:
            out.append(None)
            continue
        ckpt = optims[r]
        found = _summary(ckpt, "optimizer states")
        names = found["flat_groups"] or []
        if len(names) != count or None in names:
            raise FormatError(f"rank {r:,} has {len(names):,} flat groups, rank {min(optims):,} has "
                              f"{count:,}", file=ckpt.name, format=FORMAT)
        groups = [ckpt.by_name[n] for n in names]
        for t in groups:
            if len(t.shape) != 1 or not t.contiguous or t.problem:
                raise FormatError(f"the flat group {t.name!r} is not a readable 1-dim tensor",
                                  file=ckpt.name, format=FORMAT, found=t.problem or list(t.shape))
        out.append(groups)
    return out


def _lengths(flat: list) -> list[list[int]]:
    known = next(g for g in flat if g is not None)
    return [[t.numel for t in (g if g is not None else known)] for g in flat]


def _tensors(models: dict, head: dict, stage: int, world: int, flat: list, first: dict):
    from ..formats.pytorch import zerolayout
    shapes = head["param_shapes"]
    if shapes is None:
        raise FormatError("param_shapes is not a list of name -> shape maps", format=FORMAT,
                          file=models[0].name)
    lengths = _lengths(flat)
    try:
        if stage == 3:
            spans = zerolayout.zero3([p for g in shapes for p in g], lengths)
        else:
            spans = zerolayout.zero2(shapes, lengths, first["alignment_paddings"])
    except FormatError as e:
        raise e.located(file=models[0].name)
    module = models[0]
    tensors: list[Tensor] = []
    for name in head["buffer_names"]:   # zero_to_fp32 casts float buffers to float32
        if name in head["module"]:
            tensors.append(_from(module, head["module"][name], name, "buffer", buffer=True))
    for name, shape in head["frozen_param_shapes"] or []:
        tensors.append(_frozen(models, name, shape, stage, world))
    example = next(g for g in flat if g is not None)[0]
    for name, shape in (p for g in shapes for p in g):
        tensors.append(_joined(name, shape, spans[name], flat, example, stage))
    covered = {t.name for t in tensors}
    for alias, target in head["shared_params"]:
        if target in covered:
            shared = next(t for t in tensors if t.name == target)
            tensors.append(Tensor(alias, shared.dtype, shared.shape, shared.offset, shared.nbytes,
                                  source=shared.source, problem=shared.problem,
                                  info={**shared.info, "same_as": target}))
            covered.add(alias)
    rest = [n for n in head["module"] if n not in covered]
    warnings = []
    if rest:
        warnings.append(f"{len(rest):,} module tensor(s) are in neither param_shapes, the frozen "
                        f"parameters nor the buffers (e.g. {rest[0]!r}): shown as the model "
                        "states store them, not as fp32 master weights (zero_to_fp32 leaves "
                        "them out)")
        tensors += [_from(module, head["module"][n], n, "module") for n in rest]
    return tensors, warnings


def _from(ckpt: Checkpoint, stored: str, name: str, kind: str, buffer: bool = False) -> Tensor:
    t = ckpt.by_name[stored]
    info = {**t.info, "zero": {"from": kind, "file": ckpt.name, "stored_as": stored}}
    if buffer:
        info["buffer"] = True
    return Tensor(name, t.dtype, t.shape, t.offset, t.nbytes, source=t.source, strides=t.strides,
                  big_endian=t.big_endian, problem=t.problem, info=info)


def _frozen(models: dict, name: str, shape: list, stage: int, world: int) -> Tensor:
    """A frozen parameter: whole in rank 0's model states (ZeRO 1/2), or its ranks' fragments
    joined and cut to its size (ZeRO 3)."""
    shape = tuple(shape)
    numel = math.prod(shape)
    if stage != 3:
        t = _fragment(models[0], name)
        if t.numel != numel:
            raise FormatError(f"the frozen parameter {name!r} has {t.numel:,} elements, its shape "
                              f"{list(shape)} {numel:,}", file=models[0].name, format=FORMAT)
        return Tensor(name, t.dtype, shape, t.offset, t.nbytes, source=t.source, problem=t.problem,
                      info={**t.info, "zero": {"from": "frozen fragments", "file": models[0].name}})
    pieces, left, first = [], numel, None
    for r in range(world):
        if r not in models:
            return _lost(name, shape, "F32", f"rank {r:,}'s model states are missing")
        t = _fragment(models[r], name)
        first = first or t
        take = min(left, t.numel)
        itemsize = t.nbytes // t.numel if t.numel else 0
        pieces.append(Piece(t.source, t.offset, take * itemsize))
        left -= take
    if left:
        raise FormatError(f"the frozen parameter {name!r}'s fragments hold fewer than its "
                          f"{numel:,} elements", file=models[0].name, format=FORMAT)
    return Tensor(name, first.dtype, shape, 0, sum(p.length for p in pieces),
                  source=JoinedSource(pieces, name=first.source.root().name),
                  info={"torch_dtype": first.info.get("torch_dtype"),
                        "zero": {"from": "frozen fragments", "ranks": world}})


def _fragment(ckpt: Checkpoint, name: str) -> Tensor:
    found = _summary(ckpt, "model states")["frozen_fragments"].get(name)
    t = ckpt.by_name.get(found) if found else None
    if t is None or not t.contiguous or t.problem:
        raise FormatError(f"the frozen parameter {name!r} has no readable fragment",
                          file=ckpt.name, format=FORMAT)
    return t


def _lost(name: str, shape: tuple, dtype: str, why: str) -> Tensor:
    return Tensor(name, dtype, shape, 0, 0, problem=why, info={"zero": {"from": "missing"}})


def _joined(name: str, shape: list, spans: list, flat: list, example: Tensor, stage: int) -> Tensor:
    """A trainable parameter's fp32 master weights over its spans of the flat partitions."""
    shape = tuple(shape)
    itemsize = example.nbytes // example.numel if example.numel else 4
    pieces = []
    for span in spans:
        groups = flat[span.rank]
        if groups is None:
            return _lost(name, shape, example.dtype,
                         f"elements of it are in rank {span.rank:,}'s optimizer states, which are "
                         "missing")
        t = groups[span.group]
        pieces.append(Piece(t.source, t.offset + span.start * itemsize, span.count * itemsize))
    source = JoinedSource(pieces, name=pieces[0].source.root().name) if pieces else None
    return Tensor(name, example.dtype, shape, 0, math.prod(shape) * itemsize, source=source,
                  info={"torch_dtype": example.info.get("torch_dtype"),
                        "zero": {"from": "fp32 master weights", "stage": stage,
                                 "spans": [list(s) for s in spans]}})


def lone_sentence(name: str) -> str | None:
    """What a ZeRO file opened by itself is part of (detect.py says it), else None."""
    if not is_member(name):
        return None
    if deepspeed_parallel.is_layer(name):
        layer, _ = deepspeed_parallel.layer_of(name)
        return (f"this is layer {layer:,} of a DeepSpeed pipeline checkpoint (one file per layer): "
                "open the folder to see the layers as one model")
    role, rank, _ = _rank(name)
    return (f"this is the {role} of rank {rank:,} of a DeepSpeed ZeRO checkpoint: the model's fp32 "
            "master weights are split over the folder's *_optim_states.pt files; open the folder "
            "(the tag folder, or the one with `latest`) to see them as one model")
