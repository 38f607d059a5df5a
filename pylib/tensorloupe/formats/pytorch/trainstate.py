"""Training state recognised in an unpickled torch checkpoint, summarised from the whole object.

`summaries(root)` is what common.checkpoint adds to extras: "optimizer" for an optimizer's
state_dict, "object" for a pickled object with a dict state (a dataclass such as transformers'
TrainingArguments in training_args.bin), each built from the unpickled values, not from the
rendered metadata, whose containers are cut at a limit.

An optimizer's state_dict:

`torch.optim.Optimizer.state_dict()` (what the Trainer's optimizer.pt and accelerate's
optimizer.bin hold) is {"state": {param id: {"step": ..., "exp_avg": tensor, ...}},
"param_groups": [{"lr": ..., "betas": ..., "params": [param ids]}, ...]}. The summary says, per
parameter group, its hyperparameters, how many parameters it has and how many carry state, and
its moments (each state key's tensors, values and bytes), from the tensor references alone (no
bytes are read; a tensor "step" is named so that its value can be sampled later).
"""

from __future__ import annotations

import math

from ...unpickling.objects import Marker, SafeKey
from .allowlist import TORCH_DTYPES, TensorRef

# Hyperparameters shown per group: numbers, booleans, short lists of numbers (betas), strings.
MAX_HYPER = 24
MAX_GROUPS = 64
MAX_FIELDS = 512               # TrainingArguments has ~120


def summaries(root) -> dict:
    """The extras entries `root` gives: {"optimizer": ...}, {"object": ...} or {}."""
    found = optimizer(root)
    if found is not None:
        return {"optimizer": found}
    found = object_fields(root)
    return {} if found is None else {"object": found}


def object_fields(root) -> dict | None:
    """{"class", "fields": {name: scalar}, "field_count"} of an object pickled with a dict
    state (its class is a marker: never imported). An enum member (a marker of its class called
    with one plain value, as TrainingArguments' SchedulerType("linear")) is shown as its value."""
    if type(root) is not Marker or type(root.state) is not dict:
        return None
    fields = {}
    for key, value in root.state.items():
        if len(fields) >= MAX_FIELDS:
            break
        if type(value) is Marker and len(value.args) == 1:
            value = value.args[0]
        shown = _scalar(value)
        if shown is not None or value is None:
            fields[str(_plain(key))] = shown
    return {"class": root.name, "fields": fields, "field_count": len(root.state)}


def _plain(key):
    return key.value if type(key) is SafeKey else key


def _scalar(value):
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return value[:80]
    if type(value) in (list, tuple) and len(value) <= 4 and \
            all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def optimizer(root) -> dict | None:
    """{"groups": [{"params", "with_state", "hyperparameters", "moments": {key: {"tensors",
    "values", "bytes"}}, "step": number or {"tensor": name} or None}], "param_count",
    "params_with_state"}, or None if `root` is not an optimizer state_dict."""
    if type(root) is not dict or type(root.get("state")) is not dict or \
            type(root.get("param_groups")) is not list:
        return None
    groups = root["param_groups"]
    if not all(type(g) is dict and type(g.get("params")) is list for g in groups):
        return None
    state = {_plain(k): v for k, v in root["state"].items()}
    out_groups = []
    for group in groups[:MAX_GROUPS]:
        ids = [p for p in group["params"] if isinstance(p, (int, str))]
        moments: dict[str, dict] = {}
        step = None
        with_state = 0
        for pid in ids:
            entry = state.get(pid)
            if type(entry) is not dict:
                continue
            with_state += 1
            for key, value in entry.items():
                key = str(_plain(key))
                if key == "step" and step is None:
                    step = ({"tensor": f"state.{pid}.step"} if type(value) is TensorRef
                            else _scalar(value))
                    continue
                if key == "step" or type(value) is not TensorRef:
                    continue
                shape = value.size if all(type(n) is int and n >= 0 for n in value.size) else ()
                numel = math.prod(shape)
                count = moments.setdefault(key, {"tensors": 0, "values": 0, "bytes": 0})
                count["tensors"] += 1
                count["values"] += numel
                count["bytes"] += numel * TORCH_DTYPES.get(value.dtype, (None, 1))[1]
        hyper = {}
        for key, value in group.items():
            key = str(_plain(key))
            if key == "params" or len(hyper) >= MAX_HYPER:
                continue
            shown = _scalar(value)
            if shown is not None or value is None:
                hyper[key] = shown
        out_groups.append({"params": len(ids), "with_state": with_state,
                           "hyperparameters": hyper, "moments": moments, "step": step})
    return {"groups": out_groups, "group_count": len(groups),
            "param_count": sum(len(g["params"]) for g in groups),
            "params_with_state": len(state)}
