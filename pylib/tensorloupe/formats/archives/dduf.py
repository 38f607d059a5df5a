"""DDUF (`.dduf`, Hugging Face's diffusers single file): a ZIP of a diffusers folder, stored only.

Layout (huggingface_hub serialization/_dduf.py, read_dduf_file): `model_index.json` at the root
(the pipeline: component name -> [library, class]), and at most one folder level below it, one
folder per component, each with its config (config.json, scheduler_config.json, ...) and its
weights as .safetensors; entries are .json, .model, .safetensors or .txt, never compressed.
Members are found through the central directory; each safetensors member is read in place (a
MemberSlice over its data), its tensors named `<component>.<tensor>`. The JSON members are small
and read whole (bounded), shown as the components' metadata.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath

from ...errors import ErrorFactory, FormatError, LimitError, TensorloupeError, UnknownFormatError
from ...model import Checkpoint
from ...source import ByteSource
from .. import safetensors
from ..pytorch.members import ENCRYPTED, STORED, Archive
from .members import MemberSlice, first_member

FORMAT = "dduf"
INDEX = "model_index.json"
ALLOWED = (".json", ".model", ".safetensors", ".txt")
CONFIGS = ("config.json", "tokenizer_config.json", "preprocessor_config.json",
           "scheduler_config.json")
MAX_JSON = 10 << 20


def sniff(head: bytes, size: int, name: str) -> bool:
    first = first_member(head)
    return first is not None and (name.lower().endswith(".dduf") or first == INDEX)


def read(source: ByteSource) -> Checkpoint:
    error = ErrorFactory(source.name, FORMAT)
    archive = Archive(source, FORMAT)
    names = list(archive.members)
    for name in names:
        _check_entry(archive, name, error)
    if INDEX not in archive.members:
        raise error(UnknownFormatError, f"this ZIP is not a DDUF file: it has no {INDEX}",
                    found=", ".join(sorted(names)[:4]) or "no members")
    offsets = archive.data_offsets(names)            # every local header, in coalesced reads
    index = _json(archive, INDEX, offsets[INDEX], error)
    folders = sorted({n.split("/", 1)[0] for n in names if "/" in n})
    for folder in folders:
        if folder not in index:
            raise error(FormatError, f"folder {folder!r} is not a component of {INDEX}")
        if not any(f"{folder}/{c}" in archive.members for c in CONFIGS):
            raise error(FormatError, f"folder {folder!r} has none of {', '.join(CONFIGS)}")
    components = {key: {"library": value[0], "class": value[1]} for key, value in index.items()
                  if not key.startswith("_") and isinstance(value, list) and len(value) == 2}
    tensors, warnings = [], []
    for name in names:
        folder, base = name.rsplit("/", 1) if "/" in name else ("", name)
        entry = components.setdefault(folder, {}) if folder else None
        if base in CONFIGS and entry is not None:
            entry["config"] = _json(archive, name, offsets[name], error)
        elif name.endswith(".safetensors"):
            part = _safetensors(source, archive, name, offsets[name])
            prefix = f"{folder}." if folder else ""
            tensors += [dataclasses.replace(t, name=prefix + t.name) for t in part.tensors]
            warnings += [f"{name}: {w}" for w in part.warnings]
            if entry is not None:
                entry.setdefault("files", []).append(base)
                if part.metadata:
                    entry.setdefault("metadata", {})[base] = part.metadata
    metadata = {"pipeline": index.get("_class_name"), "diffusers_version": index.get("_diffusers_version"),
                "components": components}
    return Checkpoint(FORMAT, source.name, source.size, tensors, metadata=metadata,
                      warnings=warnings, extras={"dduf": {"members": len(names)}}, sources=[source])


def _check_entry(archive: Archive, name: str, error) -> None:
    """huggingface_hub's rules for an entry (read_dduf_file refuses a file that breaks one)."""
    info = archive.members[name]
    if info.compress_type != STORED or info.flag_bits & ENCRYPTED:
        raise error(FormatError, f"member {name!r} is compressed or encrypted; DDUF members are "
                    "stored", found=f"compression method {info.compress_type}")
    if "\\" in name or not name.endswith(ALLOWED) or name.strip("/").count("/") > 1 \
            or posixpath.normpath(name) != name or name.startswith("/") or ".." in name.split("/"):
        raise error(FormatError, f"member {name!r} is not a DDUF entry name (a .json, .model, "
                    ".safetensors or .txt file, at most one folder deep, '/' separators)")
    if info.file_size != info.compress_size:
        raise error(FormatError, f"stored member {name!r} declares {info.file_size:,} bytes but "
                    f"holds {info.compress_size:,}")


def _json(archive: Archive, name: str, offset: int, error) -> dict:
    """A small JSON member, read in place (its own bytes, not the cache block around them)."""
    size = archive.members[name].file_size
    if size > MAX_JSON:
        raise error(LimitError, f"{name} is larger than the limit", expected=f"at most {MAX_JSON:,}",
                    found=size)
    raw = archive.source.read_data(offset, size)
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise error(FormatError, f"{name} is not valid UTF-8") from e
    except (ValueError, RecursionError) as e:
        raise error(FormatError, f"{name} is not valid JSON: {getattr(e, 'msg', e)}") from e
    if not isinstance(value, dict):
        raise error(FormatError, f"{name} is not a JSON object", found=type(value).__name__)
    return value


def _safetensors(source: ByteSource, archive: Archive, name: str, offset: int) -> Checkpoint:
    part = MemberSlice(source, offset, archive.members[name].file_size, name=name)
    try:
        return safetensors.read(part)
    except TensorloupeError as e:
        e.message = f"member {name!r}: {e.message}"
        e.file, e.format = source.name, FORMAT
        raise
