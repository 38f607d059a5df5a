"""Range requests side by side over a few keep-alive connections (CPython's HttpSource).

A vectored read of a remote file is one request per range, each mostly a round trip: with
POOL_SIZE connections in flight a lattice of 256 rows costs ~256 / POOL_SIZE round trips instead
of 256. Ranges that touch or overlap are merged into one request; ranges with a gap are not, so
concurrency never transfers a byte the planners did not ask for (they already merged near ranges,
gather.GAP_BYTES).

Stdlib only: http.client connections, one per worker thread, reused while the server keeps them
open (a closed keep-alive connection is reopened once).
"""

from __future__ import annotations

import http.client
import threading
from urllib.parse import urljoin, urlsplit

from typing import NamedTuple

from .errors import UsageError

POOL_SIZE = 6          # what browsers allow per host, and plenty for one server
MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)


class Reply(NamedTuple):
    """What one Range request brought back, checked by the source (source.HttpSource)."""
    status: int
    reason: str
    content_range: str | None
    data: bytes


def merge_touching(ranges: list[tuple[int, int]]) -> list[tuple[int, int, list[int]]]:
    """(offset, length, indexes of the asked ranges it covers): touching or overlapping ranges
    become one request; no gap is ever filled."""
    order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
    merged: list[tuple[int, int, list[int]]] = []
    for i in order:
        offset, n = ranges[i]
        if merged and offset <= merged[-1][0] + merged[-1][1]:
            start, length, members = merged[-1]
            merged[-1] = (start, max(length, offset + n - start), members + [i])
        else:
            merged.append((offset, n, [i]))
    return merged


class ConnectionPool:
    """Keep-alive connections to one URL's server, one per worker thread."""

    def __init__(self, url: str, name: str, timeout: float, size: int = POOL_SIZE):
        self.url, self.name, self.timeout, self.size = url, name, timeout, size
        self._local = threading.local()
        self._connections: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._executor = None

    def fetch_all(self, requests: list[tuple[int, int]]) -> list["Reply"]:
        """The reply to each (offset, length), fetched concurrently, in the order asked (a
        failure to fetch raises the first failing request's error)."""
        if len(requests) < 2:
            return [self.fetch(*r) for r in requests]
        if self._executor is None:
            # Long-lived workers, so that their connections stay open between vectored reads.
            from concurrent.futures import ThreadPoolExecutor
            self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="tensorloupe-http")
        return list(self._executor.map(lambda r: self.fetch(*r), requests))

    def fetch(self, offset: int, n: int) -> "Reply":
        url = self.url
        for _ in range(MAX_REDIRECTS + 1):
            status, reason, headers, body = self._request(url, offset, n)
            if status in REDIRECTS and headers.get("Location"):
                url = urljoin(url, headers["Location"])
                continue
            return Reply(status, reason, headers.get("Content-Range"), body)
        raise UsageError(f"more than {MAX_REDIRECTS} redirects", file=self.name)

    def _request(self, url: str, offset: int, n: int):
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {"Range": f"bytes={offset}-{offset + n - 1}", "Accept-Encoding": "identity"}
        for attempt in (0, 1):
            connection = self._connection(parts)
            try:
                connection.request("GET", target, headers=headers)
                response = connection.getresponse()
                # Never read a 200 (the whole file) past what was asked for.
                body = response.read(n if response.status != 206 else None)
                if response.status != 206:
                    connection.close()
                return response.status, response.reason, response.headers, body
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest, http.client.ResponseNotReady) as e:
                connection.close()  # a keep-alive connection the server closed: reopen once
                if attempt:
                    raise UsageError(f"cannot fetch {url}: {e}", file=self.name) from e
            except (OSError, http.client.HTTPException) as e:
                connection.close()
                raise UsageError(f"cannot fetch {url}: {e}", file=self.name) from e

    def _connection(self, parts) -> http.client.HTTPConnection:
        key = (parts.scheme, parts.netloc)
        cached = getattr(self._local, "connections", None)
        if cached is None:
            cached = self._local.connections = {}
        if key not in cached:
            cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            cached[key] = cls(parts.netloc, timeout=self.timeout)
            with self._lock:
                self._connections.append(cached[key])
        return cached[key]

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
