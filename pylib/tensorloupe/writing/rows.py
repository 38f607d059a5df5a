"""A tensor made of some rows (slabs along axis 0) of another, in any order, as a descriptor.

Pruning experts keeps some slabs of a stacked `[experts, ...]` tensor and some rows of a router
`[experts, hidden]`; mapping GGUF names back to Hugging Face ones takes one expert's slab of a
`*_exps` tensor, or every row of a Q/K weight in the order the converter's permutation undoes.
All of these are "rows r_0, r_1, ... of tensor T": a `RowsSource` presents their bytes as one
contiguous range (consecutive rows read as one range of the tensor's own source), so the writer,
the sampler and the ggml decoders read the result like any stored tensor. A row of ggml blocks
is whole blocks (a ggml row always is: its length is a multiple of the block size).
"""

from __future__ import annotations

import bisect

from ..errors import UnsupportedError
from ..model import Tensor
from ..sampler.gather import dtype_of
from ..source import ByteSource


def runs(rows: list[int]) -> list[tuple[int, int]]:
    """Consecutive row numbers as [start, end) runs, in the order given."""
    out: list[list[int]] = []
    for r in rows:
        if out and out[-1][1] == r:
            out[-1][1] += 1
        else:
            out.append([r, r + 1])
    return [(a, b) for a, b in out]


class RowsSource(ByteSource):
    """The bytes of `pieces` ((offset, length) ranges of `inner`), one after another."""

    def __init__(self, inner: ByteSource, pieces: list[tuple[int, int]]):
        super().__init__()
        self.inner, self.pieces = inner, pieces
        self.name = inner.name
        self.starts = []
        at = 0
        for _, n in pieces:
            self.starts.append(at)
            at += n
        self.size = at

    @property
    def waits(self) -> bool:
        return self.inner.waits

    def root(self) -> ByteSource:
        return self.inner.root()

    def file_offset(self, offset: int) -> int:
        return self.inner.file_offset(self._inner_ranges(offset, 1)[0][0])

    def known_file_offset(self, offset: int) -> int | None:
        return self.inner.known_file_offset(self._inner_ranges(offset, 1)[0][0])

    def _inner_ranges(self, offset: int, n: int) -> list[tuple[int, int]]:
        out = []
        k = max(0, bisect.bisect_right(self.starts, offset) - 1)
        while n > 0 and k < len(self.pieces):
            base, length = self.pieces[k]
            skip = offset - self.starts[k]
            take = min(n, length - skip)
            out.append((base + skip, take))
            offset += take
            n -= take
            k += 1
        return out

    def _read(self, offset: int, n: int) -> bytes:
        return self._count(b"".join(self.inner.read_many(self._inner_ranges(offset, n))))

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        mapped = [self._inner_ranges(o, n) for o, n in ranges]
        flat = self.inner.read_many([r for m in mapped for r in m])
        out, at = [], 0
        for m in mapped:
            out.append(b"".join(flat[at:at + len(m)]))
            at += len(m)
        return self._count_each(out)


def row_bytes(t: Tensor) -> int:
    """Bytes of one axis-0 row of `t`; refused where rows are not whole ranges of its bytes."""
    info = dtype_of(t)
    if not t.shape or t.shape[0] == 0:
        raise UnsupportedError(f"tensor {t.name!r} of shape {list(t.shape)} has no rows to select")
    per_row = t.numel // t.shape[0]
    if not t.contiguous or per_row % info.block_elems:
        raise UnsupportedError(f"the rows of tensor {t.name!r} ({t.dtype}{list(t.shape)}"
                               f"{', a strided view' if not t.contiguous else ''}) are not whole "
                               "ranges of its bytes: they cannot be selected")
    return info.nbytes(per_row)


def rows_tensor(t: Tensor, name: str, rows: list[int], shape: tuple[int, ...] | None = None) -> Tensor:
    """Rows `rows` of `t` (any order, repeats allowed) as a tensor called `name`; `shape`, if
    given, replaces the default (len(rows), *t.shape[1:]) with one of as many elements."""
    size = row_bytes(t)
    bad = [r for r in rows if not 0 <= r < t.shape[0]]
    if bad:
        raise UnsupportedError(f"tensor {t.name!r} has {t.shape[0]:,} rows: there is no row {bad[0]:,}")
    pieces = [(t.offset + a * size, (b - a) * size) for a, b in runs(rows)]
    out_shape = (len(rows), *t.shape[1:]) if shape is None else shape
    return Tensor(name, t.dtype, out_shape, 0, len(rows) * size, source=RowsSource(t.source, pieces),
                  big_endian=t.big_endian, info={"rows of": t.name})
