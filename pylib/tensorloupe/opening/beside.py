"""Small files that travel beside a checkpoint: `config.json`, `tokenizer.json`,
`tokenizer_config.json`, a PEFT adapter's `adapter_config.json`.

Hugging Face model folders keep the architecture and the tokenizer next to the weights, not in
them. These are found by name in the checkpoint's own folder (a local path) or URL directory (the
same URL with the last segment replaced), read whole but bounded (a config is a few KB; a
tokenizer.json up to tens of MB), and parsed as JSON objects. A file that is absent is not an
error (most checkpoints have none); one that is present but broken or too large is, so the caller
can say so next to the numbers it did not get from it.
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple

from ..errors import FormatError, LimitError, TensorloupeError, UsageError
from ..source.remote import HttpSource, sibling_url
from ..source import is_url
from ..source.objectstore import ObjectStoreSource, is_object_url, sibling as object_sibling

CONFIG_NAME = "config.json"
TOKENIZER_NAME = "tokenizer.json"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
ADAPTER_CONFIG_NAME = "adapter_config.json"   # a PEFT adapter's settings (adapters/config.py)
HF_QUANT_CONFIG_NAME = "hf_quant_config.json"  # a ModelOpt export's scheme (quant/hfquant.py)
# A config.json is a few KB; refuse to parse anything absurd.
MAX_CONFIG_BYTES = 10 << 20
# tokenizer.json files of 256k-token vocabularies are ~20-35 MB.
MAX_TOKENIZER_BYTES = 64 << 20
# What each file beside a model is, for a user who opened it instead of the model.
ROLES = {CONFIG_NAME: "the model's configuration (config.json)",
         TOKENIZER_NAME: "the tokenizer (tokenizer.json)",
         TOKENIZER_CONFIG_NAME: "the tokenizer's settings (tokenizer_config.json)",
         ADAPTER_CONFIG_NAME: "a PEFT adapter's settings (adapter_config.json)",
         HF_QUANT_CONFIG_NAME: "a ModelOpt export's quantisation (hf_quant_config.json)"}
LIMITS = {CONFIG_NAME: MAX_CONFIG_BYTES, TOKENIZER_NAME: MAX_TOKENIZER_BYTES,
          TOKENIZER_CONFIG_NAME: MAX_CONFIG_BYTES, ADAPTER_CONFIG_NAME: MAX_CONFIG_BYTES,
          HF_QUANT_CONFIG_NAME: MAX_CONFIG_BYTES}


class Found(NamedTuple):
    """A JSON object read from beside a checkpoint: `data` (None if absent or unreadable), where
    it was looked for, and `problem` (why a file that is there could not be used)."""
    data: dict | None
    where: str
    problem: str | None = None


def sibling(target: str, name: str) -> str:
    """The path or URL of file `name` in the same folder as `target`."""
    if is_object_url(target):
        return object_sibling(target, name)
    if is_url(target):
        return sibling_url(target, name)
    return os.path.join(os.path.dirname(os.path.abspath(target)), name)


def parse_object(data: bytes, name: str = CONFIG_NAME, fmt: str = "json") -> dict:
    """A JSON file that must hold one object (config.json, tokenizer.json): a dict, or a
    FormatError naming the file."""
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise FormatError("the file is not valid UTF-8", file=name, format=fmt,
                          offset=e.start) from e
    except (json.JSONDecodeError, RecursionError) as e:
        raise FormatError(f"the file is not valid JSON: {getattr(e, 'msg', e)}", file=name,
                          format=fmt, offset=getattr(e, "pos", None)) from e
    if not isinstance(value, dict):
        raise FormatError("the file is not a JSON object", file=name, format=fmt,
                          expected="{...}", found=type(value).__name__)
    return value


def read_bounded(where: str, limit: int) -> bytes | None:
    """The whole file at a path or URL if it exists and holds at most `limit` bytes; None if it
    is not there (a URL that answers an HTTP error counts as not there)."""
    name = where.rsplit("/", 1)[-1]
    if is_url(where):
        try:
            source = ObjectStoreSource(where) if is_object_url(where) else HttpSource(where)
        except UsageError:
            return None
        try:
            if source.size > limit:
                raise LimitError(f"{name} is too large", file=name, expected=f"at most {limit:,} "
                                 "bytes", found=source.size)
            return source.read(0, source.size)
        finally:
            source.close()
    if not os.path.isfile(where):
        return None
    try:
        with open(where, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise UsageError(f"cannot read the file: {e.strerror}", file=name) from e
    if len(data) > limit:
        raise LimitError(f"{name} is too large", file=name, expected=f"at most {limit:,} bytes")
    return data


def find(targets, name: str) -> Found:
    """File `name` beside the first of `targets` (paths or URLs of one checkpoint's files)."""
    targets = [t for t in targets if isinstance(t, str)]
    if not targets:
        return Found(None, name, None)
    where = sibling(targets[0], name)
    try:
        data = read_bounded(where, LIMITS.get(name, MAX_CONFIG_BYTES))
        return Found(None if data is None else parse_object(data, name), where)
    except TensorloupeError as e:
        return Found(None, where, str(e))


def config_for(files, given: str | None = None, load=None) -> Found:
    """The model's config.json, for the CLI and the page alike: the one the user gave (`given`, a
    path or URL read by `load`, default `load` below), else the one beside the checkpoint's
    `files`. A file that cannot be used is a Found with its `problem`: the caller decides whether
    that stops the command (an explicit --config) or is a warning (the page)."""
    if given:
        try:
            return Found((load or globals()["load"])(given), given)
        except TensorloupeError as e:
            return Found(None, given, str(e))
    return find(files, CONFIG_NAME)


def quantisation_for(files) -> Found:
    """For a checkpoint whose config.json names no quantisation: the hf_quant_config.json beside
    its `files` as a config ({"quantization": its quantization_config}, quant/hfquant.py), or a
    Found without data (absent, naming none, or with the `problem` that it cannot be read)."""
    from ..quant import hfquant
    found = find(files, HF_QUANT_CONFIG_NAME)
    translated = hfquant.quantization_config(found.data)
    return Found({hfquant.KEY: translated} if translated else None, HF_QUANT_CONFIG_NAME, found.problem)


def load(where: str, name: str | None = None) -> dict:
    """A JSON object the user named explicitly (`--config FILE`): errors are raised."""
    name = name or where.rsplit("/", 1)[-1]
    data = read_bounded(where, LIMITS.get(name, MAX_CONFIG_BYTES))
    if data is None:
        raise UsageError("the file does not exist", file=where)
    return parse_object(data, name)


def what_is(name: str) -> str | None:
    """What a file that goes beside a model is, in words (None for any other name)."""
    return ROLES.get(os.path.basename(name).lower())


def small_text(path: str, limit: int, encoding: str) -> str | None:
    """A short text file's stripped contents (a ref, DeepSpeed's `latest`), or None if it is
    longer than `limit` bytes or not text."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    try:
        return data.decode(encoding).strip() if len(data) <= limit else None
    except UnicodeDecodeError:
        return None
