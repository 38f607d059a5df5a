"""A ZIP archive read from its tail, and where each stored member's bytes begin.

The stdlib `zipfile` reads the end-of-central-directory record, the ZIP64 end record and locator,
and the central directory, through a file object over our byte source. What it does not give is
where a member's data starts: that is after the member's *local* header, whose name and extra
field lengths may differ from the central directory's (torch pads the local extra field so that
data is 64-byte aligned, and adds a ZIP64 extra there for members over 4 GiB). So each local header
is read here (APPNOTE 4.3.7), in coalesced reads, and stored members are addressed in place.
Small members (data.pkl, version records) are read whole; deflated ones are inflated with zlib
under a size cap.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from typing import NamedTuple

from ...errors import (ErrorFactory, FormatError, LimitError, TensorloupeError, TruncatedError,
                       UnsupportedError)
from ...source import ByteSource
from ...source.base import SourceFile
from .lookup import Lookup

# APPNOTE 4.3.7 local file header: signature, version, flags, method, time, date, crc,
# compressed size, size, name length, extra length.
LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
LOCAL_SIGNATURE = b"PK\x03\x04"
STORED, DEFLATED = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED
# The central directory is parsed whole by zipfile (a ZipInfo per member, ~0.5 KB each): 32 MiB
# is ~700,000 minimal entries, while a 2,000-tensor checkpoint's directory is ~200 KB.
MAX_DIRECTORY_BYTES = 32 << 20
ENCRYPTED = 0x1                   # general purpose flag bit 0 (APPNOTE 4.4.4)
GAP_BYTES = 64 << 10              # local headers this close together are read in one go
MAX_GROUP_BYTES = 4 << 20


class LocalHeader(NamedTuple):
    signature: bytes
    version: int
    flags: int
    method: int
    time: int
    date: int
    crc: int
    compressed_size: int
    size: int
    name_length: int
    extra_length: int


class CappedFile(SourceFile):
    """A file object for zipfile and tarfile whose reads are clipped to the bytes that remain and
    refused above a limit. (io.RawIOBase.read allocates the size it is asked for before reading:
    a directory or a tar PAX header that declares 2**40 bytes must not become that allocation.)"""

    def __init__(self, source: ByteSource, limit: int = MAX_DIRECTORY_BYTES):
        super().__init__(source)
        self.limit = limit

    def read(self, size=-1):
        remaining = max(0, self.source.size - self.position)
        wanted = remaining if size is None or size < 0 else min(size, remaining)
        if wanted > self.limit:
            raise LimitError("an archive directory or header is larger than the limit",
                             file=self.source.name, offset=self.position,
                             expected=f"at most {self.limit:,} bytes", found=wanted)
        return super().read(wanted)


def _read_data(source: ByteSource, offset: int, n: int) -> bytes:
    # Planned, coalesced reads: pass them through any block cache as they are.
    reader = getattr(source, "read_data", None) or source.read
    return reader(offset, n)


class Archive:
    """The members of a ZIP archive: names, sizes, and (on request) data offsets."""

    def __init__(self, source: ByteSource, fmt: str):
        self.source, self.fmt = source, fmt
        try:
            with zipfile.ZipFile(CappedFile(source)) as archive:
                infos = archive.infolist()
        except TensorloupeError as e:
            raise e.located(file=source.name, format=fmt)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError,
                struct.error, OverflowError, UnicodeDecodeError, NotImplementedError,
                RuntimeError, KeyError, IndexError) as e:
            if isinstance(e, zipfile.BadZipFile) and source.read(0, min(4, source.size)) == LOCAL_SIGNATURE:
                # It starts as a ZIP, but its directory (at the end) is not there: cut short.
                raise TruncatedError("the ZIP archive's central directory (at its end) is missing",
                                     file=source.name, format=fmt, found=f"{source.size:,} bytes") from e
            raise FormatError(f"not a readable ZIP archive: {e}", file=source.name, format=fmt) from e
        # Lookups answer as torch's reader does (lookup.py): a name that several entries share
        # (exactly, or but for case) maps to the one entry torch opens; the others are `shadowed`.
        self.infos = infos
        self.lookup = Lookup(infos)
        chosen = {self.lookup.find_lowered(low) for low in self.lookup.lowered}
        self.members: dict[str, zipfile.ZipInfo] = {
            info.filename: info for i, info in enumerate(infos) if i in chosen}
        self.shadowed = [info for i, info in enumerate(infos) if i not in chosen]
        # zipfile tolerates bytes before the archive (it shifts every offset); torch does not.
        self.leading = min((info.header_offset for info in infos), default=0)
        self._data_offsets: dict[str, int] = {}
        self._member_sources: dict[str, MemberSource] = {}

    def find(self, name: str) -> str | None:
        """The member torch opens for `name` (ASCII case ignored), or None."""
        index = self.lookup.find(name)
        return None if index is None else self.infos[index].filename

    def variants(self, name: str) -> list[zipfile.ZipInfo]:
        """Every entry torch could mean by `name`: exact duplicates and case variants."""
        return [self.infos[i] for i in self.lookup.variants(name)]

    def member_source(self, name: str) -> "MemberSource":
        """A stored member as a byte source of its own, positioned on first use."""
        if name not in self._member_sources:
            self._member_sources[name] = MemberSource(self, name)
        return self._member_sources[name]

    def known_data_offset(self, name: str) -> int | None:
        return self._data_offsets.get(name)

    def error(self, cls, message, **kw):
        return ErrorFactory(self.source.name, self.fmt)(cls, message, **kw)

    def data_offsets(self, names: list[str]) -> dict[str, int]:
        """Absolute offsets of the first data byte of each named member, from local headers."""
        todo = sorted({n for n in names if n not in self._data_offsets},
                      key=lambda n: self.members[n].header_offset)
        for name in todo:
            offset = self.members[name].header_offset
            if not 0 <= offset <= self.source.size - LOCAL_HEADER.size:
                raise self.error(FormatError, f"the directory puts member {name!r} outside the file",
                                 expected=f"a local header offset below {self.source.size:,}",
                                 found=offset)
        groups = []
        i = 0
        while i < len(todo):
            first = self.members[todo[i]].header_offset
            j = i + 1
            while j < len(todo):
                offset = self.members[todo[j]].header_offset
                if offset - self.members[todo[j - 1]].header_offset > GAP_BYTES or \
                        offset - first > MAX_GROUP_BYTES:
                    break
                j += 1
            # Only the fixed part is needed: the lengths in it say where the data begins.
            end = min(self.source.size, self.members[todo[j - 1]].header_offset + LOCAL_HEADER.size)
            groups.append((first, end - first, todo[i:j]))
            i = j
        # Every group's window is known now: read them together (one vectored read).
        windows = self.source.read_many([(first, n) for first, n, _ in groups])
        for (first, _, group), window in zip(groups, windows):
            for name in group:
                self._data_offsets[name] = self._parse_local(name, window, first)
        return {n: self._data_offsets[n] for n in names}

    def _parse_local(self, name: str, window: bytes, window_start: int,
                     info: zipfile.ZipInfo | None = None) -> int:
        info = info or self.members[name]
        at = info.header_offset - window_start
        if at + LOCAL_HEADER.size > len(window):
            raise self.error(TruncatedError, f"the local header of {name!r} runs past the end of "
                             "the file", offset=info.header_offset)
        header = LocalHeader(*LOCAL_HEADER.unpack_from(window, at))
        if header.signature != LOCAL_SIGNATURE:
            raise self.error(FormatError, f"member {name!r} has no local header where the central "
                             "directory says", offset=info.header_offset,
                             expected=LOCAL_SIGNATURE.hex(" "), found=header.signature.hex(" "))
        data_offset = (info.header_offset + LOCAL_HEADER.size + header.name_length
                       + header.extra_length)
        if data_offset + info.compress_size > self.source.size:
            raise self.error(TruncatedError, f"member {name!r} ends past the end of the file "
                             "(truncated download?)", offset=data_offset,
                             expected=f"{info.compress_size:,} bytes",
                             found=f"{max(0, self.source.size - data_offset):,}")
        return data_offset

    def read(self, name: str, cap: int, *, verify: bool = True,
             info: zipfile.ZipInfo | None = None) -> bytes:
        """A whole (small) member, inflated if deflated, at most `cap` bytes. With verify=False a
        CRC-32 mismatch is left to the caller (`crc_problem`): torch does not check CRCs."""
        info = info or self.members[name]
        size = max(info.file_size, info.compress_size)
        if size > cap:
            raise self.error(LimitError, f"member {name!r} is larger than the limit",
                             expected=f"at most {cap:,} bytes", found=size)
        if info.flag_bits & ENCRYPTED:
            raise self.error(UnsupportedError, f"member {name!r} is encrypted")
        start = self._data_offset(name, info)
        raw = self.source.read(start, info.compress_size)
        if info.compress_type == DEFLATED:
            try:
                inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                data = inflater.decompress(raw, info.file_size + 1)
            except zlib.error as e:
                raise self.error(FormatError, f"member {name!r} does not inflate: {e}",
                                 offset=start) from e
        elif info.compress_type == STORED:
            data = raw
            if info.compress_size != info.file_size:
                raise self.error(FormatError, f"stored member {name!r} declares {info.file_size:,} "
                                 f"bytes but holds {info.compress_size:,}", offset=start,
                                 expected="equal sizes for a stored member",
                                 found=f"{info.compress_size:,} and {info.file_size:,}")
        else:
            raise self.error(UnsupportedError, f"member {name!r} uses ZIP compression method "
                             f"{info.compress_type}; tensorloupe reads stored and deflated members")
        if len(data) != info.file_size:
            raise self.error(FormatError, f"member {name!r} holds {len(data):,} bytes, not the "
                             f"{info.file_size:,} its directory entry says", offset=start)
        problem = self.crc_problem(info, data) if verify else None
        if problem:
            raise self.error(FormatError, problem, offset=start)
        return data

    @staticmethod
    def crc_problem(info: zipfile.ZipInfo, data: bytes) -> str | None:
        # torch may write a zero CRC when CRC computation is switched off; check the others.
        crc = zlib.crc32(data)
        if info.CRC and crc != info.CRC:
            return (f"member {info.filename!r} fails its CRC-32 check (the directory says "
                    f"{info.CRC:#010x}, its bytes give {crc:#010x})")
        return None

    def _data_offset(self, name: str, info: zipfile.ZipInfo) -> int:
        if info is self.members.get(name):
            return self.data_offsets([name])[name]
        # a shadowed entry (same name as the one torch opens): read its local header directly
        window = _read_data(self.source, info.header_offset,
                            min(LOCAL_HEADER.size, max(0, self.source.size - info.header_offset)))
        return self._parse_local(info.filename, window, info.header_offset, info)


class MemberSource(ByteSource):
    """The bytes of one stored member, read in place.

    Where the data begins is only known from the member's local header, and reading every
    local header when a checkpoint opens costs one read per storage (~1.5 ms each in the browser:
    3 s for a 2,000-tensor file). So it is read the first time the member's bytes are needed.
    """

    def __init__(self, archive: Archive, name: str):
        super().__init__()
        self.archive = archive
        self.member = name
        self.name = archive.source.name
        self.size = archive.members[name].file_size

    @property
    def base(self) -> int:
        return self.archive.data_offsets([self.member])[self.member]

    def root(self) -> ByteSource:
        return self.archive.source.root()

    @staticmethod
    def locate_together(sources) -> None:
        """Read the local headers of many members in coalesced reads (for listings of every offset)."""
        by_archive: dict[int, tuple[Archive, list[str]]] = {}
        for source in sources:
            if isinstance(source, MemberSource):
                by_archive.setdefault(id(source.archive), (source.archive, []))[1].append(source.member)
        for archive, names in by_archive.values():
            archive.data_offsets(names)

    def file_offset(self, offset: int) -> int:
        return self.archive.source.file_offset(self.base + offset)

    def known_file_offset(self, offset: int) -> int | None:
        base = self.archive.known_data_offset(self.member)
        return None if base is None else self.archive.source.known_file_offset(base + offset)

    def _read(self, offset: int, n: int) -> bytes:
        return self._count(self.archive.source.read(self.base + offset, n))

    def read_data(self, offset: int, n: int) -> bytes:
        if offset + n > self.size:
            return self.read(offset, n)  # raises the truncation error with the member's numbers
        return self._count(_read_data(self.archive.source, self.base + offset, n))
