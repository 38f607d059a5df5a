"""ZIP members as byte sources: a stored member in place, a deflated one inflated as it is read.

The ZIP's directory and local headers are read by formats/pytorch/members.py's Archive (zipfile
plus the local-header arithmetic); this adds what the non-torch ZIPs need: the first member's name
(a cheap sniff on the head alone) and a source that inflates a deflated member from its start only
as far as a read asks, under a cap (a .npz of savez_compressed: its header costs a few KiB of
inflating, a value at the end of a member the whole member before it).
"""

from __future__ import annotations

import zlib

from ...errors import FormatError, LimitError, TruncatedError
from ...source import ByteSource
from ...source.base import SliceSource
from ..pytorch.members import LOCAL_HEADER, LOCAL_SIGNATURE, Archive

MAX_INFLATED = 256 << 20     # bytes one deflated member is inflated to, at most
FIRST_CHUNK = 4096           # compressed bytes read for a member's first inflate (its header)
CHUNK = 1 << 20


def first_member(head: bytes) -> str | None:
    """The name in the local header at byte 0, or None if the head is no ZIP (or too short)."""
    if not head.startswith(LOCAL_SIGNATURE) or len(head) < LOCAL_HEADER.size:
        return None
    fields = LOCAL_HEADER.unpack_from(head)
    name_length = fields[9]
    name = head[LOCAL_HEADER.size:LOCAL_HEADER.size + name_length]
    return name.decode("utf-8", "replace") if len(name) == name_length else None


class MemberSlice(SliceSource):
    """A stored member in place, whose reads pass through the block cache unrounded: a member's
    header (a safetensors or GGUF header deep in the archive) costs its own bytes, not a 64 KiB
    block around them."""

    def _read(self, offset: int, n: int) -> bytes:
        return self._count(self.inner.read_data(self.base + offset, n))


class InflatedSource(ByteSource):
    """A deflated member's bytes, inflated from its start up to the furthest byte read so far."""

    def __init__(self, archive: Archive, member: str, data_offset: int):
        super().__init__()
        info = archive.members[member]
        self.archive, self.member, self.base = archive, member, data_offset
        self.compressed = info.compress_size
        self.size = info.file_size
        self.name = archive.source.name
        self._out = bytearray()
        self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        self._consumed = 0

    def root(self) -> ByteSource:
        return self.archive.source.root()

    def known_file_offset(self, offset: int) -> int | None:
        return None        # a deflated element has no byte offset of its own in the file

    def file_offset(self, offset: int) -> int:
        return self.base

    def _read(self, offset: int, n: int) -> bytes:
        need = offset + n
        if need > MAX_INFLATED:
            raise self.archive.error(LimitError, f"member {self.member!r} would be inflated past "
                                     "the limit to read these bytes", expected=f"at most "
                                     f"{MAX_INFLATED:,} bytes", found=f"{need:,}")
        source = self.archive.source
        while len(self._out) < need and not self._inflater.eof:
            data = self._inflater.unconsumed_tail
            if not data:
                if self._consumed >= self.compressed:
                    break
                take = min(self.compressed - self._consumed, CHUNK if self._out else FIRST_CHUNK)
                data = source.read_data(self.base + self._consumed, take)
                self._consumed += take
            try:
                self._out += self._inflater.decompress(data, need - len(self._out) + FIRST_CHUNK)
            except zlib.error as e:
                raise self.archive.error(FormatError, f"member {self.member!r} does not inflate: "
                                         f"{e}", offset=self.base) from e
        if len(self._out) < need:
            raise self.archive.error(TruncatedError, f"member {self.member!r} inflates to "
                                     f"{len(self._out):,} bytes, fewer than the {self.size:,} its "
                                     "directory entry says", offset=self.base)
        return self._count(bytes(self._out[offset:need]))
