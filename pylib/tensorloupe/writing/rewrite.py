"""A tensor whose bytes fail to read while a file is written: left out, and the files made right.

The header is written first, from the descriptors (every byte count is known before a tensor is
read). A tensor whose read fails (a shard truncated since it was opened, a server that stops
answering, bytes that do not decode) is cut from the file, which is truncated back to where the
tensor began, and the next tensor is written there. When the last file is done, each file that
lost a tensor gets the header of what it holds, with every skipped tensor and its reason in
`__metadata__["skipped"]`: the header is written to a fresh temporary file and the data section
copied after it, COPY_BYTES at a time. The header cannot be patched in place (its length moves
the data after it); the copy holds one chunk in memory and is paid only when a read failed.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Callable, Iterator, NamedTuple

from ..errors import FormatError, UnreadableError, UnsupportedError
from .plan import Entry, Shard
from .provenance import skipped_metadata

# What a failed read of one tensor raises (the file's own errors, not the user's or a cancel).
READ_FAILURES = (FormatError, UnreadableError, UnsupportedError)
COPY_BYTES = 16 << 20


class Written(NamedTuple):
    tmp: str        # the temporary file
    path: str       # its final name
    shard: Shard    # the tensors it holds
    lost: bool      # a tensor of it failed to read: its header must be rewritten
    head: int       # bytes of the length prefix and header it was written with


class Counter:
    """Bytes written of the total, for the progress callback; a skipped tensor leaves the total."""

    def __init__(self, total: int, progress: Callable[[int, int], object] | None):
        self.done, self.total, self.progress = 0, total, progress

    def add(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, self.total)

    def drop(self, partial: int, nbytes: int) -> None:
        self.done -= partial
        self.total -= nbytes


def failure(e: Entry, error: Exception) -> tuple[str, str]:
    """(name, reason) of a tensor whose bytes could not be read."""
    return e.tensor.name, f"its bytes could not be read: {error}"


def nothing_written(failed: list[tuple[str, str]]) -> UnsupportedError:
    """The error of a write whose every tensor failed to read."""
    name, why = failed[-1]
    return UnsupportedError(f"no tensor could be written: {name!r} {why}"
                            + (f" (and {len(failed) - 1:,} more)" if len(failed) > 1 else ""))


def write_entry(f: BinaryIO, e: Entry, chunks: Iterator[bytes], count: Counter, strict: bool,
                skipped: list[tuple[str, str]]) -> bool:
    """Write one entry's chunks; False (the file cut back, the reason in `skipped`) if its read
    fails, unless `strict`: then the failure is raised."""
    start = f.tell()
    partial = 0
    try:
        for data in chunks:
            f.write(data)
            partial += len(data)
            count.add(len(data))
    except READ_FAILURES as error:
        if strict:
            raise
        f.seek(start)
        f.truncate()
        count.drop(partial, e.nbytes)
        skipped.append(failure(e, error))
        return False
    return True


def refit(written: list[Written], meta: dict[str, str], skipped: list[tuple[str, str]],
          temporaries: list[tuple[str, str]], temporary: Callable[[str], str],
          file_head: Callable[[list[Entry], dict[str, str]], bytes]) -> dict[str, str]:
    """Give each file that lost a tensor the header of what it holds; returns the new
    `__metadata__`. `temporaries` (temporary, final) is kept up to date, for the rename or the
    cleanup that follows."""
    if not any(w.shard.entries for w in written):
        raise nothing_written(skipped)
    meta = {**meta, **skipped_metadata(skipped)}
    for w in written:
        if not w.lost:
            continue
        fresh = temporary(w.path)
        temporaries.append((fresh, w.path))
        with open(w.tmp, "rb") as old, open(fresh, "wb") as new:
            new.write(file_head(w.shard.entries, meta))
            old.seek(w.head)
            while data := old.read(COPY_BYTES):
                new.write(data)
        temporaries.remove((w.tmp, w.path))
        os.unlink(w.tmp)
    return meta
