"""Which ZIP member torch opens for a record name: the same answer as its ZIP reader, decided on bytes.

torch reads ZIP checkpoints with caffe2's PyTorchStreamReader over miniz (torch 2.13: miniz 3.0.2):
  - the archive's root folder is the folder of the FIRST central directory entry;
  - `get_record("data.pkl")` looks up "<root>/data.pkl" with `mz_zip_reader_locate_file(..., 0)`:
    without MZ_ZIP_FLAG_CASE_SENSITIVE the comparison lowercases ASCII letters, and it binary
    searches an index that `mz_zip_reader_init` heap-sorted by lowercased name;
  - CRC-32 checks are compiled out (MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS).
So with two members whose names are equal but for case (or equal outright), which one torch opens
depends on where the heap sort put them and where the binary search probes: neither "the first"
nor "the last". `Lookup` replays miniz's heap sort and binary search on the raw name bytes of the
central directory (not the decoded names: zipfile cuts a name at a NUL byte, miniz does not), so
tensorloupe analyses the member torch would unpickle. tests/test_torch_hostile.py checks it
against torch.load on shuffled archives. When all lowercased names are distinct (every real
checkpoint), a dict answers the same and the sort is skipped.
"""

from __future__ import annotations

import zipfile

UTF8_FLAG = 0x800  # general purpose bit 11: the name is UTF-8, else code page 437 (APPNOTE 4.4.4)


def raw_name(info: zipfile.ZipInfo) -> bytes:
    """The name's bytes as the central directory holds them (before zipfile cuts it at a NUL)."""
    name = info.orig_filename
    try:
        return name.encode("utf-8" if info.flag_bits & UTF8_FLAG else "cp437")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape")


def _less(a: bytes, b: bytes) -> bool:
    # miniz's mz_zip_reader_filename_less: compare lowercased bytes; on a common prefix, shorter first
    n = min(len(a), len(b))
    for x, y in zip(a[:n], b[:n]):
        if x != y:
            return x < y
    return len(a) < len(b)


def _sift(names: list[bytes], order: list[int], root: int, end: int) -> None:
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and _less(names[order[child]], names[order[child + 1]]):
            child += 1
        if not _less(names[order[root]], names[order[child]]):
            return
        order[root], order[child] = order[child], order[root]
        root = child


def heap_order(names: list[bytes]) -> list[int]:
    """miniz's heap sort of central directory indices by lowercased name (not a stable sort)."""
    size = len(names)
    order = list(range(size))
    if size <= 1:
        return order
    for start in range((size - 2) >> 1, -1, -1):
        _sift(names, order, start, size)
    for end in range(size - 1, 0, -1):
        order[end], order[0] = order[0], order[end]
        _sift(names, order, 0, end)
    return order


class Lookup:
    """Record name -> central directory index, as torch's reader resolves it."""

    def __init__(self, infos: list[zipfile.ZipInfo]):
        self.lowered = [raw_name(info).lower() for info in infos]  # bytes.lower(): ASCII only
        self.exact: dict[bytes, int] | None = None
        if len(set(self.lowered)) == len(self.lowered):
            self.exact = {name: i for i, name in enumerate(self.lowered)}
            self.order: list[int] = []
        else:
            self.order = heap_order(self.lowered)

    def find(self, name: str) -> int | None:
        return self.find_lowered(name.encode("utf-8").lower())

    def find_lowered(self, key: bytes) -> int | None:
        if self.exact is not None:
            return self.exact.get(key)
        low, high = 0, len(self.order) - 1
        while low <= high:
            middle = low + ((high - low) >> 1)
            probe = self.lowered[self.order[middle]]
            if probe == key:
                return self.order[middle]
            if _less(probe, key):
                low = middle + 1
            else:
                high = middle - 1
        return None

    def variants(self, name: str) -> list[int]:
        """Every entry whose name equals `name` but for ASCII case (torch opens one of them)."""
        key = name.encode("utf-8").lower()
        return [i for i, lowered in enumerate(self.lowered) if lowered == key]
