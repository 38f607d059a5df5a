"""Sample windows in storage order, for layouts that scatter a logical row over the stored rows.

A sample is 32 windows of contiguous elements spread over the tensor (sampler/sampling.py). For a
float tensor a window is one run of bytes. GPTQ packs the inputs of an output down a column of
`qweight` (8 inputs a word at 4 bits), AWQ and gpt-oss MXFP4 store the logical matrix transposed:
a window along a logical row there touches a word or a byte in hundreds of stored rows (GPTQ,
AWQ and MXFP4 samples read 7x, 7x and 17x the bytes of an F16 sample of the same shape, in up to
260,000 ranges). So for these layouts a window is planned in STORAGE order instead: a run of
stored words or bytes of one packed row, and the logical elements it holds, decoded with their
scale and zero rows by the cell decoders (cells.py), every window's ranges read together.

The storage order of a logical [E, R, C] tensor (E experts, R logical rows, C logical columns)
is [E, C / B, R, B]: B logical columns lie in one stored element run of a logical row (GPTQ:
the inputs of one packed row, 32 / bits, or 32 over three words at 3 bits), and a stored row
holds all R logical rows of them. AWQ is [in, out] (B = 1); MXFP4 stores expert e's [C, R]
logical matrix as R rows of C codes (B = 1). Windows start and end on whole words or blocks
(`align`), so each one reads whole stored elements. A sample says which elements it took:
`Sample.windows` are runs of this order, and `logical(s)` maps each back.
"""

from __future__ import annotations

from math import gcd
from typing import NamedTuple

from .records import Logical


class StorageOrder(NamedTuple):
    experts: int
    rows: int       # logical rows of one expert
    cols: int       # logical columns
    block: int      # logical columns of a row stored together (B above)
    align: int      # window starts and lengths are multiples of this many elements
    label: str      # what a sample's windows run along, for the reply

    def logical(self, s: int) -> int:
        """The row-major logical index of element `s` of the storage order."""
        per_expert, per_block = self.rows * self.cols, self.rows * self.block
        e, rest = divmod(s, per_expert)
        cb, rest = divmod(rest, per_block)
        r, j = divmod(rest, self.block)
        return e * per_expert + r * self.cols + cb * self.block + j

    def segments(self, start: int, count: int) -> list[tuple[list[int], list[int]]]:
        """The window [start, start + count) of this order as products (logical rows, logical
        columns) in the rows x columns numbering of the cell decoders, in storage order: one
        per stored row it crosses. `start` and `count` are multiples of `align`."""
        per_expert, per_block, b = self.rows * self.cols, self.rows * self.block, self.block
        out = []
        s, end = start, start + count
        while s < end:
            e, rest = divmod(s, per_expert)
            cb, rest = divmod(rest, per_block)
            stop = min(end, e * per_expert + (cb + 1) * per_block)
            r0 = rest // b
            r1 = r0 + (stop - s) // b
            out.append((list(range(e * self.rows + r0, e * self.rows + r1)), list(range(cb * b, cb * b + b))))
            s = stop
        return out


def order_of(t: Logical) -> StorageOrder | None:
    """The storage order of a layout whose logical rows cross its stored rows; None where
    logical rows are stored rows (a window along them reads one run already)."""
    if t.reason or t.scheme is None:
        return None
    layout = t.scheme.layout
    if layout == "gptq":
        bits = t.scheme.bits
        block = 32 * (bits // gcd(bits, 32)) // bits    # inputs per packed row (3 bits: per 3 rows)
        outs, ins = t.shape
        return StorageOrder(1, outs, ins, block, block, f"packed rows of qweight ({block} inputs of each output)")
    if layout == "awq":
        outs, ins = t.shape
        return StorageOrder(1, outs, ins, 1, 8, "rows of qweight (the outputs of one input)")
    if layout == "mxfp4":
        experts, cols, rows = t.shape
        return StorageOrder(experts, cols, rows, 1, 32, "stored rows of the blocks (before the transpose)")
    return None
