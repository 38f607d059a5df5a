"""Files on a web server, read by the worker with synchronous XMLHttpRequest Range requests.

The browser's counterpart of source.HttpSource (urllib, CPython), with the same refusals in the
same words: a server that answers a Range request with 200 (the whole file) is refused, an HTTP
error names its status, and a request the browser could not make at all (server unreachable, or
no CORS permission for this page to read it) says so.

Why the first request is not made here: a synchronous XHR cannot be aborted, so one sent to a
server that ignores Range would download the whole file (tens of GB) before we could refuse it.
The worker (web/worker.mjs) therefore makes one asynchronous `fetch` per URL for its first 64 KiB
(the header every reader starts with; all of a .json file, up to 16 MiB), aborts it as soon as
the status is not 206, and hands us what it saw: the *probe* {"status", "reason", "total",
"head"} or {"error"}, with the request or, with JSPI, when we await it (worker_probe). Every
later read is a synchronous XHR (the library's reads are synchronous) or, with JSPI, concurrent
fetches (fetch_ranges), so all reads go through source.CachedSource: each costs ~5-13 ms however
small.

The transport is a parameter so that this module is tested in CPython; only `xhr_range` touches
JavaScript.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from ..errors import FormatError, LimitError, UsageError
from ..source import ByteSource
from ..source.cache import CachedSource
from ..source.http_reply import CONTENT_RANGE, check_reply, http_failed, range_refused, wrong_range
from ..source.remote import sibling_url, url_name
from .files import MAX_CONFIG_BYTES, parse_config

# The probe brings the first 64 KiB (web/worker.mjs), and block 0 is exactly those bytes: a
# header that fits in them costs no further request (256 KiB blocks made every shard of a set
# fetch 192 KiB more). Longer headers are read in runs of missing blocks, one request per run.
BLOCK_SIZE = 1 << 16
CACHE_BYTES = 32 << 20
STATUS_EMPTY = 416      # Range Not Satisfiable: for bytes=0-0, an empty file


class Reply(NamedTuple):
    """What one range request brought back (content_range is None when CORS hides it)."""
    status: int
    reason: str
    content_range: str | None
    data: bytes


class NetworkFailure(Exception):
    """The browser made no HTTP exchange: unreachable server, or CORS refused this page."""


Transport = Callable[[str, int, int], Reply]
# (url, [(first, last), ...]) -> a Reply (or the NetworkFailure) per range, or None if unavailable
Many = Callable[[str, list[tuple[int, int]]], "list | None"]


def unreachable(url: str, detail: str = "") -> UsageError:
    why = f" ({detail})" if detail else ""
    return UsageError(f"cannot fetch {url}: the request failed{why}. The server is unreachable, "
                      "or it does not allow this page to read it (CORS: it must send "
                      "Access-Control-Allow-Origin)", file=url_name(url))


class XhrSource(ByteSource):
    """A URL read by Range requests, given the worker's probe of it (see the module docstring)."""

    def __init__(self, url: str, probe: dict, name: str | None = None,
                 transport: Transport | None = None, many: Many | None = None):
        super().__init__()
        self.url = url
        self.name = name or url_name(url)
        self._transport = transport or xhr_range
        self._many = many or fetch_ranges
        self._head = b""
        self.batches = 0     # vectored reads served all at once (what tests check)
        if probe.get("error") is not None:
            raise unreachable(url, str(probe["error"]))
        status = int(probe.get("status", 0))
        if status == STATUS_EMPTY:
            self.size = 0
        elif status == 206:
            total = probe.get("total")
            if not isinstance(total, int) or total < 0:
                raise UsageError("the server answers Range requests but does not let this page "
                                 "read the file's size (CORS: Content-Range must be listed in "
                                 "Access-Control-Expose-Headers)", file=self.name)
            self.size = total
        elif 200 <= status < 300:
            raise range_refused(self.name, status)
        else:
            raise http_failed(self.name, status, str(probe.get("reason") or ""))
        head = probe.get("head")
        if head is True:      # the worker kept the probe's bytes (web/worker.mjs)
            head = js_head(url)
        if isinstance(head, (bytes, bytearray)) and head and status == 206:
            # The probe's bytes (the header every reader reads first), counted as one read, and
            # only if they are the bytes from 0 its Content-Range says (unless CORS hides it).
            claimed = probe.get("contentRange")   # JavaScript null is not None in Pyodide
            head = self._checked(Reply(status, "", claimed if isinstance(claimed, str) else None,
                                       bytes(head)), 0, len(head))
            self._head = bytes(head[:self.size])

    def _beside(self, name: str) -> ByteSource:
        """A file at the same URL's folder, if the worker probed it (only URLs the user gave
        are requested: a model's external data URL must be given with it)."""
        url = sibling_url(self.url, name)
        return open_url(url, probe_of(None, url), self._transport, self._many)

    def _read(self, offset: int, n: int) -> bytes:
        known = self._head[offset:offset + n]
        if len(known) == n:
            return known
        try:
            reply = self._transport(self.url, offset + len(known), offset + n - 1)
        except NetworkFailure as e:
            raise unreachable(self.url, str(e)) from e
        return known + self._checked(reply, offset + len(known), n - len(known))

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Every range not in the probe's bytes fetched at once (the browser's concurrent
        fetches, awaited in one suspension), or one at a time where JSPI is not available."""
        out = [self._head[o:o + n] for o, n in ranges]
        wanted = [i for i, (o, n) in enumerate(ranges) if len(out[i]) != n]
        asked = [(ranges[i][0], ranges[i][0] + ranges[i][1] - 1) for i in wanted]
        replies = self._many(self.url, asked) if len(asked) > 1 else None
        if replies is None:
            return super()._read_many(ranges)
        self.batches += 1
        for i, (first, _), reply in zip(wanted, asked, replies):
            if isinstance(reply, NetworkFailure):
                raise unreachable(self.url, str(reply))
            out[i] = self._checked(reply, first, ranges[i][1])
        return out

    def _checked(self, reply: Reply, offset: int, n: int) -> bytes:
        """The reply's bytes, counted, if they are exactly the range asked for: the same
        check as the CLI's (http_reply.check_reply). Where CORS hides Content-Range only the
        length can be checked, and it must be exactly the length asked for."""
        if reply.status != 206:
            if 200 <= reply.status < 300:
                raise range_refused(self.name, reply.status)
            raise http_failed(self.name, reply.status, reply.reason)
        if reply.content_range is None:
            if len(reply.data) != n:
                raise wrong_range(self.name, self.url, offset, n,
                                  f"{len(reply.data):,} bytes (Content-Range hidden by CORS)")
            return self._count(reply.data)
        data, total = check_reply(self.name, offset, n, reply.status, reply.reason,
                                  reply.content_range, reply.data, url=self.url)
        if total is not None and total != self.size:
            raise FormatError("the file changed on the server while it was read",
                              file=self.name, expected=f"{self.size:,} bytes", found=f"{total:,} bytes")
        return self._count(data)


def open_url(url: str, probe: dict, transport: Transport | None = None,
             many: Many | None = None) -> ByteSource:
    return CachedSource(XhrSource(url, probe, transport=transport, many=many), BLOCK_SIZE, CACHE_BYTES)


def read_config(url: str, probe: dict, transport: Transport | None = None) -> dict:
    """A config.json given by URL, whole (it is small), as a dict."""
    source = XhrSource(url, probe, transport=transport)
    if source.size > MAX_CONFIG_BYTES:
        raise LimitError("config.json is too large", file=source.name,
                         expected=f"at most {MAX_CONFIG_BYTES:,} bytes", found=source.size)
    return parse_config(source.read(0, source.size), source.name)


def xhr_range(url: str, first: int, last: int) -> Reply:
    """One synchronous Range request (only possible in a worker; responseType arraybuffer)."""
    from js import XMLHttpRequest  # the browser only: this module is imported in CPython too
    xhr = XMLHttpRequest.new()
    xhr.open("GET", url, False)
    xhr.responseType = "arraybuffer"
    xhr.setRequestHeader("Range", f"bytes={first}-{last}")
    try:
        xhr.send()
    except Exception as e:  # pyodide.ffi.JsException: a NetworkError DOMException
        raise NetworkFailure(str(e).split(":", 1)[0]) from e
    if xhr.status == 0:
        raise NetworkFailure("no response")
    # JavaScript null arrives as pyodide's JsNull, not None: test the types we expect.
    content_range = xhr.getResponseHeader("Content-Range")
    body = xhr.response
    return Reply(int(xhr.status), str(xhr.statusText or ""),
                 content_range if isinstance(content_range, str) else None,
                 body.to_bytes() if hasattr(body, "to_bytes") else b"")


def fetch_ranges(url: str, ranges: list[tuple[int, int]]) -> list | None:
    """Every Range request at once (`tensorloupeRanges` in web/worker.mjs: concurrent fetches,
    within the browser's per-host limit), awaited in one suspension; None where this call stack
    cannot suspend (no JSPI)."""
    try:
        from pyodide.ffi import can_run_sync, run_sync, to_js
    except ImportError:       # CPython
        return None
    if not can_run_sync():
        return None
    import js
    answers = run_sync(js.tensorloupeRanges(url, to_js([[a, b] for a, b in ranges])))
    out = []
    for answer in answers:
        error = getattr(answer, "error", None)
        if error:
            out.append(NetworkFailure(str(error)))
            continue
        content_range = answer.contentRange
        out.append(Reply(int(answer.status), str(answer.reason or ""),
                         content_range if isinstance(content_range, str) else None,
                         answer.data.to_bytes() if answer.data else b""))
    return out


def probe_of(probes: dict | None, url: str) -> dict:
    """`url`'s probe: handed over with the request (`probes`), else awaited (worker_probe)."""
    return ((probes or {}).get(url) or worker_probe(url)
            or {"error": "the worker did not probe this URL"})


def worker_probe(url: str) -> dict | None:
    """The worker's probe of `url` (`tensorloupeProbe` in web/worker.mjs: started with every other
    URL's when the page asked), awaited in one suspension if it is still on its way; None where
    this call stack cannot suspend (no JSPI: the worker then awaits every probe first)."""
    try:
        from pyodide.ffi import can_run_sync, run_sync
    except ImportError:       # CPython
        return None
    if not can_run_sync():
        return None
    import js
    answer = run_sync(js.tensorloupeProbe(url))
    return answer.to_py() if answer else None


def js_head(url: str) -> bytes:
    """The bytes the worker's probe of `url` brought (its first 64 KiB), handed over once."""
    import js
    buffer = js.tensorloupeHead(url)
    return buffer.to_bytes() if buffer else b""
