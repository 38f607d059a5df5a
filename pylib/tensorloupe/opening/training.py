"""A training run's saved state beside its model: the Trainer's `checkpoint-N/` and accelerate's
`save_state` folders, opened as the model plus its training state.

transformers' `Trainer._save_checkpoint` writes, beside the model (model.safetensors or
pytorch_model.bin, config.json): optimizer.pt (the optimizer's state_dict), scheduler.pt,
rng_state.pth (rng_state_N.pth per process), training_args.bin (a torch.save of the
TrainingArguments dataclass: a pickle that names transformers' classes), trainer_state.json (step,
epoch, log history), and scaler.pt with fp16. accelerate's `Accelerator.save_state` writes
model.safetensors, optimizer.bin, scheduler.bin, random_states_N.pkl (a torch.save of Python, NumPy
and torch RNG states), sampler.bin, scaler.pt and custom_checkpoint_N.pkl (model_1.safetensors,
optimizer_1.bin... for the second of each).

These files are known by name (FILES below, the one table: grouping.py puts them with the model of
their folder, shards.py splits them off). Each is read by its own reader, for its summary and its
own pickle safety report; none of its tensors is the model's, so none is counted as a parameter.
extras["training"] = {"kind": "transformers Trainer" | "accelerate" | "training state",
"parts": [{"file", "kind", "format", "size", "summary", "safety" (pickles) or "error"}]}.
"""

from __future__ import annotations

import json
import math
import re
from typing import NamedTuple

from ..errors import FormatError, LimitError, TensorloupeError
from ..model import Checkpoint
from ..source import ByteSource

OPTIMIZER, SCHEDULER, RNG, ARGS, STATE, SCALER, SAMPLER, CUSTOM = (
    "optimizer", "scheduler", "rng", "training arguments", "trainer state", "loss scaler",
    "sampler", "custom state")
TRAINER, ACCELERATE, DEEPSPEED = "transformers Trainer", "accelerate", "DeepSpeed ZeRO"
MODEL_STATES, PIPELINE_LAYER = "model states", "pipeline layer"
# deepspeed/runtime/engine.py _get_ckpt_name, _get_zero_ckpt_name (bf16_ from the bf16 optimizer):
# a ZeRO checkpoint's files (opening/deepspeed.py opens them together)
ZERO_MODEL_STATES = re.compile(r"(?:zero_pp_rank_(?P<rank>\d+)_)?mp_rank_(?P<mp>\d+)"
                               r"_model_states\.pt")
ZERO_OPTIM_STATES = re.compile(r"(?P<bf16>bf16_)?zero_pp_rank_(?P<rank>\d+)_mp_rank_(?P<mp>\d+)"
                               r"_optim_states\.pt")
# deepspeed/runtime/pipe/module.py ckpt_layer_path: a pipeline layer's weights (opened with the
# folder by opening/deepspeed_parallel.py; alone, it says it is one layer)
ZERO_LAYER_STATES = re.compile(r"layer_(?P<layer>\d+)(?:-model_(?P<mp>\d+))?-model_states\.pt")

# (name pattern, kind, whose file): transformers' trainer.py constants (OPTIMIZER_NAME,
# SCHEDULER_NAME, TRAINING_ARGS_NAME, TRAINER_STATE_NAME, SCALER_NAME, rng_state[_N].pth) and
# accelerate's utils/constants.py (OPTIMIZER_NAME "optimizer" + ".bin", RNG_STATE_NAME
# "random_states" + "_N.pkl", SAMPLER_NAME, SCALER_NAME, custom_checkpoint_N.pkl).
FILES = [
    (re.compile(r"optimizer\.pt"), OPTIMIZER, TRAINER),
    (re.compile(r"scheduler\.pt"), SCHEDULER, TRAINER),
    (re.compile(r"rng_state(_\d+)?\.pth"), RNG, TRAINER),
    (re.compile(r"training_args\.bin"), ARGS, TRAINER),
    (re.compile(r"trainer_state\.json"), STATE, TRAINER),
    (re.compile(r"optimizer(_\d+)?\.bin"), OPTIMIZER, ACCELERATE),
    (re.compile(r"scheduler(_\d+)?\.bin"), SCHEDULER, ACCELERATE),
    (re.compile(r"random_states_\d+\.pkl"), RNG, ACCELERATE),
    (re.compile(r"sampler(_\d+)?\.bin"), SAMPLER, ACCELERATE),
    (re.compile(r"custom_checkpoint_\d+\.pkl"), CUSTOM, ACCELERATE),
    (re.compile(r"scaler\.pt"), SCALER, None),
    (ZERO_OPTIM_STATES, OPTIMIZER, DEEPSPEED),
    (ZERO_MODEL_STATES, MODEL_STATES, DEEPSPEED),
    (ZERO_LAYER_STATES, PIPELINE_LAYER, DEEPSPEED),
]
JSON_KINDS = (STATE,)
MAX_STATE_BYTES = 64 << 20     # trainer_state.json: a few KB, a long run's log history a few MB
MAX_LOG = 2000                 # log_history entries kept (the rest counted)
LOG_KEYS = ("step", "epoch", "loss", "eval_loss", "learning_rate", "grad_norm")
STATE_KEYS = ("global_step", "epoch", "max_steps", "num_train_epochs", "train_batch_size",
              "logging_steps", "save_steps", "eval_steps", "total_flos", "num_input_tokens_seen",
              "best_metric", "best_global_step", "best_model_checkpoint")
# TrainingArguments fields shown (the dataclass has ~120): what a run is, in a dozen lines.
ARGS_FIELDS = ("learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size",
               "gradient_accumulation_steps", "weight_decay", "warmup_steps", "warmup_ratio",
               "lr_scheduler_type", "optim", "seed", "bf16", "fp16", "save_steps",
               "logging_steps", "output_dir")
MAX_STEP_BYTES = 16            # a step counter is one float32/int64/float64


class Part(NamedTuple):
    """One training file as read: its Checkpoint (pickles) or its JSON object, or the error."""
    name: str
    size: int
    kind: str
    checkpoint: Checkpoint | None = None
    data: dict | None = None
    error: TensorloupeError | None = None


def match(name: str) -> tuple[str, str | None] | None:
    """(kind, whose file) of a training file's name, else None."""
    for pattern, kind, whose in FILES:
        if pattern.fullmatch(name):
            return kind, whose
    return None


def is_part(name: str) -> bool:
    return match(basename(name)) is not None


def is_json_part(name: str) -> bool:
    found = match(basename(name))
    return found is not None and found[0] in JSON_KINDS


def read_json(source: ByteSource) -> Part:
    """trainer_state.json, parsed (bounded); its errors are the part's."""
    name = basename(source.name)
    try:
        if source.size > MAX_STATE_BYTES:
            raise LimitError(f"{name} is too large", file=name, expected=f"at most "
                             f"{MAX_STATE_BYTES:,} bytes", found=source.size)
        try:
            value = json.loads(source.read(0, source.size).decode("utf-8"))
        except UnicodeDecodeError as e:
            raise FormatError("the file is not valid UTF-8", file=name, format="json",
                              offset=e.start) from e
        except (json.JSONDecodeError, RecursionError) as e:
            raise FormatError(f"the file is not valid JSON: {getattr(e, 'msg', e)}", file=name,
                              format="json", offset=getattr(e, "pos", None)) from e
        if not isinstance(value, dict):
            raise FormatError("the file is not a JSON object", file=name, format="json",
                              found=type(value).__name__)
        return Part(name, source.size, STATE, data=value)
    except TensorloupeError as e:
        return Part(name, source.size, STATE, error=e)


def part_of(source: ByteSource, read) -> Part:
    """A training file read: `read(source)` gives its Checkpoint, or a Part already (JSON)."""
    name = basename(source.name)
    try:
        got = read(source)
    except TensorloupeError as e:
        return Part(name, source.size, match(name)[0], error=e)
    if isinstance(got, Part):
        return got
    return Part(name, source.size, match(name)[0], checkpoint=got)


def report(parts: list[Part]) -> tuple[dict, list[str]]:
    """extras["training"] and the warnings (a part that could not be read)."""
    whose = {match(p.name)[1] for p in parts} - {None}
    kind = whose.pop() if len(whose) == 1 else "training state"
    out, warnings = [], []
    for p in sorted(parts, key=lambda p: p.name):
        entry = {"file": p.name, "kind": p.kind, "size": p.size}
        if p.error is not None:
            entry.update(format=p.error.format, error=str(p.error))
            warnings.append(f"the {p.kind} ({p.name}) cannot be read: {p.error}")
        elif p.checkpoint is not None:
            entry.update(format=p.checkpoint.format, summary=_pickled(p),
                         safety=p.checkpoint.extras.get("safety"))
            alone = (p.checkpoint.extras.pop("part_of", None) or {}).get("warning")
            warnings += [f"{p.name}: {w}" for w in p.checkpoint.warnings if w != alone]
        else:
            entry.update(format="json", summary=_trainer_state(p.data))
        out.append(entry)
    return {"kind": kind, "parts": out}, warnings


def safety_parts(parts: list[Part]) -> list[Checkpoint]:
    """The parts with a pickle safety report (to merge into the checkpoint's own)."""
    return [p.checkpoint for p in parts if p.checkpoint is not None
            and "safety" in p.checkpoint.extras]


def close(parts: list[Part]) -> None:
    for p in parts:
        if p.checkpoint is not None:
            p.checkpoint.close()


# --- summaries ----------------------------------------------------------------------------------

def _pickled(p: Part) -> dict:
    ckpt = p.checkpoint
    stored = {"tensors": len(ckpt.tensors), "values": sum(t.numel for t in ckpt.tensors),
              "bytes": sum(t.nbytes for t in ckpt.tensors)}
    if p.kind == OPTIMIZER and "optimizer" in ckpt.extras:
        return {**_optimizer(ckpt), "stored": stored}
    if p.kind == RNG:
        return {"generators": [str(k) for k in ckpt.metadata], "stored": stored}
    if p.kind == ARGS:
        return _arguments(ckpt)
    return {"state": _scalars(ckpt.metadata), "stored": stored}


def _optimizer(ckpt: Checkpoint) -> dict:
    summary = ckpt.extras["optimizer"]
    groups = []
    for g in summary["groups"]:
        step = g["step"]
        if isinstance(step, dict):
            step = _step_value(ckpt, step["tensor"])
        groups.append({**g, "step": step})
    moments: dict[str, dict] = {}
    for g in groups:
        for key, count in g["moments"].items():
            total = moments.setdefault(key, {"tensors": 0, "values": 0, "bytes": 0})
            for field in total:
                total[field] += count[field]
    return {"groups": groups, "group_count": summary["group_count"],
            "params": summary["param_count"], "params_with_state": summary["params_with_state"],
            "moments": moments}


def _step_value(ckpt: Checkpoint, name: str):
    """The value of a one-element step counter (torch.optim keeps `step` as a tensor since 1.12).
    It is read here, in opening/, as metadata: one read of at most MAX_STEP_BYTES, decoded by its
    dtype's row; anything else (a larger or unreadable tensor) is None, never a guess."""
    t = ckpt.by_name.get(name)
    info = t.dtype_info if t is not None else None
    if t is None or t.problem or info is None or t.numel != 1 or info.kind == "quant" or \
            not 0 < t.nbytes <= MAX_STEP_BYTES:
        return None
    try:
        value = info.decode(t.source.read(t.offset, t.nbytes), t.big_endian)[0]
    except TensorloupeError:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _scalars(metadata: dict) -> dict:
    """The numbers, strings and short lists of a state_dict (a scheduler's last_epoch, base_lrs)."""
    out = {}
    for key, value in metadata.items():
        if isinstance(value, (bool, int, float, str)) or value is None:
            out[str(key)] = value
        elif isinstance(value, list) and len(value) <= 16 and \
                all(isinstance(v, (bool, int, float, str)) for v in value):
            out[str(key)] = value
    return out


def _arguments(ckpt: Checkpoint) -> dict:
    """TrainingArguments as its pickle names it (formats/pytorch/trainstate.py's "object"): the
    class, and the fields of ARGS_FIELDS it has."""
    found = ckpt.extras.get("object") or {"class": None, "fields": {}, "field_count": 0}
    return {"class": found["class"], "field_count": found["field_count"],
            "fields": {k: found["fields"][k] for k in ARGS_FIELDS if k in found["fields"]}}


def _trainer_state(data: dict) -> dict:
    out = {k: data[k] for k in STATE_KEYS if k in data}
    history = data.get("log_history") if isinstance(data.get("log_history"), list) else []
    log = [{k: e[k] for k in LOG_KEYS if k in e and isinstance(e[k], (int, float))}
           for e in history[:MAX_LOG] if isinstance(e, dict)]
    out["log_history"] = [e for e in log if "loss" in e or "eval_loss" in e]
    out["log_entries"] = len(history)
    return out


def basename(name: str) -> str:
    return name.replace("\\", "/").rsplit("/", 1)[-1]
