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

Every storage's offset follows from the element counts in the persistent ids, so nothing after
the pickles is read (no storage, no count prefix) when the layout accounts for the file exactly.
Otherwise the count prefixes are walked, as torch.load does, to say where the layout goes wrong.
"""

from __future__ import annotations

import struct

from ...errors import FormatError, LimitError, TensorloupeError, TruncatedError
from ...model import Checkpoint
from ...source import ByteSource
from .common import checkpoint, load_pickle, storage_loader
from .globals import TORCH_DTYPES
from ...unpickling.values import LIMITS

FORMAT = "pytorch-legacy"
EXTENSIONS = ()  # shares .pt/.pth/... with the ZIP format: found by content only
MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
# The magic number as the first opcodes of a protocol >= 2 pickle (LONG1 of 10 bytes), and as
# protocol 0/1 text (LONG "L...L\n").
MAGIC_BINARY = b"\x8a\x0a" + MAGIC_NUMBER.to_bytes(10, "little")
MAGIC_TEXT = b"L%dL\n" % MAGIC_NUMBER
COUNT = struct.Struct("<q")
FIRST_READ = 64 << 10   # the pickles are read in a window that grows 4x until they fit


def sniff(head: bytes, size: int, name: str) -> bool:
    # protocol 4 puts a FRAME (9 bytes) before the number
    return MAGIC_BINARY in head[:32] or MAGIC_TEXT in head[:40]


class _Pickles:
    """The five leading pickles, parsed from a prefix of the file that grows until they fit."""

    def __init__(self, source: ByteSource):
        window = min(source.size, FIRST_READ)
        while True:
            data = source.read(0, window)
            try:
                self._parse(data)
                return
            except TruncatedError:
                if window >= source.size:
                    raise
                if window >= LIMITS.max_bytes:
                    raise LimitError("the pickles before the storages are larger than the limit",
                                     expected=f"at most {LIMITS.max_bytes} bytes") from None
                window = min(source.size, window * 4)

    def _parse(self, data: bytes) -> None:
        magic = load_pickle(data, None)
        if magic.value != MAGIC_NUMBER:
            raise FormatError("the file does not start with torch's legacy magic number", offset=0,
                              expected=hex(MAGIC_NUMBER), found=str(magic.value)[:40])
        version = load_pickle(data, None, start=magic.end)
        if version.value != PROTOCOL_VERSION:
            raise FormatError("unknown legacy serialization version", offset=magic.end,
                              expected=PROTOCOL_VERSION, found=str(version.value)[:40])
        sys_info = load_pickle(data, None, start=version.end)
        self.loader = storage_loader(legacy=True)
        self.main = load_pickle(data, self.loader, start=sys_info.end)
        keys = load_pickle(data, None, start=self.main.end)
        if not isinstance(keys.value, list) or not all(isinstance(k, str) for k in keys.value):
            raise FormatError("the storage key list is not a list of strings", offset=self.main.end)
        self.pickles = [magic, version, sys_info, self.main, keys]
        self.sys_info = sys_info.value if isinstance(sys_info.value, dict) else {}
        self.keys, self.storage_start = keys.value, keys.end


def _layout(source: ByteSource, pickles: _Pickles) -> tuple[dict[str, int], list[str]]:
    """Data offset of every storage, from the persistent ids; count prefixes only if needed."""
    storages = pickles.loader.storages
    missing = [k for k in pickles.keys if k not in storages]
    if missing:
        raise FormatError(f"the storage list names {len(missing)} storages no tensor uses",
                          offset=pickles.main.end, found=", ".join(missing[:5]))
    unknown = [k for k in pickles.keys if storages[k].dtype not in TORCH_DTYPES]
    if unknown:
        raise FormatError(f"storage {unknown[0]!r} has an unknown type {storages[unknown[0]].dtype}: "
                          "the storages after it cannot be located", offset=pickles.storage_start)
    offsets, cursor = {}, pickles.storage_start
    for key in pickles.keys:
        offsets[key] = cursor + COUNT.size
        cursor += COUNT.size + storages[key].nbytes
    if cursor == source.size:
        return offsets, []
    # The ids do not account for the file: walk the count prefixes as torch.load does.
    warnings = [f"the storages' sizes from the pickle end at byte {cursor} but the file has "
                f"{source.size} bytes; storage offsets were read from the count prefixes"]
    cursor = pickles.storage_start
    for key in pickles.keys:
        ref = storages[key]
        (count,) = COUNT.unpack(source.read(cursor, COUNT.size))
        if count != ref.numel:
            raise FormatError(f"storage {key!r} is declared with {ref.numel} elements in the "
                              f"pickle but {count} in the file", offset=cursor,
                              expected=ref.numel, found=count)
        offsets[key] = cursor + COUNT.size
        cursor += COUNT.size + ref.nbytes
    if cursor > source.size:
        raise TruncatedError("the file ends inside its storages (truncated download?)",
                             offset=source.size, expected=f"{cursor} bytes", found=source.size)
    warnings.append(f"{source.size - cursor} bytes follow the last storage")
    return offsets, warnings


def read(source: ByteSource) -> Checkpoint:
    try:
        pickles = _Pickles(source)
        offsets, warnings = _layout(source, pickles)
    except TensorloupeError as e:
        raise e.located(file=source.name, format=FORMAT)

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
