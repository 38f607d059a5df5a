"""HttpSource: a file on a web server, read by HTTP Range requests (CPython's http.client)."""

from __future__ import annotations

from ..errors import FetchError, FormatError
from .base import ByteSource
# The HTTP checks and the wording of HTTP failures (range_refused, http_failed) are shared with
# the browser's source (web.remote), so the CLI and the page say the same thing.
from .http_reply import MAX_REDIRECTS, REDIRECTS, Deadline, check_reply, redirect_target, too_slow


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

    def _beside(self, name: str) -> ByteSource:
        """The URL with its last segment replaced by `name`: only a URL the user gave's folder."""
        return HttpSource(sibling_url(self.url, name), timeout=self.timeout,
                          follow_redirects=self.follow_redirects)

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
                                      headers.get("Content-Range"), body, probing, url=url)
            if not probing and total is not None and total != self.size:
                raise FormatError("the file changed on the server while it was read",
                                  file=self.name, expected=f"{self.size:,} bytes",
                                  found=f"{total:,} bytes")
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
        from .http_pool import ConnectionPool, merge_touching, scatter
        out = [self._head[o:o + n] if o + n <= len(self._head) else b"" for o, n in ranges]
        wanted = [i for i, (o, n) in enumerate(ranges) if n and o + n > len(self._head)]
        requests = merge_touching([ranges[i] for i in wanted])
        if self._pool is None:
            self._pool = ConnectionPool(self.name)
        pool = self._pool
        bodies = pool.map(lambda r: self._range(r[0], r[1], exchange=pool.exchange)[0], requests)
        return scatter(ranges, wanted, requests, bodies, out, self._count)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()


def sibling_url(url: str, name: str) -> str:
    """The URL of file `name` in the same directory as `url` (its query and fragment dropped)."""
    from urllib.parse import quote, urlsplit, urlunsplit   # urllib.parse: slow to import in Pyodide
    parts = urlsplit(url)
    folder = parts.path.rsplit("/", 1)[0]
    return urlunsplit((parts.scheme, parts.netloc, f"{folder}/{quote(name, safe='/')}", "", ""))


def url_name(url: str) -> str:
    """The file name a URL shows: its last path segment, without query or fragment, unquoted."""
    from urllib.parse import unquote, urlsplit
    path = urlsplit(url).path.rstrip("/")
    return unquote(path.rsplit("/", 1)[-1]) or url
