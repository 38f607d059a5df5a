"""HTTP Range exchanges for CPython's HttpSource: one request on a connection, and a pool of
keep-alive connections that makes a vectored read's requests side by side.

A vectored read of a remote file is one request per range, each mostly a round trip: with
POOL_SIZE connections in flight a lattice of 256 rows costs ~256 / POOL_SIZE round trips instead
of 256. Ranges that touch or overlap are merged into one request; ranges with a gap are not, so
concurrency never transfers a byte the planners did not ask for (they already merged near ranges,
gather.GAP_BYTES).

Only the transport lives here. Every exchange, pooled or not, is made under its request's
http_reply.Deadline, and HttpSource._range follows redirects (http_reply.redirect_target) and
checks each reply (http_reply.check_reply) the same way whichever transport brought it.
"""

from __future__ import annotations

import http.client
import threading
from urllib.parse import urlsplit

from ..errors import FetchError
from .http_reply import CONNECT_SECONDS, Deadline, too_slow

POOL_SIZE = 6          # what browsers allow per host, and plenty for one server
# What a kept-alive connection the server has closed in the meantime raises on its next request:
# worth one retry on a fresh connection (any other failure is the server's answer).
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
         http.client.CannotSendRequest, http.client.ResponseNotReady)


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


def scatter(ranges, wanted: list[int], requests, bodies, out: list, count) -> list:
    """out[i] for each asked range `wanted[k]` cut from its merged request's body (merge_touching
    of those ranges), each body passed to `count` once (one request, one counted read)."""
    for (offset, _, members), body in zip(requests, bodies):
        count(body)
        for k in members:
            o, n = ranges[wanted[k]]
            out[wanted[k]] = body[o - offset:o - offset + n]
    return out


def new_connection(url: str, deadline: Deadline) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.netloc, timeout=receive_timeout(deadline))


def receive_timeout(deadline: Deadline) -> float:
    return max(0.01, min(CONNECT_SECONDS, deadline.left()))


def exchange(connection: http.client.HTTPConnection, url: str, offset: int, n: int,
             deadline: Deadline):
    """One Range request on `connection` and its reply: (status, reason, headers, at most n + 1
    body bytes, whether the connection may carry another request). The deadline shuts the
    socket down if the server takes longer, however it drips."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    with deadline.watch(connection):
        if connection.sock is None:
            connection.connect()
        else:
            connection.sock.settimeout(receive_timeout(deadline))
        connection.request("GET", target, headers={
            "Range": f"bytes={offset}-{offset + n - 1}", "Accept-Encoding": "identity"})
        response = connection.getresponse()
        # Never read a 200 (the whole file), and never more than one byte past the range.
        body = response.read(n + 1) if response.status == 206 else b""
    # Reusable only if the reply ended where it said and the server keeps the connection.
    reusable = response.isclosed() and not response.will_close and not deadline.passed()
    return response.status, response.reason, response.headers, body, reusable


def failed(name: str, url: str, e: BaseException, deadline: Deadline) -> FetchError:
    """The one-line error for an exchange that raised (socket, http.client, bad URL)."""
    if deadline.passed():
        return too_slow(name, url, deadline)
    return FetchError(f"cannot fetch {url}: {getattr(e, 'strerror', None) or e!r}", file=name)


class ConnectionPool:
    """Keep-alive connections to a file's server(s), kept between vectored reads; each read's
    requests run on threads of its own that end with it (nothing outlives the call)."""

    def __init__(self, name: str, size: int = POOL_SIZE):
        self.name, self.size = name, size
        self._idle: dict[tuple, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()

    def map(self, fn, items: list) -> list:
        """fn(item) for each item, side by side, in the order asked; a failure raises the first
        failing item's error (in that order), as the one-at-a-time loop would."""
        if len(items) < 2:
            return [fn(item) for item in items]
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(self.size, len(items)), thread_name_prefix="tensorloupe-http") as pool:
            futures = [pool.submit(fn, item) for item in items]
        return [f.result() for f in futures]

    def exchange(self, url: str, offset: int, n: int, deadline: Deadline):
        """http_pool.exchange on a kept connection to url's server: (status, reason, headers,
        body). A kept connection the server has closed is replaced once."""
        key = urlsplit(url)[:2]
        while True:  # at most twice: the second connection is a fresh one
            connection, fresh = self._take(key, url, deadline)
            try:
                status, reason, headers, body, reusable = exchange(connection, url, offset, n,
                                                                   deadline)
            except (OSError, http.client.HTTPException, ValueError) as e:
                connection.close()
                if isinstance(e, STALE) and not fresh and not deadline.passed():
                    continue
                raise failed(self.name, url, e, deadline) from e
            if reusable:
                with self._lock:
                    self._idle.setdefault(key, []).append(connection)
            else:
                connection.close()
            if deadline.passed():
                raise too_slow(self.name, url, deadline)
            return status, reason, headers, body

    def _take(self, key, url: str, deadline: Deadline):
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                return idle.pop(), False
        return new_connection(url, deadline), True

    def close(self) -> None:
        with self._lock:
            for connections in self._idle.values():
                for connection in connections:
                    connection.close()
            self._idle.clear()
