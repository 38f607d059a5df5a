"""Keras 3's `.keras` files (keras/src/saving/saving_lib.py `save_model`): a ZIP archive of
  config.json       the model's serialized config: its class and, for Sequential and
                    functional models, the layer list
  metadata.json     keras_version and date_saved
  model.weights.h5  the weights as HDF5 (layers/<layer>/vars/<i>), read by reader.py
Keras writes the members stored (zipfile's default), so the HDF5 member is read in place
through a slice of the file; a deflated one is inflated into memory, up to MAX_INFLATED bytes,
and the warning says what that cost.
"""

from __future__ import annotations

import json

from ...errors import FormatError, LimitError, TensorloupeError, UnknownFormatError
from ...model import Checkpoint
from ...source import ByteSource, MemorySource
from ...source.base import SliceSource
from ..pytorch.members import DEFLATED, LOCAL_HEADER, LOCAL_SIGNATURE, STORED, Archive
from . import reader

FORMAT = "keras"
CONFIG, METADATA, WEIGHTS = "config.json", "metadata.json", "model.weights.h5"
MEMBERS = (CONFIG, METADATA, WEIGHTS)
MAX_JSON = 16 << 20
MAX_INFLATED = 256 << 20
MAX_LAYERS = 10_000


def sniff(head: bytes, size: int, name: str) -> bool:
    """A ZIP whose first member is one of the three Keras writes (metadata.json first)."""
    if not head.startswith(LOCAL_SIGNATURE) or len(head) < LOCAL_HEADER.size:
        return False
    length = LOCAL_HEADER.unpack_from(head)[9]
    return head[LOCAL_HEADER.size:LOCAL_HEADER.size + length].decode("latin-1") in MEMBERS


def read(source: ByteSource) -> Checkpoint:
    archive = Archive(source, FORMAT)
    if WEIGHTS not in archive.members:
        raise UnknownFormatError(f"this ZIP archive has no {WEIGHTS}: not a Keras 3 .keras file",
                                 file=source.name, format=FORMAT,
                                 found=", ".join(sorted(archive.members)[:4]) or "no members")
    warnings: list[str] = []
    metadata: dict = {}
    for member, prefix in ((METADATA, "keras."), (CONFIG, "keras.config.")):
        if member in archive.members:
            try:
                value = json.loads(archive.read(member, MAX_JSON).decode("utf-8"))
            except TensorloupeError as e:
                warnings.append(f"{member} cannot be read: {e.message}")
                continue
            except (UnicodeDecodeError, ValueError, RecursionError) as e:
                warnings.append(f"{member} is not JSON: {type(e).__name__}")
                continue
            metadata.update(_described(value, prefix) if member == CONFIG else
                            {prefix + k: v for k, v in value.items()} if isinstance(value, dict)
                            else {})
    info = archive.members[WEIGHTS]
    if info.compress_type == STORED and info.compress_size == info.file_size:
        start = archive.data_offsets([WEIGHTS])[WEIGHTS]
        inner = SliceSource(source, start, info.file_size, source.name)
    elif info.compress_type in (STORED, DEFLATED):
        if info.file_size > MAX_INFLATED:
            raise archive.error(LimitError, f"{WEIGHTS} is deflated and {info.file_size:,} bytes "
                                "long: tensorloupe inflates at most "
                                f"{MAX_INFLATED:,} bytes of it into memory",
                                expected=f"a stored member or at most {MAX_INFLATED:,} bytes")
        inner = MemorySource(archive.read(WEIGHTS, MAX_INFLATED), source.name)
        warnings.append(f"{WEIGHTS} is deflated in the archive: all {info.compress_size:,} "
                        f"bytes were read and inflated to {info.file_size:,} to open it")
    else:
        raise archive.error(FormatError, f"{WEIGHTS} uses ZIP compression method "
                            f"{info.compress_type}; Keras writes it stored")
    weights = reader.read(inner, FORMAT)
    metadata.update(weights.metadata)
    extras = dict(weights.extras, keras={"members": sorted(archive.members),
                                         "weights_member": WEIGHTS,
                                         "stored": isinstance(inner, SliceSource)})
    return Checkpoint(FORMAT, source.name, source.size, weights.tensors, metadata=metadata,
                      warnings=warnings + weights.warnings, extras=extras, sources=[source])


def _described(config, prefix: str) -> dict:
    """The model's class and name, and its layers as "name (ClassName)"."""
    if not isinstance(config, dict):
        return {}
    out = {prefix + "class_name": config.get("class_name")}
    inner = config.get("config") if isinstance(config.get("config"), dict) else {}
    if isinstance(inner.get("name"), str):
        out[prefix + "name"] = inner["name"]
    layers = inner.get("layers")
    if isinstance(layers, list):
        shown = []
        for layer in layers[:MAX_LAYERS]:
            if isinstance(layer, dict):
                layer_config = layer.get("config") if isinstance(layer.get("config"), dict) else {}
                shown.append(f"{layer_config.get('name', '?')} ({layer.get('class_name', '?')})")
        out[prefix + "layers"] = shown
    return out
