"""The fixed array chunk index (spec VII.B "Fixed Array"): a chunked dataset with a fixed
maximum shape written with libver="latest".

An "FAHD" header (version, client ID, entry size, page bits, entry count, data block address,
checksum) names one "FADB" data block (version, client ID, header address, then either every
entry or, paged, a page-initialised bitmap; then its checksum). A chunk's entry number is its
grid coordinates in row-major order over the maximum shape's grid (H5D__farray's
max_down_chunks). Paging (more than 2^`page bits` entries) is arrays.py's.
"""

from __future__ import annotations

import math

from .arrays import CHECKSUM, LazyIndex, Pages, check_entry_size, check_padding, checked
from .file import Cursor

HEADER, DATA_BLOCK = b"FAHD", b"FADB"


def chunks(src) -> LazyIndex:
    h5, what = src.h5, f"the fixed array of dataset {src.what}"
    O, L = h5.offset_size, h5.length_size
    head = checked(h5, src.layout.address, 4 + 4 + L + O + CHECKSUM, what)
    if head.take(4) != HEADER:
        raise h5.fail(f"{what} has no \"FAHD\" header", head.at, expected="FAHD")
    _version, client, size, page_bits = head.u8(), head.u8(), head.u8(), head.u8()
    count, block = head.length(), head.address()
    maxshape = tuple(m if m is not None else d for m, d in zip(src.maxshape or src.shape, src.shape))
    if any(m < d for m, d in zip(maxshape, src.shape)):
        raise h5.fail(f"dataset {src.what} has a maximum shape {list(maxshape)} below its shape "
                      f"{list(src.shape)}", head.at)
    grid = tuple(-(-m // c) for m, c in zip(maxshape, src.chunk))
    if count != math.prod(grid):
        raise h5.fail(f"{what} holds {count:,} entries for {math.prod(grid):,} chunks", head.at)
    check_entry_size(src, client, size, what, head.at)
    down = [math.prod(grid[i + 1:]) for i in range(len(grid))]

    def number(coords: tuple) -> int:
        return sum(c * d for c, d in zip(coords, down))

    if not h5.defined(block):
        return LazyIndex(src, number, lambda n: None)
    prefix = 4 + 1 + O + 1
    page_elements = 1 << page_bits
    if count <= page_elements:
        body = checked(h5, block, prefix + count * size + CHECKSUM, what)
        _check_prefix(h5, body, src.layout.address, client, what)
        entries = body.data[prefix:]
        return LazyIndex(src, number, lambda n: entries[n * size:(n + 1) * size] if n < count else None)
    # paged: the prefix is followed by its bitmap and checksum, then the pages
    pages = -(-count // page_elements)
    bitmap_bytes = (pages + 7) // 8
    head_block = checked(h5, block, prefix + bitmap_bytes + CHECKSUM, what)
    _check_prefix(h5, head_block, src.layout.address, client, what)
    bitmap = head_block.data[prefix:]
    check_padding(h5, bitmap, pages, what, head_block.at + prefix)
    paged = Pages(h5, block + prefix + bitmap_bytes + CHECKSUM, count, page_elements, size, bitmap,
                  0, what)
    return LazyIndex(src, number, paged.entry)


def _check_prefix(h5, c: Cursor, header: int, client: int, what: str) -> None:
    if c.take(4) != DATA_BLOCK:
        raise h5.fail(f"{what} has no \"FADB\" data block", c.at, expected="FADB")
    c.skip(1)
    kind, owner = c.u8(), c.address()
    if owner != header or kind != client:
        raise h5.fail(f"{what} points at a data block of another array", c.at,
                      expected=f"header {header}, client {client}", found=f"{owner}, {kind}")
