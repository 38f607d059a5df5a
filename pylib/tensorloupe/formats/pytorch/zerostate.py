"""What one file of a DeepSpeed ZeRO checkpoint says about the model, from its unpickled object.

DeepSpeed's engine (runtime/engine.py `_save_checkpoint`, `_save_zero_checkpoint`) writes per
rank, into `global_stepN/`:
  - `mp_rank_00_model_states.pt` (ZeRO 1/2; `zero_pp_rank_R_mp_rank_00_model_states.pt` per rank
    with ZeRO 3): {"module": the module's state_dict (ZeRO 3: parameters as empty tensors),
    "buffer_names": [...], "param_shapes": [OrderedDict(name -> torch.Size)] per optimizer
    parameter group, "frozen_param_shapes", "frozen_param_fragments" (parameters without
    gradients: whole with ZeRO 2, this rank's slice with ZeRO 3), "shared_params" {alias: name},
    "ds_version", "dp_world_size", "global_steps", ...};
  - `zero_pp_rank_R_mp_rank_00_optim_states.pt` (`bf16_zero_...` from the bf16 optimizer):
    {"optimizer_state_dict": {"zero_stage": ZeroStageEnum(N), "partition_count",
    "single_partition_of_fp32_groups" (ZeRO 1/2) or "fp32_flat_groups" (ZeRO 3): this rank's
    slice of each group's flat fp32 master weights, "param_alignment_paddings" (newer writers),
    the torch optimizer's own state_dict under "base_optimizer_state" (1/2) or
    "optimizer_state_dict" (3)}, "ds_config", "ds_version"}.
`summaries(root, name_of)` gives extras["deepspeed"] (tensors named as the file's table names
them, by `name_of(TensorRef)`) and, for an optimizer file, extras["optimizer"]
(trainstate.optimizer of the torch optimizer's state_dict inside it). ZeroStageEnum is a
DeepSpeed class (an inert Marker here): its one argument is the stage.
"""

from __future__ import annotations

from ...unpickling.objects import Marker, SafeKey
from . import trainstate
from .allowlist import TensorRef

MODEL_STATES, OPTIMIZER_STATES = "model states", "optimizer states"
MAX_PARAMS = 1 << 20            # parameter names listed in param_shapes (real models: thousands)
MAX_DIMS = 64
OPTIMIZER_KEYS = ("base_optimizer_state", "optimizer_state_dict")   # ZeRO 1/2, ZeRO 3
FLAT_KEYS = ("single_partition_of_fp32_groups", "fp32_flat_groups")


# Non-negative ints below the hash modulus hash to themselves, so no two collide: only those are
# unwrapped. Any other wrapped key stays a SafeKey (its hash is not the file's to choose), or a
# hostile pickle's 40,000 keys that all hash to 0 would make building this dict quadratic.
DISTINCT_HASHES = (1 << 61) - 1


def _plain(value):
    if type(value) is SafeKey and type(value.value) is int and 0 <= value.value < DISTINCT_HASHES:
        return value.value
    return value


def _dict(value) -> dict | None:
    return {_plain(k): v for k, v in value.items()} if type(value) is dict else None


def _int(value) -> int | None:
    if type(value) is Marker and len(value.args) == 1:   # an enum member: ZeroStageEnum(2)
        value = value.args[0]
    return value if type(value) is int else None


def _shape(value) -> list[int] | None:
    if type(value) in (tuple, list) and len(value) <= MAX_DIMS and \
            all(type(n) is int and 0 <= n < 1 << 63 for n in value):
        return list(value)
    return None


def _shapes(value) -> list | None:
    """[[name, shape], ...] of an OrderedDict(name -> torch.Size), or None if it is not one."""
    found = _dict(value)
    if found is None or len(found) > MAX_PARAMS:
        return None
    out = [[k, _shape(v)] for k, v in found.items()]
    return out if all(type(k) is str and s is not None for k, s in out) else None


def _tensors(value, name_of) -> dict | None:
    found = _dict(value)
    if found is None:
        return None
    return {k: name_of(v) for k, v in found.items() if type(k) is str and type(v) is TensorRef}


def summaries(root, name_of) -> dict:
    """{"deepspeed": ..., ["optimizer": ...]} for a ZeRO file's root object, else {}."""
    top = _dict(root)
    if top is None:
        return {}
    if "param_shapes" in top and "buffer_names" in top:
        return {"deepspeed": _model_states(top, name_of)}
    inner = _dict(top.get("optimizer_state_dict"))
    if inner is not None and "zero_stage" in inner and any(k in inner for k in FLAT_KEYS):
        return _optimizer_states(top, inner, name_of)
    return {}


def _model_states(top: dict, name_of) -> dict:
    groups = top["param_shapes"]
    groups = [_shapes(g) for g in groups] if type(groups) is list else None
    names = top["buffer_names"]
    shared = _dict(top.get("shared_params")) or {}
    frozen = top.get("frozen_param_shapes")
    return {"role": MODEL_STATES,
            "param_shapes": None if groups is None or None in groups else groups,
            "buffer_names": [n for n in names if type(n) is str] if type(names) is list else [],
            "module": _tensors(top.get("module"), name_of) or {},
            "frozen_param_shapes": [] if frozen is None else _shapes(frozen),
            "frozen_fragments": _tensors(top.get("frozen_param_fragments"), name_of) or {},
            "shared_params": [[k, v] for k, v in shared.items()
                              if type(k) is str and type(v) is str],
            "ds_version": top.get("ds_version") if type(top.get("ds_version")) is str else None,
            "dp_world_size": _int(top.get("dp_world_size")),
            "mp_world_size": _int(top.get("mp_world_size")),
            "global_steps": _int(top.get("global_steps"))}


def _optimizer_states(top: dict, inner: dict, name_of) -> dict:
    key = next(k for k in FLAT_KEYS if k in inner)
    flat = inner[key]
    count = inner.get("partition_count")
    paddings = inner.get("param_alignment_paddings")
    if type(paddings) is list and all(type(g) is list and all(type(n) is int and n >= 0
                                                              for n in g) for g in paddings):
        paddings = [list(g) for g in paddings]
    else:
        paddings = None
    out = {"deepspeed": {
        "role": OPTIMIZER_STATES,
        "zero_stage": _int(inner.get("zero_stage")),
        "partition_count": [_int(c) for c in count] if type(count) is list else _int(count),
        "flat_key": key,
        "flat_groups": [name_of(t) if type(t) is TensorRef else None for t in flat]
        if type(flat) is list else None,
        "alignment_paddings": paddings,
        "ds_version": top.get("ds_version") if type(top.get("ds_version")) is str else None}}
    for k in OPTIMIZER_KEYS:
        found = trainstate.optimizer(inner.get(k))
        if found is not None:   # its step tensors, named as the file's table names them
            prefix = f"optimizer_state_dict.{k}."
            for g in found["groups"]:
                if isinstance(g["step"], dict):
                    g["step"] = {"tensor": prefix + g["step"]["tensor"]}
            out["optimizer"] = found
            break
    return out
