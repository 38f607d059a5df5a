"""Pieces of other sources read as one run of bytes: a tensor whose elements a checkpoint keeps in
several places (DeepSpeed ZeRO splits each flat parameter buffer over one file per rank, so one
parameter's elements are the end of rank 0's partition and the start of rank 1's).

A piece is (source, offset, length); byte 0 of the joined source is byte `offset` of the first
piece. Reads are split at piece boundaries and passed through as data reads (each inner source
counts its own), so the bytes read are exactly the bytes asked for.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

from ..errors import TruncatedError
from .base import ByteSource


class Piece(NamedTuple):
    source: ByteSource
    offset: int
    length: int


class JoinedSource(ByteSource):
    def __init__(self, pieces: list[Piece], name: str | None = None):
        super().__init__()
        self.pieces = [p for p in pieces if p.length]
        for p in self.pieces:
            if p.offset < 0 or p.length < 0 or p.offset + p.length > p.source.size:
                raise TruncatedError(f"a {p.length:,}-byte piece at {p.offset:,} does not fit in "
                                     "the file", file=p.source.name, offset=p.offset,
                                     expected=f"at most {p.source.size:,} bytes")
        self.starts = []
        total = 0
        for p in self.pieces:
            self.starts.append(total)
            total += p.length
        self.size = total
        self.name = name or (self.pieces[0].source.name if self.pieces else "<joined>")

    def _split(self, offset: int, n: int) -> list[tuple[int, int, int]]:
        """(piece index, offset in its source, bytes) covering [offset, offset + n)."""
        out = []
        i = bisect.bisect_right(self.starts, offset) - 1
        while n > 0 and i < len(self.pieces):
            p, start = self.pieces[i], self.starts[i]
            take = min(n, start + p.length - offset)
            out.append((i, p.offset + offset - start, take))
            offset += take
            n -= take
            i += 1
        return out

    def root(self) -> ByteSource:
        return self.pieces[0].source.root() if self.pieces else self

    def file_offset(self, offset: int) -> int:
        i, inner, _ = self._split(offset, 1)[0]
        return self.pieces[i].source.file_offset(inner)

    def known_file_offset(self, offset: int) -> int | None:
        if not self.pieces or offset >= self.size:
            return None
        i, inner, _ = self._split(offset, 1)[0]
        return self.pieces[i].source.known_file_offset(inner)

    def _read(self, offset: int, n: int) -> bytes:
        return self._count(b"".join(self.pieces[i].source.read(o, k)
                                    for i, o, k in self._split(offset, n)))

    def read_data(self, offset: int, n: int) -> bytes:
        if offset + n > self.size or offset < 0 or n < 0:
            return self.read(offset, n)   # raises the single read's error
        return self._count(b"".join(self.pieces[i].source.read_data(o, k)
                                    for i, o, k in self._split(offset, n)))

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        # every piece of every range, asked of each inner source in one read_many
        splits = [self._split(o, n) for o, n in ranges]
        asked: dict[int, list[tuple[int, int]]] = {}
        for split in splits:
            for i, o, k in split:
                asked.setdefault(id(self.pieces[i].source), []).append((o, k))
        sources = {id(p.source): p.source for p in self.pieces}
        got = {key: iter(sources[key].read_many(wanted)) for key, wanted in asked.items()}
        return self._count_each([b"".join(next(got[id(self.pieces[i].source)]) for i, _, _ in split)
                                 for split in splits])
