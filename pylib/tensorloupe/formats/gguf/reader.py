"""GGUF: llama.cpp's single-file checkpoints, versions 1 to 3, in either byte order.

Spec (ggml docs/gguf.md, "File Structure"):

    magic "GGUF" | uint32 version | uint64 tensor_count | uint64 metadata_kv_count
    metadata_kv_count x (string key, uint32 value type, value)              -> metadata.py
    tensor_count x (string name, uint32 n_dims, uint64 ne[n_dims], uint32 ggml type, uint64 offset)
    padding to `general.alignment` (default 32); then the data section, which offsets count from.

Version 1 (before Oct 2023) wrote uint32 for the counts, string and array lengths and dims. A
big-endian file (e.g. for s390x) writes every number big-endian but keeps the magic as bytes, so its
version field read little-endian has zero low 16 bits: that is how gguf-py and we detect it.

`ne` is ggml order, fastest-varying first. Tensor.shape is `ne` reversed (row-major, as numpy and
torch show it); the row-major flat order of that shape is ggml's storage order, so the sampler reads
GGUF tensors, quantized or not, with no GGUF-specific code. `info["ne"]` keeps the ggml order.

Checkpoint.metadata maps each key to its value (JSON-able; float32 values as the shortest decimal
that rounds to the same float32). Arrays of more than 1024 entries appear as {"array": True,
"type": "string", "length": N, "lazy": True} and strings over 1 MiB as {"string": True, "length": N,
"lazy": True}; extras["gguf_arrays"] records where each lies, and `read_array` / `read_string` decode
a page of one on request. extras["gguf"] has version, endian, alignment and data_offset;
extras["model_card"] is card.model_card.

Unknown ggml type ids do not stop a file from opening: the tensor gets a `problem` (values cannot be
decoded) and its byte span is bounded by the next tensor's start or the end of the file, which is
still checked to lie inside the file. Everything else that is wrong in a header is a specific error
naming the byte offset of the bad field, raised before any loop or allocation trusts it.
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_right
from typing import NamedTuple

from ...errors import ErrorFactory, FormatError, TensorloupeError, TruncatedError, UsageError, shown
from ...model import Checkpoint, Tensor
from ...source import ByteSource
from .card import model_card
from .metadata import INTEGER_TYPES, VALUE_TYPES, Cursor, Layout, read_entries, top_level

FORMAT = "gguf"
MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (1, 2, 3)
DEFAULT_ALIGNMENT = 32
ALIGNMENT_KEY = "general.alignment"
GGML_MAX_DIMS = 4          # ggml.h: a tensor has at most 4 dims
INT64_MAX = (1 << 63) - 1  # ggml counts elements and bytes in int64
UINT32 = 4                 # value type id of uint32 (what general.alignment should be)
# Metadata keys whose value type and position are kept (read after the metadata is parsed).
TYPED_KEYS = frozenset({"general.alignment", "split.no", "split.count", "split.tensors.count"})

# Spec "File Structure", gguf_header_t. Keyed by big_endian. Version 1 had uint32 counts.
VERSION = {False: struct.Struct("<I"), True: struct.Struct(">I")}
HEADER_COUNTS = {False: struct.Struct("<QQ"), True: struct.Struct(">QQ")}
HEADER_COUNTS_V1 = {False: struct.Struct("<II"), True: struct.Struct(">II")}
HEADER_START = 8  # after magic and version
# gguf_tensor_info_t after the name and dims: uint32 ggml type, uint64 offset into the data section.
TENSOR_TYPE_OFFSET = {False: struct.Struct("<IQ"), True: struct.Struct(">IQ")}


class TensorInfo(NamedTuple):
    name: str
    ne: tuple[int, ...]    # ggml order
    ggml_type: int
    offset: int            # relative to the data section
    at: int                # byte offset of the record (for errors)
    offset_at: int         # byte offset of its offset field


def sniff(head: bytes, size: int, name: str) -> bool:
    return head[:4] == MAGIC


def read(source: ByteSource) -> Checkpoint:
    name, size = source.name, source.size
    error = ErrorFactory(name, FORMAT)

    if size < HEADER_START:
        raise error(TruncatedError, f"the file has only {size:,} bytes; a GGUF file starts with "
                    "'GGUF' and a version number", offset=0, expected="at least 8 bytes", found=size)
    head = source.read(0, HEADER_START)
    if head[:4] != MAGIC:
        raise error(FormatError, "this is not a GGUF file", offset=0, expected="b'GGUF'",
                    found=repr(head[:4]))
    (version,) = VERSION[False].unpack_from(head, 4)
    big_endian = version & 0xFFFF == 0 and version != 0
    if big_endian:
        (version,) = VERSION[True].unpack_from(head, 4)
    if version not in SUPPORTED_VERSIONS:
        raise error(FormatError, f"GGUF version {version} is not supported", offset=4,
                    expected="version 1, 2 or 3", found=version)
    layout = Layout(big_endian, version)
    cursor = Cursor(source, HEADER_START, layout)
    counts = (HEADER_COUNTS_V1 if version == 1 else HEADER_COUNTS)[big_endian]
    tensor_count, kv_count = cursor.unpack(counts, "the tensor and metadata counts")
    # The fewest bytes one entry can take: an empty key, a type id and a 1-byte value; an empty
    # name, a dim count of 0, a type id and an offset.
    min_kv = layout.length.size + layout.u32.size + 1
    min_tensor = layout.length.size + layout.u32.size + TENSOR_TYPE_OFFSET[big_endian].size
    _check_count(cursor, kv_count, min_kv, "metadata key/value pairs",
                 HEADER_START + counts.size // 2)
    _check_count(cursor, tensor_count, min_tensor, "tensors", HEADER_START)

    warnings: list[str] = []
    metadata, types, positions, records = _read_metadata(cursor, kv_count, error)
    _check_count(cursor, tensor_count, min_tensor, "tensors", HEADER_START)
    infos = _read_tensor_infos(cursor, tensor_count, error)
    alignment = _alignment(metadata, types, positions, warnings, error)
    data_offset = -(-cursor.pos // alignment) * alignment
    if infos and data_offset > size:
        raise error(TruncatedError, "the file ends before its data section starts (truncated "
                    "download?)", offset=cursor.pos, expected=f"data from byte {data_offset:,}",
                    found=f"file size {size:,}")
    tensors = _tensors(source, infos, data_offset, alignment, big_endian, warnings, error)

    split = _split(metadata, types)
    if split is not None and split["count"] > 1:
        warnings.append(split_note(split))
    for record in records.values():
        record["source"] = 0  # index into Checkpoint.sources (opening/shards.py renumbers it)
    extras = {
        "gguf": {"version": version, "endian": "big" if big_endian else "little",
                 "alignment": alignment, "data_offset": data_offset,
                 "tensor_count": tensor_count, "kv_count": kv_count},
        "gguf_arrays": records,
        "model_card": model_card(metadata, tensors, size),
    }
    if split is not None:
        extras["split"] = split
    return Checkpoint(FORMAT, name, size, tensors, metadata=metadata, warnings=warnings,
                      extras=extras, sources=[source])


def _split(metadata: dict, types: dict) -> dict | None:
    """{"no", "count"} of a part of a split model (split.no is None if absent or not an integer),
    the structured form opening/shards.py and the page use; None if split.count is not an integer."""
    count, no = metadata.get("split.count"), metadata.get("split.no")
    if types.get("split.count") not in INTEGER_TYPES:
        return None
    return {"no": no if types.get("split.no") in INTEGER_TYPES else None, "count": count}


def split_note(split: dict) -> str:
    """The warning a lone part carries (opening/shards.py drops it from parts it merges)."""
    no = "?" if split["no"] is None else f"{split['no'] + 1:,}"
    return (f"this is part {no} of {split['count']:,} of a split model: open all parts together to "
            "see every tensor")


def _check_count(cursor: Cursor, count: int, least: int, what: str, at: int) -> None:
    if count * least > cursor.remaining:
        raise cursor.error(TruncatedError, f"the header claims {count:,} {what}, more than the rest "
                           "of the file can hold", offset=at,
                           expected=f"at least {count * least:,} bytes",
                           found=f"{cursor.remaining:,} bytes left")


def _read_metadata(cursor: Cursor, kv_count: int, error):
    """The metadata dict, and the value type and record offset of the few keys read later
    (general.alignment, split.*): a per-key type and position table costs more than the values
    for a file of millions of keys. Lazy arrays and strings get a record each."""
    metadata: dict = {}
    types: dict[str, int] = {}
    positions: dict[str, int] = {}
    records: dict[str, dict] = {}
    for i in range(kv_count):
        at = cursor.pos
        key = cursor.name(f"the key of metadata entry {i:,}")
        if key in metadata:
            raise error(FormatError, f"metadata key {key!r} appears twice", offset=at,
                        found=f"its first entry at byte {shown(_position_of(cursor, key, at))}")
        vtype = cursor.value_type(f"the value type of metadata {key!r}")
        value, record = top_level(cursor, key, vtype)
        metadata[key] = value
        if key in TYPED_KEYS:
            types[key], positions[key] = vtype, at
        if record is not None:
            records[key] = record
    return metadata, types, positions, records


def _position_of(cursor: Cursor, key: str, before: int) -> int | None:
    """Where metadata `key` first appeared: found again by walking the entries from the start
    (only for the error message of a duplicated key, so nothing is kept per key meanwhile)."""
    walk = Cursor(cursor.source, HEADER_START, cursor.layout)
    counts = HEADER_COUNTS_V1 if cursor.layout.version == 1 else HEADER_COUNTS
    walk.unpack(counts[cursor.layout.big_endian], "the counts")
    while walk.pos < before:
        at = walk.pos
        if walk.name("a key") == key:
            return at
        top_level(walk, key, walk.value_type("a value type"))
    return None


def _read_tensor_infos(cursor: Cursor, tensor_count: int, error) -> list[TensorInfo]:
    layout = cursor.layout
    dim_code = "I" if layout.version == 1 else "Q"
    tail = TENSOR_TYPE_OFFSET[layout.big_endian]
    infos: list[TensorInfo] = []
    seen: dict[str, int] = {}
    for i in range(tensor_count):
        at = cursor.pos
        tname = cursor.name(f"the name of tensor {i:,}")
        if tname in seen:
            raise error(FormatError, f"tensor {tname!r} appears twice", offset=at,
                        found=f"its first entry at byte {seen[tname]:,}")
        seen[tname] = at
        dims_at = cursor.pos
        n_dims = cursor.one(layout.u32, f"the dimension count of tensor {tname!r}")
        if n_dims > GGML_MAX_DIMS:
            raise error(FormatError, f"tensor {tname!r} has {n_dims:,} dimensions", offset=dims_at,
                        expected=f"at most {GGML_MAX_DIMS}", found=n_dims)
        ne = cursor.unpack(struct.Struct(f"{layout.order}{n_dims}{dim_code}"),
                           f"the dimensions of tensor {tname!r}")
        numel = math.prod(ne)
        if max(ne, default=0) > INT64_MAX or numel > INT64_MAX:
            raise error(FormatError, f"the dimensions {list(ne)} of tensor {tname!r} overflow "
                        "ggml's 64-bit element count", offset=dims_at + layout.u32.size,
                        expected=f"a product of at most {INT64_MAX:,}", found=numel)
        ggml_type, offset = cursor.unpack(tail, f"the type and offset of tensor {tname!r}")
        infos.append(TensorInfo(tname, ne, ggml_type, offset, at, cursor.pos - layout.u64.size))
    return infos


def _alignment(metadata, types, positions, warnings, error) -> int:
    if ALIGNMENT_KEY not in metadata:
        return DEFAULT_ALIGNMENT
    value, vtype = metadata[ALIGNMENT_KEY], types[ALIGNMENT_KEY]
    if vtype not in INTEGER_TYPES or value <= 0 or value & (value - 1):
        raise error(FormatError, f"{ALIGNMENT_KEY} must be a power of two",
                    offset=positions[ALIGNMENT_KEY], expected="a power of two such as 32",
                    found=f"{value!r} ({VALUE_TYPES[vtype].name})")
    if vtype != UINT32:
        warnings.append(f"{ALIGNMENT_KEY} is a {VALUE_TYPES[vtype].name}; the spec says uint32 "
                        "(llama.cpp refuses the file)")
    return value


def _tensors(source, infos, data_offset, alignment, big_endian, warnings, error) -> list[Tensor]:
    # The ggml codecs, imported by a GGUF file's tensors: detect imports this module to sniff
    # files of the formats after it (torch), which need no codecs.
    from ...dtypes.ggml import ggml_dtype
    size = source.size
    starts = sorted(data_offset + info.offset for info in infos)
    tensors = []
    shared: dict[tuple, dict] = {}
    for info in infos:
        begin = data_offset + info.offset
        where = f"tensor {info.name!r}"
        if begin > size:
            raise error(TruncatedError, f"{where} starts past the end of the file (truncated "
                        "download?)", offset=info.offset_at, expected=f"an offset below {size:,}",
                        found=f"byte {begin:,}")
        dtype = ggml_dtype(info.ggml_type)
        numel = math.prod(info.ne)
        problem = None
        extra = {}
        if dtype is None:
            # No block size: bound the bytes by the next tensor (or the file end), still inside.
            later = bisect_right(starts, begin)
            nbytes = (starts[later] if later < len(starts) else size) - begin
            label = f"GGML_TYPE_{info.ggml_type}"
            problem = (f"ggml type {label} (id {info.ggml_type}) is unknown to tensorloupe: its "
                       "values cannot be decoded")
            warnings.append(f"{where}: {problem}")
            extra["nbytes_inferred"] = True
        else:
            label = dtype.name
            row = info.ne[0] if info.ne else 1
            if row % dtype.block_elems:
                raise error(FormatError, f"{where} has rows of {row:,} elements, not whole "
                            f"{label} blocks", offset=info.at,
                            expected=f"a multiple of {dtype.block_elems}", found=row)
            nbytes = dtype.nbytes(numel)
            if begin + nbytes > size:
                raise error(TruncatedError, f"{where} ends {begin + nbytes - size:,} bytes past the "
                            "end of the file (truncated download?)", offset=info.offset_at,
                            expected=f"bytes {begin:,}..{begin + nbytes:,}", found=f"file size {size:,}")
        if info.offset % alignment:
            warnings.append(f"{where} starts at data offset {info.offset:,}, not a multiple of the "
                            f"alignment {alignment:,} (llama.cpp refuses the file)")
        # Tensors of one type and shape share one info dict (never written to after this):
        # a model repeats a few dozen shapes over thousands of tensors.
        details = (info.ggml_type, info.ne, bool(extra))
        if details not in shared:
            shared[details] = {"ggml_type": info.ggml_type, "ne": list(info.ne), **extra}
        tensors.append(Tensor(info.name, label, tuple(reversed(info.ne)), begin, nbytes,
                              source=source, big_endian=big_endian, problem=problem,
                              info=shared[details]))
    _warn_overlaps(tensors, warnings)
    return tensors


def _warn_overlaps(tensors: list[Tensor], warnings: list[str]) -> None:
    previous = None
    for t in sorted(tensors, key=lambda t: (t.offset, t.nbytes)):
        if previous is not None and t.offset < previous.offset + previous.nbytes and t.nbytes:
            warnings.append(f"tensor {t.name!r} overlaps the bytes of {previous.name!r}")
        if previous is None or t.offset + t.nbytes > previous.offset + previous.nbytes:
            previous = t


# --- lazy metadata ---------------------------------------------------------------------------------

def read_array(checkpoint: Checkpoint, key: str, start: int = 0, count: int = 100) -> list:
    """Entries [start, start + count) of metadata array `key`, decoded on request (for paging
    through a 256k-token vocabulary without decoding it all)."""
    if start < 0 or count < 0:
        raise UsageError("start and count must be >= 0")
    record = checkpoint.extras.get("gguf_arrays", {}).get(key)
    if record is None:
        value = checkpoint.metadata.get(key)
        if isinstance(value, list):
            return value[start:start + count]
        raise UsageError(f"there is no metadata array {key!r}", file=checkpoint.name, format=FORMAT)
    if record["kind"] != "array":
        raise UsageError(f"metadata {key!r} is a string, not an array: use read_string",
                         file=checkpoint.name, format=FORMAT)
    source, layout = _record_source(checkpoint, record)
    try:
        return read_entries(source, layout, record, start, count)
    except TensorloupeError as e:
        raise e.located(file=source.name, format=FORMAT)


def read_string(checkpoint: Checkpoint, key: str, start: int = 0, count: int | None = None) -> str:
    """Bytes [start, start + count) of a metadata string too long to hold at open, as text."""
    value = checkpoint.metadata.get(key)
    if isinstance(value, str):
        return value.encode("utf-8")[start:None if count is None else start + count].decode(
            "utf-8", errors="replace")
    record = checkpoint.extras.get("gguf_arrays", {}).get(key)
    if record is None or record["kind"] != "string":
        raise UsageError(f"there is no metadata string {key!r}", file=checkpoint.name, format=FORMAT)
    if start < 0 or (count is not None and count < 0):
        raise UsageError("start and count must be >= 0")
    source, _ = _record_source(checkpoint, record)
    start = min(start, record["length"])
    count = record["length"] - start if count is None else min(count, record["length"] - start)
    return source.read(record["offset"] + start, count).decode("utf-8", errors="replace")


def _record_source(checkpoint: Checkpoint, record: dict):
    header = checkpoint.extras["gguf"]
    return (checkpoint.sources[record.get("source", 0)],
            Layout(header["endian"] == "big", header["version"]))
