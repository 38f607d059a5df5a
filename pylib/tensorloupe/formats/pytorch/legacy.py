"""PyTorch's pre-1.6 checkpoints (still written by `_use_new_zipfile_serialization=False`).

Layout (torch/serialization.py `_legacy_save`): five pickles back to back, then the storages:
  pickle  MAGIC_NUMBER (0x1950a86a20f9469cfc6c)
  pickle  PROTOCOL_VERSION (1001)
  pickle  sys_info {"protocol_version", "little_endian", "type_sizes"}
  pickle  the object; tensors refer to storages by persistent id
          ('storage', storage_class, key, location, numel, view_metadata)
  pickle  the storage keys, sorted as strings
  then, for each key in that order: an int64 little-endian element count, then the raw bytes.
Storage bytes are always little-endian whatever the writer's byte order (torch/csrc/serialization.cpp
converts on write), so sys_info's little_endian only records the machine that wrote the file.

Every storage's offset follows from the element counts in the persistent ids; when the layout
accounts for the file exactly, only the 8-byte count prefixes are read after the pickles (in one
vectored read), each checked against its storage as torch.load checks it. Otherwise the count
prefixes are walked, as torch.load does, to say where the layout goes wrong.
"""

from __future__ import annotations

import struct

from ...errors import ErrorFactory, FormatError, LimitError, TensorloupeError, TruncatedError
from ...model import Checkpoint
from ...source import ByteSource
from .common import checkpoint, load_pickle, storage_loader
from .allowlist import TORCH_DTYPES
from .safety import with_danger
from ...unpickling.objects import LIMITS, shown

FORMAT = "pytorch-legacy"
PICKLE_FORMAT = "pickle"  # a file torch.load would unpickle that is no torch checkpoint
MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
# The magic number as the first opcodes of a protocol >= 2 pickle (LONG1 of 10 bytes), and as
# protocol 0/1 text (LONG "L...L\n").
MAGIC_BINARY = b"\x8a\x0a" + MAGIC_NUMBER.to_bytes(10, "little")
MAGIC_TEXT = b"L%dL\n" % MAGIC_NUMBER
COUNT = struct.Struct("<q")
FIRST_READ = 64 << 10   # the pickles are read in a window that grows 4x until they fit


def sniff(head: bytes, size: int, name: str) -> bool:
    # protocol 4 puts a FRAME (9 bytes) before the number; any other binary pickle (PROTO 2-5)
    # is what torch.load's legacy path would unpickle too
    return MAGIC_BINARY in head[:32] or MAGIC_TEXT in head[:40] or \
        (len(head) > 2 and head[0] == PROTO and 2 <= head[1] <= 5)


PROTO = 0x80


def _growing(source: ByteSource, parse):
    """parse(prefix of the file), with a prefix that grows 4x until the pickles fit."""
    window = min(source.size, FIRST_READ)
    while True:
        data = source.read(0, window)
        try:
            return parse(data)
        except TruncatedError:
            if window >= source.size:
                raise
            if window >= LIMITS.max_bytes:
                raise ErrorFactory(source.name, FORMAT)(
                    LimitError, "the pickles before the storages are larger than the limit",
                    expected=f"at most {LIMITS.max_bytes:,} bytes") from None
            window = min(source.size, window * 4)


class NotLegacy(Exception):
    """The first pickle is not torch's magic number: what torch would run is that pickle."""

    def __init__(self, first):
        super().__init__("no magic number")
        self.first = first


class _Pickles:
    """The five leading pickles, parsed from a prefix of the file that grows until they fit."""

    def __init__(self, source: ByteSource):
        self.error = ErrorFactory(source.name, FORMAT)
        self.parsed: list = []    # the pickles read so far: what torch has run when it fails
        try:
            _growing(source, self._parse)
        except TensorloupeError as e:
            raise with_danger(e, self.parsed)

    def _parse(self, data: bytes) -> None:
        self.parsed = []
        magic = self._load(data, None)
        if type(magic.value) is not int or magic.value != MAGIC_NUMBER:
            raise NotLegacy(magic)
        version = self._load(data, None, start=magic.end)
        if version.value != PROTOCOL_VERSION:
            raise self.error(FormatError, "unknown legacy serialization version", offset=magic.end,
                              expected=PROTOCOL_VERSION, found=shown(version.value))
        sys_info = self._load(data, None, start=version.end)
        self.loader = storage_loader(legacy=True)
        self.main = self._load(data, self.loader, start=sys_info.end)
        keys = self._load(data, None, start=self.main.end)
        if not isinstance(keys.value, list) or not all(isinstance(k, str) for k in keys.value):
            raise self.error(FormatError, "the storage key list is not a list of strings",
                             offset=self.main.end)
        self.pickles = [magic, version, sys_info, self.main, keys]
        self.sys_info = sys_info.value if isinstance(sys_info.value, dict) else {}
        self.keys, self.storage_start = keys.value, keys.end

    def _load(self, data: bytes, persistent_load, start: int = 0):
        result = load_pickle(data, persistent_load, start=start)
        self.parsed.append(result)
        return result


def _layout(source: ByteSource, pickles: _Pickles) -> tuple[dict[str, int], list[str]]:
    """Data offset of every storage, from the persistent ids; count prefixes only if needed."""
    error = ErrorFactory(source.name, FORMAT)
    storages = pickles.loader.storages
    missing = [k for k in pickles.keys if k not in storages]
    if missing:
        raise error(FormatError, f"the storage list names {len(missing):,} storages no tensor uses",
                    offset=pickles.main.end, found=shown(missing[:5]))
    unknown = [k for k in pickles.keys if storages[k].dtype not in TORCH_DTYPES]
    if unknown:
        raise error(FormatError, f"storage {shown(unknown[0])} has an unknown type "
                    f"{shown(storages[unknown[0]].dtype)}: the storages after it cannot be located",
                    offset=pickles.storage_start)
    offsets, cursor = {}, pickles.storage_start
    for key in pickles.keys:
        offsets[key] = cursor + COUNT.size
        cursor += COUNT.size + storages[key].nbytes
    if cursor == source.size:
        # The sizes account for the file, but torch.load still reads each count prefix and
        # refuses a storage whose count is not its pickle's ("storage has wrong byte size"):
        # so are they here, all prefixes in one vectored read of 8 bytes each.
        prefixes = source.read_many([(offsets[k] - COUNT.size, COUNT.size) for k in pickles.keys])
        for key, prefix in zip(pickles.keys, prefixes):
            _check_count(error, key, storages[key], COUNT.unpack(prefix)[0],
                         offsets[key] - COUNT.size)
        return offsets, []
    # The ids do not account for the file: walk the count prefixes as torch.load does.
    warnings = [f"the storages' sizes from the pickle end at byte {cursor:,} but the file has "
                f"{source.size:,} bytes; storage offsets were read from the count prefixes"]
    cursor = pickles.storage_start
    for key in pickles.keys:
        ref = storages[key]
        (count,) = COUNT.unpack(source.read(cursor, COUNT.size))
        _check_count(error, key, ref, count, cursor)
        offsets[key] = cursor + COUNT.size
        cursor += COUNT.size + ref.nbytes
    if cursor > source.size:
        raise error(TruncatedError, "the file ends inside its storages (truncated download?)",
                             offset=source.size, expected=f"{cursor:,} bytes", found=source.size)
    warnings.append(f"{source.size - cursor:,} bytes follow the last storage")
    return offsets, warnings


def _check_count(error, key: str, ref, count: int, offset: int) -> None:
    """A storage's count prefix must be its pickle's element count, as torch.load requires."""
    if count != ref.numel:
        raise error(FormatError, f"storage {shown(key)} is declared with {ref.numel:,} "
                    f"elements in the pickle but its count prefix in the file says {count:,} "
                    "(torch.load refuses it: storage has wrong byte size)", offset=offset,
                    expected=ref.numel, found=count)


def read(source: ByteSource) -> Checkpoint:
    pickles = None
    try:
        pickles = _Pickles(source)
        offsets, warnings = _layout(source, pickles)
    except NotLegacy as e:
        return _plain_pickle(source, e.first, "does not start with torch's legacy magic number")
    except TensorloupeError as e:
        raise with_danger(e, pickles.pickles if pickles else []).located(
            file=source.name, format=FORMAT)

    def locate(ref):
        if ref.key not in offsets:
            return None, 0, 0, f"its storage {ref.key!r} is not in the file's storage list"
        return None, offsets[ref.key], ref.nbytes, None

    sizes = pickles.sys_info.get("type_sizes")
    extras = {"legacy": {
        "storages": len(pickles.keys), "storage_start": pickles.storage_start,
        "little_endian_writer": pickles.sys_info.get("little_endian") is True,
        "type_sizes": {k: v for k, v in sizes.items() if isinstance(k, str) and type(v) is int}
        if isinstance(sizes, dict) else {}}}
    return checkpoint(FORMAT, source, pickles.main.value, pickles.pickles, locate,
                      warnings=warnings, extras=extras)


def read_leading_pickle(source: ByteSource, why: str) -> Checkpoint:
    """What torch.load runs on a file that is no ZIP at byte 0: its legacy path unpickles the
    first pickle of the file (with every global it names) before checking the magic number."""
    try:
        pickles = _Pickles(source)
    except NotLegacy as e:
        return _plain_pickle(source, e.first, why)
    except TensorloupeError as e:
        error = ErrorFactory(source.name, FORMAT)
        raise error(type(e), f"the file {why}, so torch.load unpickles its first bytes, and they "
                    f"are no pickle tensorloupe can read: {e.message}", offset=e.offset) from e
    try:
        offsets, warnings = _layout(source, pickles)
    except TensorloupeError as e:
        raise with_danger(e, pickles.pickles)
    return checkpoint(FORMAT, source, pickles.main.value, pickles.pickles,
                      lambda ref: (None, offsets[ref.key], ref.nbytes, None)
                      if ref.key in offsets else (None, 0, 0, "its storage is not in the file"),
                      warnings=warnings)


def _plain_pickle(source: ByteSource, first, why: str) -> Checkpoint:
    """A file torch.load would only unpickle (and then refuse): its safety report, no tensors."""
    note = (f"the file {why}: torch.load(weights_only=False) unpickles its first "
            f"{first.end:,} bytes as a pickle, running every global it names, before it refuses "
            "the file; that pickle is what this report analyses")
    trailing = source.size - first.end
    if trailing:
        note += f" ({trailing:,} more bytes follow it and are not read by torch)"

    def locate(ref):
        return None, 0, 0, "a plain pickle holds no storage bytes"
    return checkpoint(PICKLE_FORMAT, source, first.value, [first], locate, notes=[note],
                      extras={"pickle_bytes": first.end})
