"""Browser Files read many slices at once: the vectored reads of the page.

A dropped file is mounted with WORKERFS, where every read is a synchronous FileReaderSync call
costing ~1-1.5 ms whatever its size: a heatmap lattice of 256 rows took ~330 ms of reads alone.
When the planners know several ranges at once (`ByteSource.read_many`), the worker's JavaScript
reads every slice in reader threads (`tensorloupeSlices` in web/worker.mjs, web/slicer.js: a
buffer back from each, joined, that `split` cuts into the ranges' bytes), and Python waits for
them in one suspension (JSPI: `pyodide.ffi.run_sync`, possible when the worker entered Python
with `callPromising`). A planner that knows its next reads early says so (`prefetch`): they are
started at once and awaited when they are read, so they arrive while Python computes. Where the
browser has no JSPI, or the worker was told not to use it (`?jspi=0`, for the tests of this
fallback), `can_run_sync()` is False and the ranges are read one at a time as before, through
the same mount.

The transport is a parameter so that this module is tested in CPython; only `js_slices` touches
JavaScript.
"""

from __future__ import annotations

from typing import Callable

from ..source.cache import CachedSource
from ..source.base import FileSource

# (mounted path, [(offset, length), ...]) -> the bytes of each range, or None if unavailable here
Slices = Callable[[str, list[tuple[int, int]]], "list[bytes] | None"]
# The same, started now: a function that waits for them (or None if they cannot be started here)
StartSlices = Callable[[str, list[tuple[int, int]]], "Callable[[], list[bytes] | None] | None"]


class BlobSource(FileSource):
    """A mounted browser File: single reads through the mount, vectored reads through JS."""

    def __init__(self, path: str, name: str | None = None, slices: Slices | None = None,
                 start_slices: StartSlices | None = None):
        super().__init__(path, name)
        self._slices = slices or js_slices
        self._start_slices = start_slices or js_start_slices
        self._prefetched: list[tuple[list, Callable[[], "list[bytes] | None"]]] = []   # in order
        self.batches = 0     # vectored reads served all at once (what tests check)
        self.prefetches = 0  # ... of which were started early by a prefetch (what tests check)

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Start reading these ranges now (see ByteSource.prefetch), after any started before;
        they are counted now, when the File is read, whether or not they are taken."""
        wanted = [(o, n) for o, n in ranges if n]
        slices = Coalesced(wanted)
        wait = self._start_slices(self.path, slices.ranges) if len(wanted) > 1 else None
        if wait is not None:
            self._prefetched.append((wanted, lambda: slices.split(wait())))
            self.reads += len(wanted)
            self.bytes_read += sum(n for _, n in wanted)

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        wanted = [(o, n) for o, n in ranges if n]
        taken = bool(self._prefetched) and self._prefetched[0][0] == wanted
        if taken:
            datas = self._prefetched.pop(0)[1]()
        else:
            self._prefetched.clear()   # not what was announced: the plan changed, drop them all
            slices = Coalesced(wanted)
            datas = slices.split(self._slices(self.path, slices.ranges)) if len(wanted) > 1 else None
        if datas is None:
            # No JSPI here, or the File changed under us: the mount's single reads say how.
            return super()._read_many(ranges)
        self.batches += 1
        self.prefetches += taken
        count = (lambda data: data) if taken else self._count    # a prefetch counted its reads
        data = iter(datas)
        return [count(next(data)) if n else b"" for _, n in ranges]


class Coalesced:
    """Ranges that touch, one slice: in Chromium a slice costs ~0.3 ms of CPU whatever its size
    (web/slicer.js), and the expert analysis' windows of stacked experts meet end to start (an
    expert's last window ends its matrix, the next expert's first begins there): a quarter
    fewer slices. Only ranges that meet exactly are joined, so no byte more is read; `split`
    gives each asked range (none empty) its bytes, in the order asked."""

    def __init__(self, ranges: list[tuple[int, int]]):
        self.asked = ranges
        self.order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
        joined: list[list[int]] = []
        for i in self.order:
            offset, n = ranges[i]
            if joined and joined[-1][0] + joined[-1][1] == offset:
                joined[-1][1] += n
            else:
                joined.append([offset, n])
        self.ranges = [(offset, n) for offset, n in joined]

    def split(self, datas: "list[bytes] | None") -> "list[bytes] | None":
        """The asked ranges' bytes from the joined slices' (None if any is not as long as its
        slice: the File changed under us)."""
        if datas is None or len(datas) != len(self.ranges) or any(
                len(d) != n for d, (_, n) in zip(datas, self.ranges)):
            return None
        out: list = [b""] * len(self.asked)
        order = iter(self.order)
        for data in datas:            # each slice holds its asked ranges back to back
            view, at = memoryview(data), 0
            while at < len(data):
                i = next(order)
                n = self.asked[i][1]
                out[i] = data if n == len(data) else bytes(view[at:at + n])
                at += n
        return out


def open_blob(path: str, name: str | None = None) -> CachedSource:
    return CachedSource(BlobSource(path, name))


def open_target(target: str | list[str], name: str | None = None):
    """What tensorloupe.open should open for `target`, as blob sources: a path that names a file
    is one source (keeping `name`); a list (the files of one checkpoint), a folder or an index,
    the list of files targets.resolve finds (opened together as one checkpoint, opening/shards.py)."""
    from ..opening.targets import needs_resolving, resolve
    if isinstance(target, str) and not needs_resolving(target):
        return open_blob(target, name)
    return [open_blob(f) for f in resolve(target).files]


def js_slices(path: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
    """Every slice requested at once by the worker's JavaScript, awaited in one suspension; None
    where this call stack cannot suspend (no JSPI, or entered without callPromising)."""
    wait = js_start_slices(path, ranges)
    return None if wait is None else wait()


def js_start_slices(path: str, ranges: list[tuple[int, int]]):
    """The slices requested now; returns the function that awaits them (None where this call
    stack cannot suspend, so could not wait for them later either)."""
    try:
        from pyodide.ffi import can_run_sync, run_sync, to_js
    except ImportError:       # CPython
        return None
    if not can_run_sync():
        return None
    import js
    reading = js.tensorloupeSlices(path, to_js([[o, n] for o, n in ranges]))

    def wait() -> list[bytes] | None:
        if not can_run_sync():       # a prefetch taken where it cannot be awaited: read again
            return None
        shares = run_sync(reading)      # one buffer per reader thread, in order
        return split(b"".join(share.to_bytes() for share in shares), [n for _, n in ranges])
    return wait


def split(joined: bytes, lengths: list[int]) -> list[bytes] | None:
    """The ranges' bytes from their concatenation; None if it is not as long as they are
    together (the File changed under us: the mount's single reads say how)."""
    if len(joined) != sum(lengths):
        return None
    view = memoryview(joined)
    out, start = [], 0
    for n in lengths:
        out.append(bytes(view[start:start + n]))
        start += n
    return out
