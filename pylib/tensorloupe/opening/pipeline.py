"""diffusers pipeline folders (DiffusionPipeline.save_pretrained): one model of components.

    model_index.json        {"_class_name": "StableDiffusionPipeline", "unet": ["diffusers",
                            "UNet2DConditionModel"], "scheduler": [...], "safety_checker": [null, null]}
    unet/config.json        the component's own config
    unet/diffusion_pytorch_model.safetensors   (or its shards and index, or a .bin)
    vae/ text_encoder/ ...  the same; scheduler/ and tokenizer/ hold no weights
A folder with a model_index.json opens as ONE checkpoint: each component's files are opened as
any checkpoint (shards.open_all), and its tensors are named "<component>/<tensor>". The names
decide which files a component has (`preferred`, in grouping.py's rule: the CLI's folder targets
and the page's file list alike); the pipeline class and the components are extras["pipeline"].
"""

from __future__ import annotations

import json
import posixpath

from ..display import counted
from ..errors import FormatError, LimitError, UsageError
from ..model import Checkpoint
from ..source import ByteSource
from .beside import CONFIG_NAME, MAX_CONFIG_BYTES

FORMAT = "diffusers"
MODEL_INDEX = "model_index.json"
MAX_COMPONENTS = 64
# What a component's config.json says about its architecture, shown per component.
CONFIG_FIELDS = ("_class_name", "architectures", "model_type", "in_channels", "out_channels",
                 "latent_channels", "block_out_channels", "layers_per_block", "cross_attention_dim",
                 "attention_head_dim", "sample_size", "hidden_size", "intermediate_size",
                 "num_hidden_layers", "num_attention_heads", "vocab_size", "torch_dtype")
VARIANT_MARKS = (".fp16.", ".bf16.", ".fp32.", ".ema.", ".non_ema.")


def is_index(name: str) -> bool:
    return _base(name) == MODEL_INDEX


def _base(name: str) -> str:
    return name.replace("\\", "/").rsplit("/", 1)[-1]


def _path_of(source: ByteSource) -> str:
    """The path a source was opened from (FileSource.path, a URL), else its name."""
    root = source.root()
    return str(getattr(root, "path", None) or getattr(root, "url", None) or source.name)


def preferred(groups: list) -> list:
    """A component folder may hold the weights twice (diffusion_pytorch_model.safetensors and
    .fp16.safetensors, or .bin beside .safetensors): diffusers loads the plain safetensors one
    unless asked for a variant. The groups sorted so, best first (grouping.Group members)."""
    def rank(g):
        name = _base(str(g.name)).lower()
        return (any(mark in name for mark in VARIANT_MARKS), ".safetensors" not in name, name)
    return sorted(groups, key=rank)


def open_sources(sources: list[ByteSource], read_set) -> Checkpoint:
    """The pipeline the sources make: its model_index.json, each component's config.json and
    model files (grouped by the folder they are in); `read_set(sources)` opens one component's
    model files as one checkpoint (shards.open_all)."""
    indexes = [s for s in sources if is_index(s.name)]
    if len(indexes) > 1:
        raise UsageError(f"more than one {MODEL_INDEX} was given")
    index_source = indexes[0]
    index = _json(index_source, MODEL_INDEX)
    root = posixpath.dirname(_path_of(index_source).replace("\\", "/"))
    by_component: dict[str, list[ByteSource]] = {}
    for s in sources:
        if s is index_source:
            continue
        folder = posixpath.dirname(_path_of(s).replace("\\", "/"))
        component = posixpath.basename(folder) if posixpath.dirname(folder) == root else None
        if component is None:
            raise UsageError(f"{s.name} is not in a component folder beside {MODEL_INDEX}",
                             file=s.name)
        by_component.setdefault(component, []).append(s)
    declared = {k: v for k, v in index.items() if not k.startswith("_")}
    if len(by_component) > MAX_COMPONENTS:
        raise LimitError(f"the pipeline has more than {MAX_COMPONENTS:,} components",
                         file=MODEL_INDEX, format=FORMAT)
    tensors, warnings, components, safety, all_sources = [], [], [], [], [index_source]
    for name in sorted(set(by_component) | {k for k, v in declared.items() if _library(v)}):
        given = by_component.get(name, [])
        configs = [s for s in given if _base(s.name) == CONFIG_NAME]
        models = [s for s in given if s not in configs]
        entry = {"name": name, "library": _library(declared.get(name)),
                 "class": _class(declared.get(name)), "files": [_base(s.name) for s in models]}
        if name not in declared:
            warnings.append(f"the folder {name}/ is not a component {MODEL_INDEX} names")
        if configs:
            try:
                config = _json(configs[0], f"{name}/{CONFIG_NAME}")
                entry["config"] = {k: config[k] for k in CONFIG_FIELDS if k in config}
            except FormatError as e:
                warnings.append(f"{name}/{CONFIG_NAME}: {e.message}")
            all_sources += configs
        if models:
            part = read_set(models)
            all_sources += models
            for t in part.tensors:
                t.name = f"{name}/{t.name}"
                tensors.append(t)
            warnings += [f"{name}: {w}" for w in part.warnings]
            entry.update(format=part.format, tensors=len(part.tensors),
                         parameters=part.parameter_count, bytes=part.size)
            if "safety" in part.extras:
                safety.append((name, part.extras["safety"]))
        components.append(entry)
    if not tensors:
        raise UsageError(f"the pipeline's folders hold no model files (only {MODEL_INDEX} and "
                         "configs were given)", file=MODEL_INDEX)
    extras = {"pipeline": {"class": index.get("_class_name"),
                           "diffusers_version": index.get("_diffusers_version"),
                           "components": components}}
    if safety:
        from ..formats.multifile import merge_reports
        extras["safety"] = merge_reports(safety)
    label = posixpath.basename(root) or MODEL_INDEX
    with_weights = sum(1 for c in components if c.get("tensors"))
    ckpt = Checkpoint(FORMAT, f"{label} ({index.get('_class_name') or 'diffusers pipeline'}, "
                      f"{counted(with_weights, 'component')} with weights)",
                      sum(s.size for s in all_sources), tensors,
                      metadata={MODEL_INDEX: index}, warnings=warnings, extras=extras,
                      sources=all_sources)
    return ckpt


def _json(source: ByteSource, what: str) -> dict:
    if source.size > MAX_CONFIG_BYTES:
        raise LimitError(f"{what} is larger than {MAX_CONFIG_BYTES:,} bytes", file=what,
                         format=FORMAT)
    try:
        value = json.loads(source.read(0, source.size).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise FormatError(f"{what} is not JSON: {type(e).__name__}", file=what,
                          format=FORMAT) from e
    if not isinstance(value, dict):
        raise FormatError(f"{what} is not a JSON object", file=what, format=FORMAT)
    return value


def _library(value) -> str | None:
    return value[0] if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str) \
        else None


def _class(value) -> str | None:
    return value[1] if isinstance(value, list) and len(value) == 2 and isinstance(value[1], str) \
        else None
