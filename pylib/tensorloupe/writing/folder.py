"""A model folder as transformers' `from_pretrained` reads it: the weights (one
`model.safetensors`, or a shard set with its index), `config.json`, and the small files that
travel beside the source's weights (the tokenizer's, generation_config.json), copied as they are.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Callable

from ..errors import UsageError
from ..model import Checkpoint
from .plan import SINGLE_NAME, Entry
from . import safetensors as writer

# Copied from beside the source into the folder, byte for byte (none is code).
SIDE_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt")
CONFIG_NAME = "config.json"


def write_model(ckpt: Checkpoint, out: str, entries: list[Entry], config: dict | None,
                max_shard_size: int | None = None, version: str = "",
                progress: Callable[[int, int], object] | None = None,
                extra: dict[str, str] | None = None, strict: bool = True,
                skipped: list[tuple[str, str]] | None = None) -> list[str]:
    """Write the folder `out`; returns the paths written (weights first, then config.json and
    the copied side files). `strict`, `skipped`: as writing.safetensors.write takes them."""
    here = os.path.realpath(out)
    if any(os.path.dirname(path) == here for path in writer.inputs(ckpt)):
        raise UsageError(f"refusing to write into {out}: it holds the source (its config.json "
                         "and files would be replaced); give another folder")
    os.makedirs(out, exist_ok=True)
    written = writer.write(ckpt, weights_target(out, max_shard_size), entries, max_shard_size,
                           version, progress, extra, strict, skipped)
    if config is not None:
        path = os.path.join(out, CONFIG_NAME)
        tmp = writer.temporary(path)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)
        written.append(path)
    for name in SIDE_FILES:
        source = _beside(ckpt, name)
        if source is not None and not os.path.exists(os.path.join(out, name)):
            shutil.copyfile(source, os.path.join(out, name))
            written.append(os.path.join(out, name))
    return written


def weights_target(out: str, max_shard_size: int | None) -> str:
    """What the weights writer is given: the folder of a shard set, or the one file in it."""
    return out if max_shard_size is not None else os.path.join(out, SINGLE_NAME)


def _beside(ckpt: Checkpoint, name: str) -> str | None:
    for path in writer.inputs(ckpt):
        candidate = os.path.join(os.path.dirname(path), name)
        if os.path.isfile(candidate):
            return candidate
    return None
