"""Browser Files read many slices at once: the vectored reads of the page.

A dropped file is mounted with WORKERFS, where every read is a synchronous FileReaderSync call
costing ~1-1.5 ms whatever its size: a heatmap lattice of 256 rows took ~330 ms of reads alone.
When the planners know several ranges at once (`ByteSource.read_many`), the worker's JavaScript
reads every slice as one Blob of them all, back to back (`tensorloupeSlices` in web/worker.mjs:
one read operation, one buffer that `split` cuts into the ranges' bytes), and Python waits for
it in one suspension (JSPI: `pyodide.ffi.run_sync`, possible when the
worker entered Python with `callPromising`). Where the browser has no JSPI, or the worker was told
not to use it (`?jspi=0`, for the tests of this fallback), `can_run_sync()` is False and the
ranges are read one at a time as before, through the same mount.

The transport is a parameter so that this module is tested in CPython; only `js_slices` touches
JavaScript.
"""

from __future__ import annotations

from typing import Callable

from ..source import CachedSource, FileSource

# (mounted path, [(offset, length), ...]) -> the bytes of each range, or None if unavailable here
Slices = Callable[[str, list[tuple[int, int]]], "list[bytes] | None"]


class BlobSource(FileSource):
    """A mounted browser File: single reads through the mount, vectored reads through JS."""

    def __init__(self, path: str, name: str | None = None, slices: Slices | None = None):
        super().__init__(path, name)
        self._slices = slices or js_slices
        self.batches = 0     # vectored reads served all at once (what tests check)

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        wanted = [(o, n) for o, n in ranges if n]
        datas = self._slices(self.path, wanted) if len(wanted) > 1 else None
        if datas is None:
            return super()._read_many(ranges)
        if len(datas) != len(wanted) or any(len(d) != n for d, (_, n) in zip(datas, wanted)):
            return super()._read_many(ranges)   # the File changed under us: the mount says how
        self.batches += 1
        data = iter(datas)
        return [self._count(next(data)) if n else b"" for _, n in ranges]


def open_blob(path: str, name: str | None = None) -> CachedSource:
    return CachedSource(BlobSource(path, name))


def open_target(target: str | list[str], name: str | None = None):
    """What tensorloupe.open should open for `target`, as blob sources: a path that names a file
    is one source (keeping `name`); a list (the files of one checkpoint), a folder or an index,
    the list of files targets.resolve finds (opened together as one checkpoint, shards.py)."""
    from ..targets import needs_resolving, resolve
    if isinstance(target, str) and not needs_resolving(target):
        return open_blob(target, name)
    return [open_blob(f) for f in resolve(target).files]


def js_slices(path: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
    """Every slice requested at once by the worker's JavaScript, awaited in one suspension; None
    where this call stack cannot suspend (no JSPI, or entered without callPromising)."""
    try:
        from pyodide.ffi import can_run_sync, run_sync, to_js
    except ImportError:       # CPython
        return None
    if not can_run_sync():
        return None
    import js
    joined = run_sync(js.tensorloupeSlices(path, to_js([[o, n] for o, n in ranges])))
    return split(joined.to_bytes(), [n for _, n in ranges])


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
