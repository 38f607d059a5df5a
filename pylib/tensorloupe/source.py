"""Byte sources: the only way any reader touches file bytes.

A source has a `name`, a `size` and `read(offset, n)`, which returns exactly `n` bytes or raises
TruncatedError naming the offset and the shortfall. Every source counts the reads it makes and the
bytes they return, so tests and benchmarks can prove that opening a 40 GB file reads only its header.

In the browser every read costs ~1-1.5 ms whatever its size, so slow sources are wrapped in
CachedSource (fixed aligned blocks, LRU, bounded memory) and the sampler coalesces its ranges.
"""

from __future__ import annotations

import io
import os
from collections import OrderedDict

from .errors import FetchError, FormatError, TruncatedError, UsageError
# The HTTP checks and the wording of HTTP failures (range_refused, http_failed) are shared with
# the browser's source (web.remote), so the CLI and the page say the same thing.
from .http_reply import (CONNECT_SECONDS, MAX_REDIRECTS, REDIRECTS, Deadline, check_reply,  # noqa: F401
                         http_failed, range_refused, redirect_target, too_slow)


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
            raise UsageError(f"invalid read of {n} bytes at offset {offset}", file=self.name)
        if n == 0:
            return b""
        available = max(0, min(n, self.size - offset))
        data = self._read(offset, available) if available else b""
        if len(data) < n:
            raise TruncatedError(
                f"the file ends {n - len(data)} bytes short of a {n}-byte read",
                file=self.name, offset=offset, expected=f"{n} bytes",
                found=f"{len(data)} bytes (file size {self.size})")
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

    def file_offset(self, offset: int) -> int:
        """Where byte `offset` of this source lies in the file (sources inside archives may have
        to read a header to know)."""
        return offset

    def known_file_offset(self, offset: int) -> int | None:
        """The same, or None if finding it out would need a read."""
        return offset

    def close(self) -> None:
        pass


class MemorySource(ByteSource):
    """Bytes already in memory (the demo model, tests, small fetched files)."""

    def __init__(self, data: bytes | bytearray | memoryview, name: str = "<memory>"):
        super().__init__()
        self._data = memoryview(data).cast("B")
        self.name = name
        self.size = len(self._data)

    def _read(self, offset: int, n: int) -> bytes:
        return self._count(bytes(self._data[offset:offset + n]))


class FileSource(ByteSource):
    """A local file read by position; the file is never read whole.

    Uses plain seek/read so the same code works on CPython and on Pyodide's WORKERFS mount of a
    browser File (where os.pread and mmap are not available).
    """

    def __init__(self, path: str | os.PathLike, name: str | None = None):
        super().__init__()
        self.path = os.fspath(path)
        self.name = name or os.path.basename(self.path)
        try:
            self._file = open(self.path, "rb")
        except OSError as e:
            raise UsageError(f"cannot open the file: {e.strerror}", file=self.name) from e
        self._file.seek(0, io.SEEK_END)
        self.size = self._file.tell()

    def _read(self, offset: int, n: int) -> bytes:
        self._file.seek(offset)
        chunks = []
        remaining = n
        while remaining:
            chunk = self._file.read(remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return self._count(b"".join(chunks))

    def close(self) -> None:
        self._file.close()


class CachedSource(ByteSource):
    """Read-through cache of fixed-size aligned blocks with LRU eviction and a memory bound.

    Small header reads (GGUF's thousands of short strings, zip records) become a handful of block
    reads. A request spanning several missing blocks fetches them in one inner read.
    """

    def __init__(self, inner: ByteSource, block_size: int = 1 << 16, max_bytes: int = 16 << 20):
        super().__init__()
        if block_size <= 0 or max_bytes < block_size:
            raise UsageError("the cache needs block_size > 0 and max_bytes >= block_size")
        self.inner = inner
        self.name = inner.name
        self.size = inner.size
        self.block_size = block_size
        self.max_blocks = max_bytes // block_size
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def root(self) -> ByteSource:
        return self.inner.root()

    def file_offset(self, offset: int) -> int:
        return self.inner.file_offset(offset)

    def known_file_offset(self, offset: int) -> int | None:
        return self.inner.known_file_offset(offset)

    def read_data(self, offset: int, n: int) -> bytes:
        if n <= 0 or offset + n > self.size:
            return self.read(offset, n)  # the single read's answer or error
        return self._count(self._planned([(offset, n)])[0])

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        return self._count_each(self._planned(ranges))

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        if all(0 <= o and 0 <= n and o + n <= self.size for o, n in ranges):
            self.inner.prefetch(self._plan(ranges, touch=False)[1])

    def _planned(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Planned data reads: bytes in cached blocks come from the cache, and only the missing
        parts are fetched, all in one vectored read, exactly as asked (never rounded up to blocks,
        and never cached: the sampler's ranges would evict the header's blocks)."""
        plans, missing = self._plan(ranges)
        fetched = iter(self.inner.read_many(missing))
        return [b"".join(next(fetched) if isinstance(p, list) else p for p in plan)
                for plan in plans]

    def _plan(self, ranges: list[tuple[int, int]], touch: bool = True):
        """Per range, its parts: bytes from the cache, or [start, end) to fetch; and the ranges
        to fetch, in order. `touch` counts the hits and refreshes their blocks (not for a
        prefetch, which only asks what the read will fetch)."""
        bs, blocks = self.block_size, self._blocks
        plans: list[list] = []      # per range: bytes from the cache, or [start, end) to fetch
        missing: list[tuple[int, int]] = []
        for offset, n in ranges:
            plan: list = []
            position, end = offset, offset + n
            while blocks and position < end:
                index = position // bs
                stop = min(end, (index + 1) * bs)
                block = blocks.get(index)
                if block is not None:
                    if touch:
                        blocks.move_to_end(index)
                        self.hits += 1
                    plan.append(block[position - index * bs:stop - index * bs])
                elif plan and isinstance(plan[-1], list):
                    plan[-1][1] = stop
                else:
                    plan.append([position, stop])
                position = stop
            if not blocks and n:
                plan = [[offset, end]]
            plans.append(plan)
            missing += [(p[0], p[1] - p[0]) for p in plan if isinstance(p, list)]
        return plans, missing

    def _read(self, offset: int, n: int) -> bytes:
        bs = self.block_size
        first, last = offset // bs, (offset + n - 1) // bs
        # Reads far larger than the cache bypass it: caching them would only evict useful blocks.
        if last - first + 1 > self.max_blocks // 2:
            return self._count(self.inner.read(offset, n))
        missing_run: list[int] = []
        for index in range(first, last + 1):
            if index in self._blocks:
                self._blocks.move_to_end(index)
                self.hits += 1
                self._fetch(missing_run)
                missing_run = []
            else:
                self.misses += 1
                missing_run.append(index)
        self._fetch(missing_run)
        joined = b"".join(self._blocks[i] for i in range(first, last + 1))
        start = offset - first * bs
        return self._count(joined[start:start + n])

    def _fetch(self, run: list[int]) -> None:
        """Fetch consecutive missing blocks with one inner read."""
        if not run:
            return
        bs = self.block_size
        start = run[0] * bs
        end = min(self.size, (run[-1] + 1) * bs)
        data = self.inner.read(start, end - start)
        for i, index in enumerate(run):
            self._blocks[index] = data[i * bs:(i + 1) * bs]
            self._blocks.move_to_end(index)
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)

    def close(self) -> None:
        self.inner.close()


class SliceSource(ByteSource):
    """A window [base, base + length) of another source, e.g. one member of an archive."""

    def __init__(self, inner: ByteSource, base: int, length: int, name: str | None = None):
        super().__init__()
        if base < 0 or length < 0 or base + length > inner.size:
            raise TruncatedError(
                f"a {length}-byte region at {base} does not fit in the file",
                file=inner.name, offset=base, expected=f"at most {inner.size} bytes",
                found=f"region end {base + length}")
        self.inner = inner
        self.base = base
        self.size = length
        self.name = name or inner.name

    def root(self) -> ByteSource:
        return self.inner.root()

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


# HttpSource's first request: the bytes every reader starts with (a safetensors header, a GGUF
# metadata block, a ZIP's first records), instead of a 1-byte probe followed by a second request.
HEAD_BYTES = 1 << 16


class HttpSource(ByteSource):
    """A file on a web server, read by HTTP Range requests (CPython: http.client).

    Only the header and the sampled ranges travel; a server that ignores Range (answering 200
    with the whole body) is refused rather than downloaded, and so is a reply that is not exactly
    the range asked for (http_reply.check_reply). Each request has a total deadline (`timeout`
    seconds plus one per MB asked for), redirects are followed within the same site only unless
    `follow_redirects`, and `redirected_to` says where the file really came from. In the browser
    the worker supplies its own source built on synchronous XMLHttpRequest, with the same
    interface.
    """

    waits = True

    def __init__(self, url: str, name: str | None = None, timeout: float = 10.0,
                 follow_redirects: bool = False):
        super().__init__()
        self.url = url
        self.name = name or url_name(url)
        self.timeout = timeout
        self.follow_redirects = follow_redirects
        self.redirected_to: str | None = None
        self._pool = None
        # The first request brings the header bytes (what every reader reads first), not 1 byte.
        first, total = self._range(0, HEAD_BYTES, probing=True)
        self.size = total
        self._first = first
        self._head = self._count(first[:HEAD_BYTES]) if first else b""

    def _range(self, offset: int, n: int, probing: bool = False,
               exchange=None) -> tuple[bytes, int]:
        """Range request(s) for bytes offset..offset+n-1 under one deadline, redirects followed
        as allowed, the reply checked; `exchange` is the transport (default: a fresh connection;
        a vectored read passes its pool's kept connections)."""
        deadline = Deadline(self.timeout, n)
        exchange = exchange or self._exchange
        url = self.url
        for _ in range(MAX_REDIRECTS + 1):
            status, reason, headers, body = exchange(url, offset, n, deadline)
            if status in REDIRECTS and headers.get("Location"):
                url = redirect_target(self.name, url, headers["Location"], self.follow_redirects)
                self.redirected_to = url
                continue
            data, total = check_reply(self.name, offset, n, status, reason,
                                      headers.get("Content-Range"), body, probing)
            if not probing and total is not None and total != self.size:
                raise FormatError("the file changed on the server while it was read",
                                  file=self.name, expected=f"{self.size} bytes",
                                  found=f"{total} bytes")
            return data, total
        raise FetchError(f"the server redirects {self.url} more than {MAX_REDIRECTS} times",
                         file=self.name)

    def _exchange(self, url: str, offset: int, n: int, deadline: Deadline):
        """One request on a connection of its own: (status, reason, headers, body)."""
        import http.client
        from .http_pool import exchange, failed, new_connection
        connection = None
        try:
            connection = new_connection(url, deadline)
            status, reason, headers, body, _ = exchange(connection, url, offset, n, deadline)
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise failed(self.name, url, e, deadline) from e
        finally:
            if connection is not None:
                connection.close()
        if deadline.passed():
            raise too_slow(self.name, url, deadline)
        return status, reason, headers, body

    def _read(self, offset: int, n: int) -> bytes:
        known = self._head[offset:offset + n]  # fetched (and counted) by the first request
        if len(known) == n:
            return known
        data, _ = self._range(offset + len(known), n - len(known))
        return known + self._count(data[:n - len(known)])

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Concurrent Range requests over a few keep-alive connections (http_pool), each checked,
        redirected and timed as a single read's; ranges that touch are one request, each request
        is one counted read."""
        from .http_pool import ConnectionPool, merge_touching
        out = [self._head[o:o + n] if o + n <= len(self._head) else b"" for o, n in ranges]
        wanted = [i for i, (o, n) in enumerate(ranges) if n and o + n > len(self._head)]
        requests = merge_touching([ranges[i] for i in wanted])
        if self._pool is None:
            self._pool = ConnectionPool(self.name)
        pool = self._pool
        bodies = pool.map(lambda r: self._range(r[0], r[1], exchange=pool.exchange)[0], requests)
        for (offset, length, members), body in zip(requests, bodies):
            self._count(body)
            for k in members:
                o, n = ranges[wanted[k]]
                out[wanted[k]] = body[o - offset:o - offset + n]
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()


def url_name(url: str) -> str:
    """The file name a URL shows: its last path segment, without query or fragment, unquoted."""
    from urllib.parse import unquote, urlsplit
    path = urlsplit(url).path.rstrip("/")
    return unquote(path.rsplit("/", 1)[-1]) or url


def is_url(target) -> bool:
    return isinstance(target, str) and target.startswith(("http://", "https://"))


def open_source(target, name: str | None = None, follow_redirects: bool = False) -> ByteSource:
    """A cached source for a path, URL, bytes-like object or existing source."""
    if isinstance(target, ByteSource):
        return target
    if isinstance(target, (bytes, bytearray, memoryview)):
        return MemorySource(target, name or "<memory>")
    if is_url(target):
        return CachedSource(HttpSource(target, name, follow_redirects=follow_redirects))
    return CachedSource(FileSource(target, name))
