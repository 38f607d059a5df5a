"""Checking one HTTP Range exchange: status, Content-Range, redirects and a total deadline.

Shared by every CPython path that reads a URL (source.HttpSource's requests, and any pool of
them), and worded like the browser's source (web.remote), so that the CLI and the page say the
same thing about the same server. What it guards against:

- a server answering another range than the one asked for (or more bytes than its Content-Range
  says): its bytes would be shown as the tensor's values, so the reply is refused;
- a redirect to another site: followed only if the user asked (`follow_redirects`, CLI
  `--follow-redirects`), and the checkpoint then says where it went;
- a server that drips a byte every few seconds: a socket timeout is per receive, so it never
  fires; a Deadline bounds the whole exchange instead (connect, headers and body);
- malformed responses (http.client's BadStatusLine, LineTooLong, too many headers): one clear
  FetchError naming the URL, never a traceback.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from contextlib import contextmanager

from ..errors import FetchError, FormatError

# At most 20 digits: int() of a longer run could be slow or refuse (4,300 digits), and no file
# size needs more.
CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d{1,20})-(\d{1,20})/(\d{1,20}|\*)\s*$")
REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 5
STATUS_EMPTY = 416          # Range Not Satisfiable: for the first request, an empty file
# A request may take its source's timeout plus one second per MIN_RATE bytes asked for, from
# connecting to the last byte; connecting alone at most CONNECT_SECONDS.
MIN_RATE = 1 << 20
CONNECT_SECONDS = 5.0


class Deadline:
    """The time one exchange may take, whatever the server does within it."""

    def __init__(self, seconds: float, n: int = 0):
        self.seconds = seconds + n / MIN_RATE
        self.end = time.monotonic() + self.seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def passed(self) -> bool:
        return self.left() <= 0

    @contextmanager
    def watch(self, connection):
        """Shut the connection's socket down when the deadline passes: a blocked receive then
        returns, and the exchange fails instead of waiting for the next byte forever."""
        def expire():
            sock = getattr(connection, "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        timer = threading.Timer(max(0.0, self.left()), expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()


def too_slow(name: str, url: str, deadline: Deadline) -> FetchError:
    return FetchError(f"the server did not answer {url} within {deadline.seconds:.0f} s",
                      file=name)


def redirect_target(name: str, url: str, location: str, follow_any: bool) -> str:
    """Where a redirect leads, if it may be followed: same origin (scheme, host and port) always,
    another web site only when the user asked, another scheme never."""
    # Imported here: urllib.parse (with ipaddress) is a slow import in Pyodide, and every source
    # imports this module, most of them never redirected.
    from urllib.parse import urljoin, urlsplit
    target = urljoin(url, location)
    here, there = urlsplit(url), urlsplit(target)
    if there.scheme not in ("http", "https"):
        raise FetchError(f"the server redirects to {target!r}, which is not an http(s) URL",
                         file=name)
    if (here.scheme, here.netloc) != (there.scheme, there.netloc) and not follow_any:
        raise FetchError(f"the server redirects to another site ({target}); not followed unless "
                         "asked (--follow-redirects, or follow_redirects=True)", file=name)
    return target


def check_reply(name: str, offset: int, n: int, status: int, reason: str,
                content_range: str | None, data: bytes, probing: bool = False,
                url: str | None = None) -> tuple[bytes, int | None]:
    """The body of a reply to `Range: bytes=offset-(offset+n-1)` of `url` and the file size it
    states, refused unless it is exactly the range asked for (on the first request, `probing`,
    the file may be shorter than n bytes, and 416 means an empty file)."""
    if probing and status == STATUS_EMPTY:
        return b"", 0
    if status != 206:
        if 200 <= status < 300:
            raise range_refused(name, status)
        raise http_failed(name, status, reason)
    m = CONTENT_RANGE.match(content_range or "")
    total = None if m is None or m[3] == "*" else int(m[3])
    if m is not None:
        first, last = int(m[1]), int(m[2])
        want_last = offset + n - 1 if total is None else min(offset + n, total) - 1
        exact = first == offset and last == want_last and len(data) == last - first + 1
        if probing and total is None:
            raise FetchError("the server answers Range requests but does not say the file's size",
                             file=name, expected="Content-Range: bytes 0-N/size",
                             found=content_range)
    if m is None or not exact or (not probing and len(data) != n):
        raise wrong_range(name, url, offset, n, f"Content-Range {content_range!r} with "
                          f"{len(data):,} bytes")
    return data, total


def wrong_range(name: str, url: str | None, offset: int, n: int, found: str) -> FormatError:
    """A reply that is not the range asked for: its bytes would be shown as the file's."""
    where = f" by {url}" if url else ""
    return FormatError(f"the server sent another range than the one asked for{where}", file=name,
                       offset=offset, expected=f"bytes {offset:,}-{offset + n - 1:,}", found=found)


def range_refused(name: str, status: int) -> FetchError:
    """A server that answered a Range request with anything but 206 (usually 200, the whole file)."""
    return FetchError("the server does not answer HTTP Range requests, so the file cannot be read "
                      "in pieces", file=name, expected="206 Partial Content", found=status)


def http_failed(name: str, status: int, reason: str = "") -> FetchError:
    """An HTTP error status (404, 403, ...); `reason` defaults to the standard phrase (HTTP/2
    responses carry none)."""
    import http
    if not reason:
        try:
            reason = http.HTTPStatus(status).phrase
        except ValueError:
            reason = ""
    error = FetchError(f"the server answered {status} {reason}".rstrip(), file=name)
    error.status = status     # a caller may tell "not there" (404) from a failure
    return error
