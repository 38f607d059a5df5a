"""torch.distributed.checkpoint (DCP) folders: `.metadata` plus `__R_S.distcp` data files.

Layout (torch/distributed/checkpoint/filesystem.py, FileSystemWriter with the default
SerializationFormat.TORCH_SAVE): each rank R writes its items into `__R_S.distcp` one after the
other; a tensor item is a complete `torch.save` archive of that rank's chunk (a ZIP, read here by
zipped.py over the item's byte range), a non-tensor item (`BytesStorageMetadata`: an int, a dict)
is the bytes of `torch.save(obj)`. Rank 0 writes `.metadata`, one pickle of
  Metadata(state_dict_metadata={fqn: TensorStorageMetadata(properties=TensorProperties(dtype, ...),
                                                            size=torch.Size, chunks=[
                                                  ChunkStorageMetadata(offsets, sizes), ...])
                                     | BytesStorageMetadata()},
           storage_data={MetadataIndex(fqn, offset, index): _StorageInfo(relative_path, offset,
                                                                         length, ...)},
           planner_data=..., storage_meta=StorageMeta(checkpoint_id, ...), version=...)
read through the allow-list machine: DCP's dataclasses are allow-listed as data (allowlist.py
DCP_CLASSES), so each is an inert Marker whose BUILD state is read here by name.

A tensor saved whole is one Tensor named by its fqn; a tensor sharded over ranks (a DTensor, a
ShardedTensor) is one Tensor per chunk, named `fqn[a:b, c:d]` by its offsets and sizes in the
full tensor, with info["dcp"] = {"fqn", "offsets", "sizes", "shape" (the full tensor's), "file",
"item_offset", "item_length"}. extras["dcp"] lists the tensors with their chunks, the non-tensor
items with their values, and the data files. A data file the metadata names that was not given
leaves its chunks with a problem, and is an error (extras["shards"]["errors"]: health and
--strict say the checkpoint is incomplete). A `.distcp` opened alone is refused, naming the
`.metadata` it needs.
"""

from __future__ import annotations

import dataclasses
import math
import os

from ...errors import FormatError, LimitError, TensorloupeError
from ...model import Checkpoint, Tensor
from ...source import ByteSource
from ...source.base import SliceSource
from ...unpickling.objects import Marker, SafeKey
from . import weightsonly, zipped
from ..multifile import (FORMAT, METADATA_NAME, is_member, is_metadata, lone_data_file,
                         merge_reports)
from .allowlist import DCP_METADATA, TORCH_DTYPES, dtype_of, resolve
from .safety import render, safety_report
from ...unpickling.machine import unpickle

MAX_METADATA_BYTES = 256 << 20   # FSDP checkpoints of large models: tens of MB of metadata
ZIP_MAGIC = b"PK\x03\x04"
META = DCP_METADATA + "."
CLASS = {name: META + name for name in ("Metadata", "TensorStorageMetadata", "TensorProperties",
                                        "ChunkStorageMetadata", "BytesStorageMetadata",
                                        "MetadataIndex")}
STORAGE_INFO = "torch.distributed.checkpoint.filesystem._StorageInfo"


def sniff(head: bytes, size: int, name: str) -> bool:
    # DCP's files are known by name: a .distcp starts like a torch ZIP (its first item) and a
    # .metadata is a plain pickle, and neither can be read as one.
    return is_member(name or "")


def read(source: ByteSource) -> Checkpoint:
    """A file of a DCP folder opened alone: the .metadata (its data files are then missing) or
    a .distcp, which is refused: only the .metadata says what its bytes are."""
    if is_metadata(source.name):
        return read_set(source, {})
    raise lone_data_file(source.name)


def read_set(metadata: ByteSource, data: dict[str, ByteSource]) -> Checkpoint:
    """The checkpoint `metadata` (the .metadata source) describes, its items read from `data`
    ({file name: source} of the .distcp files given)."""
    name = os.path.basename(metadata.name)
    error = _errors(name)
    if metadata.size > MAX_METADATA_BYTES:
        raise LimitError(f"{METADATA_NAME} is larger than {MAX_METADATA_BYTES:,} bytes",
                         file=name, format=FORMAT, found=metadata.size)
    try:
        pickled = unpickle(metadata.read(0, metadata.size), resolve, _no_persistent_ids)
    except TensorloupeError as e:
        raise e.located(file=name, format=FORMAT)
    root = pickled.value
    if type(root) is not Marker or root.name != CLASS["Metadata"] or type(root.state) is not dict:
        raise error("the file is not a DCP Metadata pickle",
                    expected=CLASS["Metadata"], found=getattr(root, "name", type(root).__name__))
    state = _fields(root)
    entries = state.get("state_dict_metadata")
    where = state.get("storage_data")
    if type(entries) is not dict or type(where) is not dict:
        raise error("the Metadata has no state_dict_metadata or storage_data dict")
    located = _storage(where, error)
    tensors, listing, objects, reports, warnings = [], [], {}, [(name, _metadata_report(pickled))], []
    missing: dict[str, int] = {}
    for key, entry in entries.items():
        fqn = _text(key, error, "a state_dict key")
        if type(entry) is Marker and entry.name == CLASS["BytesStorageMetadata"]:
            objects[fqn] = _object(fqn, located.get((fqn, None)), data, reports, missing)
            continue
        if type(entry) is not Marker or entry.name != CLASS["TensorStorageMetadata"]:
            raise error(f"the entry of {fqn!r} is not a TensorStorageMetadata or "
                        "BytesStorageMetadata", found=getattr(entry, "name", type(entry).__name__))
        shape, dtype, chunks = _tensor_entry(fqn, entry, error)
        listing.append({"name": fqn, "shape": list(shape), "dtype": dtype, "chunks": len(chunks)})
        for index, (offsets, sizes) in enumerate(chunks):
            label = fqn if len(chunks) == 1 and offsets == (0,) * len(shape) and sizes == shape \
                else f"{fqn}[{', '.join(f'{o}:{o + n}' for o, n in zip(offsets, sizes))}]"
            info = located.get((fqn, offsets))
            tensors.append(_chunk(label, fqn, shape, dtype, offsets, sizes, info, data, reports,
                                  missing))
    warnings += [f"tensor {t.name!r}: {t.problem}" for t in tensors if t.problem][:20]
    errors = [f"the data file {f} is missing: {n:,} item(s) of the checkpoint are in it"
              for f, n in sorted(missing.items())]
    used = sorted({i["file"] for i in located.values()})
    extras = {"dcp": {"tensors": listing, "objects": objects, "files": used,
                      "version": state.get("version") if isinstance(state.get("version"), str) else None},
              "safety": merge_reports(reports),
              "shards": {"count": len(used), "missing": sorted(missing),
                         "missing_count": len(missing), "errors": errors,
                         "parts": [{"no": None, "name": f, "size": data[f].size if f in data else None,
                                    "tensors": sum(1 for t in tensors if t.info.get("dcp", {}).get("file") == f)}
                                   for f in used]}}
    unused = sorted(set(data) - set(used))
    if unused:
        warnings.append(f"{METADATA_NAME} names no item in {', '.join(unused)}")
    sources = [metadata] + [data[f] for f in sorted(data)]
    return Checkpoint(FORMAT, name, sum(s.size for s in sources), tensors,
                      metadata={"checkpoint": render(_metadata_shown(state), {})},
                      warnings=errors + warnings, extras=extras, sources=sources)


def _metadata_report(pickled) -> dict:
    """The .metadata's safety report, with what torch.load(weights_only=True) does with it: a
    plain pickle (no torch magic number), of protocol 4 or 5 as DCP's pickle.dump writes it, of
    DCP's dataclasses, none of them on torch's default weights_only allow-list (torch's DCP
    reader itself uses pickle.load). Like any pickle, the verdict comes from weightsonly.py."""
    report = safety_report([pickled])
    report["weights_only"] = weightsonly.report([pickled], weightsonly.PLAIN)
    return report


def _no_persistent_ids(pid):
    raise FormatError("the DCP metadata pickle refers to a persistent id (no torch storage can "
                      "be in it)")


def _errors(name: str):
    def error(message: str, **details) -> FormatError:
        return FormatError(message, file=name, format=FORMAT, **details)
    return error


def _fields(marker: Marker) -> dict:
    state = marker.state if type(marker.state) is dict else {}
    return {(k.value if type(k) is SafeKey else k): v for k, v in state.items()}


def _text(value, error, what: str) -> str:
    if type(value) is not str:
        raise error(f"{what} is not a string", found=type(value).__name__)
    return value


def _ints(value, error, what: str) -> tuple[int, ...]:
    if type(value) not in (tuple, list) or not all(type(v) is int and 0 <= v < 1 << 63 for v in value):
        raise error(f"{what} is not a list of sizes", found=type(value).__name__)
    return tuple(value)


def _storage(where: dict, error) -> dict:
    """{(fqn, chunk offsets or None): {"file", "offset", "length", "transforms"}}."""
    out = {}
    for key, info in where.items():
        if type(key) is not Marker or key.name != CLASS["MetadataIndex"] or \
                type(info) is not Marker or info.name != STORAGE_INFO:
            raise error("a storage_data entry is not MetadataIndex -> _StorageInfo")
        index, place = _fields(key), _fields(info)
        fqn = _text(index.get("fqn"), error, "a MetadataIndex's fqn")
        offsets = index.get("offset")
        offsets = None if offsets is None else _ints(offsets, error, f"the offsets of {fqn!r}")
        file = _text(place.get("relative_path"), error, f"the file of {fqn!r}")
        if "/" in file or "\\" in file or file in ("", ".", ".."):
            raise error(f"the file of {fqn!r} is not a file name in the folder", found=file[:80])
        start, length = place.get("offset"), place.get("length")
        if type(start) is not int or type(length) is not int or start < 0 or length < 0:
            raise error(f"the byte range of {fqn!r} is not two sizes")
        out[(fqn, offsets)] = {"file": file, "offset": start, "length": length,
                               "transforms": place.get("transform_descriptors")}
    return out


def _tensor_entry(fqn: str, entry: Marker, error):
    fields = _fields(entry)
    shape = _ints(fields.get("size"), error, f"the size of {fqn!r}")
    props = fields.get("properties")
    state = props.state if type(props) is Marker and props.name == CLASS["TensorProperties"] else None
    if type(state) is dict:   # older DCP pickled the dataclass fields as a dict
        state = (state.get("dtype"),)
    if type(state) is not tuple or not state:
        raise error(f"the TensorProperties of {fqn!r} are not (dtype, layout, ...)")
    try:
        dtype = dtype_of(state[0])
    except TypeError as e:
        raise error(f"the dtype of {fqn!r} is not a torch dtype") from e
    chunks = []
    listed = fields.get("chunks")
    if type(listed) is not list:
        raise error(f"the chunks of {fqn!r} are not a list", found=type(listed).__name__)
    for chunk in listed:
        if type(chunk) is not Marker or chunk.name != CLASS["ChunkStorageMetadata"]:
            raise error(f"a chunk of {fqn!r} is not a ChunkStorageMetadata")
        c = _fields(chunk)
        offsets = _ints(c.get("offsets"), error, f"a chunk offset of {fqn!r}")
        sizes = _ints(c.get("sizes"), error, f"a chunk size of {fqn!r}")
        if len(offsets) != len(shape) or len(sizes) != len(shape) or \
                any(o + n > d for o, n, d in zip(offsets, sizes, shape)):
            raise error(f"a chunk of {fqn!r} does not fit in its {list(shape)} tensor",
                        found=f"offsets {list(offsets)}, sizes {list(sizes)}")
        chunks.append((offsets, sizes))
    return shape, dtype, chunks


def _chunk(label, fqn, shape, dtype, offsets, sizes, info, data, reports, missing) -> Tensor:
    table, itemsize = TORCH_DTYPES.get(dtype, (None, 1))
    described = {"fqn": fqn, "offsets": list(offsets), "sizes": list(sizes), "shape": list(shape)}
    if info is not None:
        described.update(file=info["file"], item_offset=info["offset"], item_length=info["length"])

    def without(problem: str) -> Tensor:
        return Tensor(label, table or dtype, sizes, 0, math.prod(sizes) * itemsize,
                      problem=problem, info={"torch_dtype": dtype, "dcp": described})
    if info is None:
        return without(f"{METADATA_NAME} names no bytes for this chunk")
    source = data.get(info["file"])
    if source is None:
        missing[info["file"]] = missing.get(info["file"], 0) + 1
        return without(f"its data file {info['file']} is missing")
    if info["transforms"]:
        return without(f"its bytes are transformed ({info['transforms']!r:.80}): not decoded")
    try:
        item = SliceSource(source, info["offset"], info["length"], name=info["file"])
        head = item.read(0, min(4, item.size))
        if head != ZIP_MAGIC:
            if info["length"] != math.prod(sizes) * itemsize:
                return without(f"its {info['length']:,}-byte item is neither a torch.save archive "
                               f"nor the chunk's raw bytes")
            return Tensor(label, table or dtype, sizes, 0, info["length"], source=item,
                          problem=None if table else f"torch dtype {dtype} has no decoder",
                          info={"torch_dtype": dtype, "dcp": described})
        saved = zipped.read(item)
    except TensorloupeError as e:
        return without(f"its item cannot be read: {e.message}")
    reports.append((f"{info['file']} ({label})", saved.extras.get("safety") or {}))
    if len(saved.tensors) != 1 or saved.tensors[0].shape != sizes or \
            saved.tensors[0].info.get("torch_dtype") != dtype:
        found = ", ".join(f"{t.dtype} {list(t.shape)}" for t in saved.tensors[:3]) or "no tensor"
        return without(f"its item holds {found}, not the {dtype} {list(sizes)} chunk the "
                       f"{METADATA_NAME} describes")
    inner = saved.tensors[0]
    return dataclasses.replace(inner, name=label, info={**inner.info, "dcp": described})


def _object(fqn, info, data, reports, missing) -> dict:
    """A non-tensor item: its bytes are torch.save(obj); its value is read as data."""
    if info is None:
        return {"problem": f"{METADATA_NAME} names no bytes for it"}
    out = {"file": info["file"], "offset": info["offset"], "length": info["length"]}
    source = data.get(info["file"])
    if source is None:
        missing[info["file"]] = missing.get(info["file"], 0) + 1
        return {**out, "problem": f"its data file {info['file']} is missing"}
    try:
        saved = zipped.read(SliceSource(source, info["offset"], info["length"], name=info["file"]))
    except TensorloupeError as e:
        return {**out, "problem": f"its item cannot be read: {e.message}"}
    reports.append((f"{info['file']} ({fqn})", saved.extras.get("safety") or {}))
    value = saved.metadata.get("root", saved.metadata)
    return {**out, "value": value}


def _metadata_shown(state: dict) -> dict:
    """What the Metadata says besides its tensors: version, storage_meta."""
    return {k: v for k, v in state.items() if k in ("version", "storage_meta")}
