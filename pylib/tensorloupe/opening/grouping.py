"""Which files form one checkpoint: the one rule, by names only, for the CLI and the page alike.

A file's name puts it in one of four kinds:
  - a part of a set: `<stem>-00001-of-00003.safetensors|gguf|bin`, or the set's index
    `<stem>.safetensors.index.json` / `<stem>.bin.index.json` (transformers 4.x's
    `pytorch_model.bin.index.json`); the set is keyed by folder, stem and extension;
  - a file beside a model (`config.json`, `tokenizer.json`, `tokenizer_config.json`,
    `adapter_config.json`), which goes
    with the checkpoint of its folder and is not one itself;
  - a training run's state beside its model (training.py's FILES: optimizer.pt, scheduler.pt,
    rng_state.pth, training_args.bin, trainer_state.json; accelerate's optimizer.bin, ...): it
    goes with the one checkpoint of its folder, which opens as the model plus its training
    state; in a folder without exactly one model, such a file is what its name says otherwise
    (a model file by its extension, or nothing);
  - a torch.distributed.checkpoint folder's files (`.metadata` and `__R_S.distcp`): one set
    per folder, which opens as one checkpoint (the .metadata says what the data files hold);
  - an ONNX model's external data (`model.onnx.data`, `model.onnx_data`: detect.BESIDE_DATA):
    it goes with the one .onnx model of its folder, whose entry opens both;
  - a DeepSpeed ZeRO tag folder's files (`*_model_states.pt`, `*_optim_states.pt`): one set per
    folder, opened as one model with its training state (opening/deepspeed.py);
  - a model file: any extension a reader takes (detect.EXTENSIONS);
  - anything else (README.md, .gitattributes): not a checkpoint.
The CLI's folder targets (targets.py) and the page's file list (web/files.py) both group with
`group` below, so a folder lists the same checkpoints wherever it is opened.
"""

from __future__ import annotations

from typing import Callable, Generic, NamedTuple, TypeVar

from .beside import ADAPTER_CONFIG_NAME, CONFIG_NAME, HF_QUANT_CONFIG_NAME, TOKENIZER_CONFIG_NAME, TOKENIZER_NAME
from .detect import EXTENSIONS, is_external_data
from .pipeline import MODEL_INDEX, is_index as is_pipeline_index, preferred
from .shards import PART_NAME
from .training import is_part as is_training_part
from .deepspeed import is_member as is_zero_file
from ..formats.multifile import DATA_EXTENSION, METADATA_NAME, is_member as is_dcp_file

# A shard set's index, by the extension of the shards it names: transformers writes
# model.safetensors.index.json, and (4.x, safe_serialization=False) pytorch_model.bin.index.json.
INDEX_SUFFIXES = {".safetensors.index.json": "safetensors", ".bin.index.json": "bin"}
BESIDE = (CONFIG_NAME, TOKENIZER_NAME, TOKENIZER_CONFIG_NAME, ADAPTER_CONFIG_NAME, HF_QUANT_CONFIG_NAME)
ONNX_EXTENSION = ".onnx"

PART, INDEX, ALONGSIDE, TRAINING, DCP, ZERO, MODEL, OTHER, DATA = (
    "part", "index", "beside", "training", "dcp", "zero", "model", "other", "data")
DCP_SET = (METADATA_NAME, DATA_EXTENSION.lstrip("."))     # a DCP folder's set key (stem, ext)
ZERO_SET = ("*_states", "pt")                             # a ZeRO tag folder's set key

Item = TypeVar("Item")


def index_of(name: str) -> tuple[str, str] | None:
    """(stem, shard extension) if `name` is a shard set's index, else None."""
    lower = name.lower()
    for suffix, ext in INDEX_SUFFIXES.items():
        if lower.endswith(suffix):
            return name[:-len(suffix)], ext
    return None


def is_index_name(name: str) -> bool:
    return index_of(name) is not None


def kind_of(name: str) -> str:
    lower = name.lower()
    if is_dcp_file(name):
        return DCP
    if is_zero_file(name):
        return ZERO
    if PART_NAME.match(name):
        return PART
    if is_index_name(name):
        return INDEX
    if name in BESIDE:
        return ALONGSIDE
    if is_training_part(name):
        return TRAINING
    if lower.endswith(EXTENSIONS):
        return MODEL
    if is_external_data(name):
        return DATA
    return OTHER


class Group(NamedTuple, Generic[Item]):
    """One checkpoint: its files (sorted by name; a training run's state after the model's),
    the set's name pattern or the file's name, and whether it is a set of parts (one part alone
    is a set too: its missing parts get named)."""
    directory: str
    name: str
    members: list
    is_set: bool
    first: int       # position of its first file among those given (the list keeps that order)


def group(items: list, name: Callable[[object], str], directory: Callable[[object], str],
          listed: Callable[[object], bool] = lambda item: True) -> list[Group]:
    """The checkpoints among `items`, in the order their first file was given. Files beside a
    model and names that are not checkpoints are left out (`listed` may admit other single
    files: the page lists any file picked by hand)."""
    sets: dict[tuple, list] = {}
    singles: list = []
    position = {id(item): i for i, item in enumerate(items)}
    state: dict[str, list] = {}
    data: dict[str, list] = {}
    for item in items:
        item_name, kind = name(item), kind_of(name(item))
        if kind == DATA:
            data.setdefault(directory(item), []).append(item)
            continue
        if kind == TRAINING:
            state.setdefault(directory(item), []).append(item)
            continue
        if kind == PART:
            m = PART_NAME.match(item_name)
            sets.setdefault((directory(item), m["stem"], m["ext"]), []).append(item)
        elif kind == DCP:
            sets.setdefault((directory(item), *DCP_SET), []).append(item)
        elif kind == ZERO:
            sets.setdefault((directory(item), *ZERO_SET), []).append(item)
        elif kind == INDEX:
            sets.setdefault((directory(item), *index_of(item_name)), []).append(item)
        elif kind == MODEL or (kind == OTHER and listed(item)):
            singles.append(item)
    groups = []
    for (folder, stem, ext), members in sets.items():
        counts = sorted({int(m["count"]) for m in map(PART_NAME.match, map(name, members)) if m})
        members = sorted(members, key=name)
        if (stem, ext) == DCP_SET:
            held = sum(1 for m in members if name(m) != METADATA_NAME)
            label = f"{METADATA_NAME} + {held} {DATA_EXTENSION} (torch.distributed.checkpoint)"
        elif (stem, ext) == ZERO_SET:
            label = f"{len(members)} DeepSpeed ZeRO files (*_model_states.pt, *_optim_states.pt)"
        elif len(members) == 1:
            label = name(members[0])
        elif len(counts) == 1:
            label = f"{stem}-*-of-{counts[0]:05d}.{ext}"
        else:
            label = f"{stem}-*.{ext}"
        groups.append(Group(folder, label, members, True,
                            min(position[id(m)] for m in members)))
    groups += [Group(directory(s), name(s), [s], False, position[id(s)]) for s in singles]
    for folder, files in state.items():
        models = [i for i, g in enumerate(groups) if g.directory == folder
                  and kind_of(name(g.members[0])) in (PART, INDEX, DCP, ZERO, MODEL)]
        files = sorted(files, key=name)
        if len(models) == 1:
            g = groups[models[0]]
            groups[models[0]] = g._replace(
                name=f"{g.name} + training state", members=g.members + files,
                first=min(g.first, *(position[id(f)] for f in files)))
        else:   # no one model to go with: each file is what its name says without the rule
            groups += [Group(folder, name(f), [f], False, position[id(f)]) for f in files
                       if name(f).lower().endswith(EXTENSIONS) or listed(f)]
    for folder, files in data.items():
        models = [i for i, g in enumerate(groups) if g.directory == folder
                  and name(g.members[0]).lower().endswith(ONNX_EXTENSION)]
        if len(models) == 1:    # the external data of the folder's one ONNX model
            g = groups[models[0]]
            groups[models[0]] = g._replace(members=g.members + sorted(files, key=name))
        else:
            groups += [Group(folder, name(f), [f], False, position[id(f)]) for f in files
                       if listed(f)]
    return sorted(_pipelines(items, groups, name, directory, position), key=lambda g: g.first)


def _pipelines(items: list, groups: list[Group], name, directory, position) -> list[Group]:
    """A diffusers folder (pipeline.py: a model_index.json, its components in subfolders) is
    one checkpoint: its index, each component's preferred model files and config.json."""
    indexes = {directory(i): i for i in items if is_pipeline_index(name(i))}
    if not indexes:
        return groups
    parent = {}
    for g in groups:
        up = g.directory.rsplit("/", 1)[0] if "/" in g.directory else ""
        if up in indexes and g.directory != up:
            parent.setdefault(up, {}).setdefault(g.directory, []).append(g)
    kept = [g for g in groups if not any(g in gs for by in parent.values() for gs in by.values())]
    for folder, by_component in parent.items():
        chosen = [preferred(gs)[0] for _, gs in sorted(by_component.items())]
        configs = [i for i in items if name(i) == CONFIG_NAME and directory(i) in by_component]
        members = [indexes[folder]] + [m for g in chosen for m in g.members] + configs
        label = f"{folder.rsplit('/', 1)[-1] or MODEL_INDEX} (diffusers pipeline, {len(chosen)} components)"
        kept.append(Group(folder, label, members, True, min(position[id(m)] for m in members)))
    return kept
