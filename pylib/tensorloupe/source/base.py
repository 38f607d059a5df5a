"""The plain byte sources: the interface (ByteSource), bytes in memory, a local file, a slice
of another source, and a file-like view of any source for the stdlib readers (zipfile, tarfile)."""

from __future__ import annotations

import io
import os
import posixpath
from collections import OrderedDict

from ..errors import TruncatedError, UnreadableError, UsageError


class ByteSource:
    """Base class: subclasses implement `_read(offset, n)` which may return fewer bytes at EOF."""

    name: str = "<source>"
    size: int = 0
    waits = False   # each read waits on a network: worth issuing side by side with others

    def __init__(self) -> None:
        self.reads = 0
        self.bytes_read = 0

    def read(self, offset: int, n: int) -> bytes:
        if n < 0 or offset < 0:
            raise UsageError(f"invalid read of {n:,} bytes at offset {offset:,}", file=self.name)
        if n == 0:
            return b""
        available = max(0, min(n, self.size - offset))
        data = self._read(offset, available) if available else b""
        if len(data) < n:
            raise TruncatedError(
                f"the file ends {n - len(data):,} bytes short of a {n:,}-byte read",
                file=self.name, offset=offset, expected=f"{n:,} bytes",
                found=f"{len(data):,} bytes (file size {self.size:,})")
        return data

    def _read(self, offset: int, n: int) -> bytes:
        raise NotImplementedError

    def read_data(self, offset: int, n: int) -> bytes:
        """A read of tensor data. The sampler has already planned and merged these ranges, so caching
        layers pass them straight through instead of rounding them up to blocks."""
        return self.read(offset, n)

    def read_many(self, ranges) -> list[bytes]:
        """Several planned data reads at once: exactly `[read_data(o, n) for o, n in ranges]`.

        Sources where a read waits on something (a server, the browser's File API) issue them
        together; the ranges are never merged or split into more bytes than asked for."""
        ranges = [(int(o), int(n)) for o, n in ranges]
        for o, n in ranges:
            if n < 0 or o < 0 or o + n > self.size:
                self.read(o, n)  # raises the single read's error
        return self._read_many(ranges)

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Valid ranges inside the source; the default reads them one at a time."""
        return [self.read_data(o, n) for o, n in ranges]

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """A hint: `read_many(ranges)` comes next, so sources that can (a browser File) start
        those reads now and let the caller compute while they are on their way. Prefetches
        queue up: the next `read_many` takes the first if it asks for exactly its ranges, and
        drops them all otherwise; they are counted when they are started (bytes read are bytes
        the file gave, taken or not). Most sources ignore it."""

    def _count(self, data: bytes) -> bytes:
        self.reads += 1
        self.bytes_read += len(data)
        return data

    def _count_each(self, datas: list[bytes]) -> list[bytes]:
        """Count a layer's vectored reads like its single reads (an empty read is no read)."""
        for data in datas:
            if data:
                self._count(data)
        return datas

    def root(self) -> "ByteSource":
        """The source that really does I/O (what bytes-read counters should be taken from)."""
        return self

    # Files given with this one (opening/shards.py sets them: an ONNX model's external data
    # picked beside it), by name; `beside` answers from them first.
    neighbours: dict = {}

    def beside(self, name: str) -> "ByteSource":
        """The file `name` in this file's folder (a relative name the caller has checked stays
        in it: no '..', not absolute): an ONNX model's external data. Files given with this
        one first, then the folder on disk or the URL's directory."""
        given = self.neighbours.get(name)
        return given if given is not None else self._beside(name)

    def _beside(self, name: str) -> "ByteSource":
        raise UnreadableError(f"{self.name} has no folder to find {name!r} in (open it from a "
                              "file or URL, or give both files)", file=name)

    def file_offset(self, offset: int) -> int:
        """Where byte `offset` of this source lies in the file (sources inside archives may have
        to read a header to know)."""
        return offset

    def known_file_offset(self, offset: int) -> int | None:
        """The same, or None if finding it out would need a read."""
        return offset

    def close(self) -> None:
        pass


def inside_folder(name: str) -> str | None:
    """A file name from a file (ONNX external data, an HDF5 external link) as `beside` takes it:
    relative, never climbing out ('..'), not absolute nor a drive letter, no NUL; '/' separators,
    normalised. None where it would leave the folder."""
    path = name.replace("\\", "/")
    if (not name or path.startswith("/") or (len(path) > 1 and path[1] == ":")
            or ".." in path.split("/") or "\0" in path):
        return None
    return posixpath.normpath(path)


class MemorySource(ByteSource):
    """Bytes already in memory (the demo model, tests, small fetched files)."""

    def __init__(self, data: bytes | bytearray | memoryview, name: str = "<memory>"):
        super().__init__()
        self._data = memoryview(data).cast("B")
        self.name = name
        self.size = len(self._data)

    def _read(self, offset: int, n: int) -> bytes:
        return self._count(bytes(self._data[offset:offset + n]))


class _OpenFiles:
    """The open files of every FileSource, at most MAX_OPEN at once (least recently read closed
    first, and opened again when next read): a folder of 10,000 shards opens with the system's
    limit on open files (often 1,024) far away."""

    MAX_OPEN = 128

    def __init__(self):
        self._open: OrderedDict[int, object] = OrderedDict()

    def get(self, source: "FileSource"):
        handle = self._open.get(id(source))
        if handle is not None:
            self._open.move_to_end(id(source))
            return handle
        handle = source._reopen()
        self._open[id(source)] = handle
        while len(self._open) > self.MAX_OPEN:
            self._open.popitem(last=False)[1].close()
        return handle

    def close(self, source: "FileSource") -> None:
        handle = self._open.pop(id(source), None)
        if handle is not None:
            handle.close()


OPEN_FILES = _OpenFiles()


class FileSource(ByteSource):
    """A local file read by position; the file is never read whole.

    Uses plain seek/read so the same code works on CPython and on Pyodide's WORKERFS mount of a
    browser File (where os.pread and mmap are not available). Its file handle is one of at most
    OPEN_FILES.MAX_OPEN held open at once.
    """

    def __init__(self, path: str | os.PathLike, name: str | None = None):
        super().__init__()
        self.path = os.fspath(path)
        self.name = name or os.path.basename(self.path)
        self.size = -1
        handle = OPEN_FILES.get(self)
        handle.seek(0, io.SEEK_END)
        self.size = handle.tell()

    def _reopen(self):
        try:
            handle = open(self.path, "rb")
        except OSError as e:
            raise UnreadableError(f"cannot open the file: {e.strerror}", file=self.name) from e
        if self.size >= 0 and handle.seek(0, io.SEEK_END) != self.size:
            handle.close()
            raise UsageError("the file changed while it was open (its size is not the same)",
                             file=self.name)
        return handle

    def _read(self, offset: int, n: int) -> bytes:
        handle = OPEN_FILES.get(self)
        chunks = []
        remaining = n
        try:   # an I/O error (a failing disk, a network share gone) is the file's, said as such
            handle.seek(offset)
            while remaining:
                chunk = handle.read(remaining)
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
        except OSError as e:
            raise UnreadableError(f"cannot read {n:,} bytes at offset {offset:,}: {e.strerror or e}",
                                  file=self.name, offset=offset) from e
        return self._count(b"".join(chunks))

    def close(self) -> None:
        OPEN_FILES.close(self)

    def _beside(self, name: str) -> ByteSource:
        return type(self)(os.path.join(os.path.dirname(self.path), *name.split("/")))

    def __del__(self):
        try:
            OPEN_FILES.close(self)
        except Exception:   # at interpreter exit the module's globals may already be gone
            pass


class SliceSource(ByteSource):
    """A window [base, base + length) of another source, e.g. one member of an archive."""

    def __init__(self, inner: ByteSource, base: int, length: int, name: str | None = None):
        super().__init__()
        if base < 0 or length < 0 or base + length > inner.size:
            raise TruncatedError(
                f"a {length:,}-byte region at {base:,} does not fit in the file",
                file=inner.name, offset=base, expected=f"at most {inner.size:,} bytes",
                found=f"region end {base + length:,}")
        self.inner = inner
        self.base = base
        self.size = length
        self.name = name or inner.name

    def root(self) -> ByteSource:
        return self.inner.root()

    def _beside(self, name: str) -> ByteSource:
        return self.inner.beside(name)

    def file_offset(self, offset: int) -> int:
        return self.inner.file_offset(self.base + offset)

    def known_file_offset(self, offset: int) -> int | None:
        return self.inner.known_file_offset(self.base + offset)

    def _read(self, offset: int, n: int) -> bytes:
        return self._count(self.inner.read(self.base + offset, n))

    def read_data(self, offset: int, n: int) -> bytes:
        if offset + n > self.size:
            return self.read(offset, n)  # raises the truncation error with this slice's numbers
        return self._count(self.inner.read_data(self.base + offset, n))

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        shifted = [(self.base + o, n) for o, n in ranges]
        return self._count_each(self.inner.read_many(shifted))

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        if all(0 <= o and 0 <= n and o + n <= self.size for o, n in ranges):
            self.inner.prefetch([(self.base + o, n) for o, n in ranges])


class SourceFile(io.RawIOBase):
    """A read-only, seekable file object over a source, for stdlib readers (zipfile, tarfile)."""

    def __init__(self, source: ByteSource):
        super().__init__()
        self.source = source
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.source.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer) -> int:
        n = min(len(buffer), max(0, self.source.size - self.position))
        if n == 0:
            return 0
        data = self.source.read(self.position, n)
        buffer[:n] = data
        self.position += n
        return n
