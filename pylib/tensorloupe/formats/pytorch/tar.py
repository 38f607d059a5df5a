"""PyTorch's oldest checkpoints (before 0.4): a tar archive of pickles and raw storages.

Layout (torch/serialization.py `legacy_load`, still in torch 2.13), a tar with four members:
  sys_info  pickle of {"protocol_version", "little_endian", "type_sizes"}
  pickle    the object; a tensor is the persistent id str(key), a module class (cls, file, source)
  tensors   pickle(count); per tensor pickle((key, storage_key, tensor_class)), then int32 ndim,
            4 unused bytes, int64 sizes[ndim], int64 strides[ndim], int64 storage offset
  storages  pickle(count); per storage pickle((key, location, storage_class)), an int64 element
            count and the raw bytes; then pickle([(view_key, root_key, offset, numel), ...])
The stdlib tarfile finds the members; each storage costs two small reads (its pickle and count),
never its bytes. No torch we can install writes this format: the tests use a hand-built file that
torch.load reads back.
"""

from __future__ import annotations

import re
import struct
import tarfile

from ...errors import (LOW_LEVEL_ERRORS, ErrorFactory, FormatError, LimitError, TensorloupeError,
                       TruncatedError)
from ...model import Checkpoint
from ...source import ByteSource
from ...unpickling.objects import LIMITS, shown
from .common import checkpoint, load_pickle
from .safety import segment, with_danger
from .members import CappedFile
from .allowlist import TORCH_DTYPES, StorageRef, TensorRef, dtype_of

FORMAT = "pytorch-tar"
MEMBERS = ("sys_info", "pickle", "tensors", "storages")
TAR_MAGIC = b"ustar"
TAR_MAGIC_AT = 257
COUNT = struct.Struct("<q")
INT64 = 1 << 63
TENSOR_HEAD = struct.Struct("<i4x")   # ndim, then 4 bytes torch skips
WINDOW = 4096
# The small pickles between raw bytes (counts, each storage's (key, location, class)) are read in
# windows that grow 4x until the pickle fits, each try parsing from the start: capped here, so a
# hostile one costs ~1.3 MiB of parsing, not 4/3 of LIMITS.max_bytes (3 s).
MAX_SMALL_PICKLE = 1 << 20


def sniff(head: bytes, size: int, name: str) -> bool:
    first = head[:100].split(b"\0", 1)[0]
    return head[TAR_MAGIC_AT:TAR_MAGIC_AT + len(TAR_MAGIC)] == TAR_MAGIC and \
        first.decode("latin-1") in MEMBERS + ("././@PaxHeader",)


def _key(value):
    """A storage or tensor key of the archive: torch writes ints and strings. Anything else (a
    tuple nested millions deep, whose hash recurses in C) is refused before it is hashed."""
    if type(value) is str or (type(value) is int and value.bit_length() < 64):
        return value
    raise FormatError("a storage or tensor key is not a string or a 64-bit integer",
                      found=type(value).__name__)


def _sized(value: int) -> str:
    """A pickle int for a message: its digits if it has a few, else its size (str() refuses
    more than 4,300 digits, and a message of thousands says nothing more)."""
    if value.bit_length() <= 64:
        return f"{value:,}"
    return f"an integer of {value.bit_length():,} bits (~{int(value.bit_length() * 0.30103) + 1:,} digits)"


class _Reader:
    def __init__(self, source: ByteSource):
        self.source = source
        self.error = error = ErrorFactory(source.name, FORMAT)
        self.pickles = []
        try:
            with tarfile.open(fileobj=CappedFile(source), mode="r:") as tar:
                self.members = {m.name: m for m in tar.getmembers() if m.isfile()}
        except TensorloupeError:
            raise
        except (tarfile.TarError, EOFError, OSError, ValueError, UnicodeError, struct.error,
                OverflowError, KeyError, IndexError) as e:
            raise error(FormatError, f"not a readable tar archive: {e}") from e
        missing = [m for m in MEMBERS if m not in self.members]
        if missing:
            raise error(FormatError, "the tar archive is not a torch checkpoint: it has no "
                              + ", ".join(missing), expected=", ".join(MEMBERS))

    def member(self, name: str) -> tuple[int, int]:
        info = self.members[name]
        if info.offset_data + info.size > self.source.size:
            raise self.error(TruncatedError, f"the tar member {name!r} runs past the end of the file",
                                 offset=info.offset_data, expected=f"{info.size:,} bytes")
        return info.offset_data, info.offset_data + info.size

    def pickle_at(self, position: int, end: int, persistent_load=None, *, last: bool = False):
        """One pickle starting at `position` (absolute). The `last` of its member (the object,
        the storage views) is read whole at once, up to the limit; a small one in a window that
        grows until it fits."""
        limit = LIMITS.max_bytes if last else MAX_SMALL_PICKLE
        if last and end - position > limit:
            # nothing follows the last pickle of a member: it is this long, so refuse it unparsed
            raise self.error(LimitError, "a pickle in the tar archive is larger than the limit",
                             expected=f"at most {limit:,} bytes", found=end - position)
        window = min(limit if last else WINDOW, end - position)
        while True:
            data = self.source.read(position, window)
            try:
                result = load_pickle(data, persistent_load)
            except TruncatedError:
                if window >= end - position:
                    raise
                if window >= limit:
                    raise self.error(LimitError, "a pickle in the tar archive is larger than the "
                                     "limit", expected=f"at most {limit:,} bytes") from None
                window = min(end - position, window * 4, limit)
                continue
            self.pickles.append(result)
            return result.value, position + result.end

    def record(self, value, n: int, what: str, offset: int) -> tuple:
        """A pickled record torch writes as an n-tuple."""
        if type(value) not in (tuple, list) or len(value) != n:
            raise self.error(FormatError, f"{what} is not a {n}-tuple", offset=offset,
                             found=f"a {type(value).__name__}" + (f" of {len(value):,}" if
                                                                  type(value) in (tuple, list) else ""))
        return tuple(value)

    def named(self, refs: dict, key, who: str, offset: int):
        """The storage `key` names, which the tar member 'storages' must hold."""
        if key not in refs:
            raise self.error(FormatError, f"{who} refers to storage {shown(key)}, which the tar "
                             "member 'storages' does not hold", offset=offset)
        return refs[key]

    def count(self, position: int, end: int, unit: int) -> tuple[int, int]:
        value, position = self.pickle_at(position, end)
        if not isinstance(value, int) or not 0 <= value <= (end - position) // unit:
            raise self.error(FormatError, "a count in the tar archive does not fit its member",
                             offset=position, found=shown(value))
        return value, position

    def storages(self) -> tuple[dict, dict]:
        """StorageRef by key, and their absolute data offsets, with views resolved to roots."""
        position, end = self.member("storages")
        refs, offsets = {}, {}
        count, position = self.count(position, end, COUNT.size + 1)
        for _ in range(count):
            record, at = self.pickle_at(position, end)
            key, location, storage_class = self.record(record, 3, "a storage's (key, location, "
                                                       "storage class)", position)
            position = at
            key = _key(key)
            dtype = dtype_of(storage_class)
            (numel,) = COUNT.unpack(self.source.read(position, COUNT.size))
            if dtype not in TORCH_DTYPES:
                raise self.error(FormatError, f"storage {shown(key)} has an unknown type "
                                 f"{shown(dtype)}: the storages after it cannot be located",
                                 offset=position)
            nbytes = numel * TORCH_DTYPES[dtype][1]
            if numel < 0 or position + COUNT.size + nbytes > end:
                raise self.error(FormatError, f"storage {shown(key)} runs past its tar member",
                                 offset=position, found=f"{numel:,} elements")
            refs[key] = StorageRef(segment(key), dtype, numel, segment(location), storage_class.name)
            offsets[segment(key)] = position + COUNT.size
            position += COUNT.size + nbytes
        views, _ = self.pickle_at(position, end, last=True)
        if type(views) is not list:
            raise self.error(FormatError, "the storage views of the tar member 'storages' are "
                             "not a list", offset=position, found=type(views).__name__)
        for view in views:
            view_key, root_key, offset, numel = self.record(
                view, 4, "a storage view's (view key, root key, offset, numel)", position)
            view_key, root = _key(view_key), self.named(refs, _key(root_key), "storage view", position)
            if type(offset) is not int or type(numel) is not int:
                raise self.error(FormatError, f"storage view {shown(view_key)} has a non-integer "
                                 "offset or size")
            # torch casts both to int64 on the way to the root storage: a larger one fails there
            # (and one of 5,000 digits cannot even be printed)
            if not all(-INT64 <= v < INT64 for v in (offset, numel)):
                raise self.error(FormatError, f"storage view {shown(view_key)} in the tar member "
                                 "'storages' has an offset or element count beyond 64 bits",
                                 offset=position, expected="int64 values",
                                 found=f"offset {_sized(offset)}, {_sized(numel)} elements")
            # torch slices the root's bytes (legacy_load: root[offset_bytes:offset_bytes + n]),
            # with Python's slice rules: a view past the root's end is cut short, and a tensor
            # that needs more than is left gets a problem (torch refuses to load it).
            itemsize = TORCH_DTYPES[root.dtype][1]
            cut = range(root.nbytes)[offset * itemsize:(offset + numel) * itemsize]
            refs[view_key] = StorageRef(segment(view_key), root.dtype, len(cut) // itemsize,
                                        root.location, root.kind)
            offsets[segment(view_key)] = offsets[root.key] + cut.start
        return refs, offsets

    def tensors(self, storages: dict) -> dict:
        position, end = self.member("tensors")
        data = self.source.read(position, end - position) if end - position <= LIMITS.max_bytes \
            else None
        if data is None:
            raise self.error(LimitError, "the tensors member is larger than the limit")
        tensors = {}
        count, at = self.count(position, end, TENSOR_HEAD.size + 8)
        at -= position
        for _ in range(count):
            result = load_pickle(data, None, start=at)
            self.pickles.append(result)
            key, storage_key, _tensor_class = self.record(
                result.value, 3, "a tensor's (key, storage key, tensor class)", position + at)
            key, storage_key = _key(key), _key(storage_key)
            (ndim,) = TENSOR_HEAD.unpack_from(data, result.end)
            if not 0 <= ndim <= 64:
                raise self.error(FormatError, f"tensor {shown(key)} has {ndim:,} dimensions",
                                 offset=position + result.end)
            layout = struct.Struct(f"<{ndim}q{ndim}qq")
            values = layout.unpack_from(data, result.end + TENSOR_HEAD.size)
            storage = self.named(storages, storage_key, f"tensor {shown(key)}", position + at)
            sizes, strides, offset = values[:ndim], values[ndim:2 * ndim], values[-1]
            tensors[key] = TensorRef(storage, offset, sizes, strides, storage.dtype)
            at = result.end + TENSOR_HEAD.size + layout.size
        return tensors


def read(source: ByteSource) -> Checkpoint:
    reader = None
    try:
        reader = _Reader(source)
        storages, offsets = reader.storages()
        tensors = reader.tensors(storages)

        def persistent_load(pid):
            if isinstance(pid, tuple) and pid:
                return pid[0]  # a module class, with its source file and source code
            # torch looks up int(pid): the str() of a tensor (or storage) key, 64 bits at most
            if type(pid) is int and pid.bit_length() < 64:
                key = pid
            elif type(pid) is str and re.fullmatch(r"-?[0-9]{1,19}", pid):
                key = int(pid)
            else:
                raise FormatError("a persistent id of the tar member 'pickle' is not a tensor key",
                                  found=shown(pid) if type(pid) is str else type(pid).__name__)
            if key not in tensors and key not in storages:
                raise FormatError(f"the tar member 'pickle' refers to tensor {key}, which the "
                                  "member 'tensors' does not hold")
            return tensors[key] if key in tensors else storages[key]

        position, end = reader.member("pickle")
        main, _ = reader.pickle_at(position, end, persistent_load, last=True)
    except TensorloupeError as e:
        raise with_danger(e, reader.pickles if reader else []).located(
            file=source.name, format=FORMAT)
    except LOW_LEVEL_ERRORS as e:
        # never str(e): a KeyError holds a pickle value (a 5,000-digit int, a deep tuple)
        detail = shown(e.args[0]) if len(e.args) == 1 else ""
        raise with_danger(ErrorFactory(source.name, FORMAT)(
            FormatError, f"malformed tar checkpoint: {type(e).__name__} {detail}".rstrip()),
            reader.pickles if reader else []) from e

    def locate(ref):
        return None, offsets[ref.key], ref.nbytes, None

    extras = {"tar": {"members": sorted(reader.members), "storages": len(storages)}}
    return checkpoint(FORMAT, source, main, reader.pickles, locate, extras=extras)
