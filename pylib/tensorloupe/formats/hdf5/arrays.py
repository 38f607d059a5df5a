"""What the two array chunk indexes (farray.py, earray.py) share (spec VII.B).

Every block of theirs ends in a Jenkins lookup3 checksum of the bytes before it. A data block of
more than 2^`page bits` entries is *paged* (H5FA__dblock_alloc, H5EA__dblock_alloc): the block
itself is only a prefix (its fields and their checksum), and its entries follow it in pages of
2^`page bits` entries, each with its own checksum (the last page of a fixed array may be short;
the stride between pages is always a full page). A page whose bit in its page-initialised bitmap
is clear was never written: its chunks are unallocated and read as the fill value. Bits count
from the most significant bit of the first byte (H5VM_bit_get).

Entries are looked up lazily (`LazyIndex`): a chunk lookup reads the block or page holding its
entry, once, so reading one chunk of a paged index reads one page, not all of them.
"""

from __future__ import annotations

from collections.abc import Callable

from .file import Cursor, H5File
from .headers import lookup3

CHECKSUM = 4
UNFILTERED, FILTERED = 0, 1          # the header's client (class) ID


def checked(h5: H5File, address: int, n: int, what: str) -> Cursor:
    """The `n` bytes at `address`, whose last 4 are the lookup3 checksum of the rest, verified:
    a Cursor over the bytes before the checksum."""
    data = h5.read(address, n, what)
    body, stated = data[:-CHECKSUM], int.from_bytes(data[-CHECKSUM:], "little")
    if n < CHECKSUM or lookup3(body) != stated:
        raise h5.fail(f"{what} fails its checksum (corrupted file?)", h5.base + address,
                      expected=f"{stated:#010x}", found=f"{lookup3(body):#010x}")
    return Cursor(h5, body, h5.base + address, what)


def bit(bitmap: bytes, n: int) -> bool:
    return bool(bitmap[n // 8] & (0x80 >> (n % 8)))


def check_padding(h5: H5File, bitmap: bytes, used: int, what: str, at: int) -> None:
    """Bits past the `used` ones are padding, never set by HDF5: a set one means the bitmap, or
    the geometry it was sized from, lies. (Byte by byte: a bitmap may be megabytes long.)"""
    whole, part = divmod(used, 8)
    stray = None
    if part and whole < len(bitmap) and bitmap[whole] & (0xFF >> part):
        stray = whole
    elif any(bitmap[whole + (1 if part else 0):]):
        stray = next(i for i in range(whole + (1 if part else 0), len(bitmap)) if bitmap[i])
    if stray is not None:
        n = next(n for n in range(8 * stray, 8 * stray + 8) if n >= used and bit(bitmap, n))
        raise h5.fail(f"{what} marks page {n:,} initialised, but its data blocks have only "
                      f"{used:,} pages", at)


class Pages:
    """The pages of one paged data block: `entry(k)` is entry k's raw bytes, or None when its
    page was never initialised. A page is read (and its checksum verified) on first use."""

    def __init__(self, h5: H5File, start: int, elements: int, page_elements: int, size: int,
                 bitmap: bytes, first_bit: int, what: str):
        self.h5, self.start, self.elements, self.page_elements = h5, start, elements, page_elements
        self.size, self.bitmap, self.first_bit, self.what = size, bitmap, first_bit, what
        self._read: dict[int, bytes] = {}

    def entry(self, k: int) -> bytes | None:
        if not 0 <= k < self.elements:
            raise self.h5.fail(f"{self.what} has no entry {k:,} (it holds {self.elements:,})", None)
        p = k // self.page_elements
        if not bit(self.bitmap, self.first_bit + p):
            return None
        page = self._read.get(p)
        if page is None:
            n = min(self.page_elements, self.elements - p * self.page_elements)
            stride = self.page_elements * self.size + CHECKSUM
            page = checked(self.h5, self.start + p * stride, n * self.size + CHECKSUM,
                           f"page {p} of {self.what}").data
            self._read[p] = page
        at = (k % self.page_elements) * self.size
        return page[at:at + self.size]


def check_entry_size(src, client: int, size: int, what: str, at: int) -> None:
    """An entry is a chunk's address, and for a filtered dataset its stored size (1 to 8 bytes,
    H5D__farray's/H5D__earray's chunk_size_len) and 4-byte filter mask."""
    h5 = src.h5
    filtered = bool(src.pipeline)
    if client != (FILTERED if filtered else UNFILTERED) or not (
            h5.offset_size + 5 <= size <= h5.offset_size + 12 if filtered else size == h5.offset_size):
        raise h5.fail(f"{what} holds {size:,}-byte entries of client {client}, not this dataset's",
                      at)


class LazyIndex:
    """A ChunkedSource's chunk index, entry by entry: `get(coords)` is the chunk's (file
    offset, stored size, filter mask), or None when the chunk was never written."""

    def __init__(self, src, number: Callable[[tuple], int], entry: Callable[[int], bytes | None]):
        self.src, self._number, self._entry = src, number, entry

    def get(self, coords: tuple, default=None):
        raw = self._entry(self._number(coords))
        if raw is None:
            return default
        src = self.src
        h5 = src.h5
        e = Cursor(h5, raw, 0, f"an entry of the chunk index of dataset {src.what}")
        address = e.address()
        stored, mask = (e.uint(len(raw) - h5.offset_size - 4), e.u32()) if src.pipeline \
            else (src.chunk_bytes, 0)
        return (h5.base + address, stored, mask) if h5.defined(address) else default
