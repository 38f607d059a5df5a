"""The extensible array chunk index (spec VII.B): a chunked dataset with exactly one unlimited
dimension written with libver="latest".

An "EAHD" header describes the array and names its index block ("EAIB"), which holds the first
`index block elements` entries, then the addresses of the first data blocks ("EADB") and of
super blocks ("EASB") that hold the addresses of later data blocks. Super block s holds
2^(s//2) data blocks of 2^((s+1)//2) * `data block min elements` entries each (H5EA__hdr_init's
sblk_info); the index block keeps the data blocks of its first 2·log2(`super block min data
pointers`) super blocks itself. An entry is a chunk's address (and, filtered, its size and filter
mask). A chunk's entry number is its grid coordinates in row-major order with the unlimited
dimension moved first (H5D__earray's swizzle), each other dimension counted up to its maximum.

A data block of a super block with more than 2^`page bits` entries is paged (arrays.py): the
super block then holds, before its data block addresses, one page-initialised bitmap for all its
data blocks (data block d's page p is bit d * pages + p, H5EA__lookup_elmt). Every block is read
when a lookup first needs it, and its checksum verified.
"""

from __future__ import annotations

import math

from ...errors import LimitError
from .arrays import CHECKSUM, LazyIndex, Pages, check_entry_size, check_padding, checked

HEADER, INDEX_BLOCK, SUPER_BLOCK, DATA_BLOCK = b"EAHD", b"EAIB", b"EASB", b"EADB"
MAX_BLOCKS = 1 << 16


def chunks(src) -> LazyIndex:
    """A ChunkedSource's chunk index, looked up entry by entry."""
    h5, what = src.h5, f"the extensible array of dataset {src.what}"
    O, L = h5.offset_size, h5.length_size
    c = checked(h5, src.layout.address, 12 + 6 * L + O + CHECKSUM, what)
    if c.take(4) != HEADER:
        raise h5.fail(f"{what} has no \"EAHD\" header", c.at, expected="EAHD")
    _version, client, size, max_bits, index_elements, min_elements, min_pointers, page_bits = \
        (c.u8() for _ in range(8))
    c.skip(6 * L)
    index_block = c.address()
    check_entry_size(src, client, size, what, c.at)
    if not (min_elements and min_pointers) or min_elements & (min_elements - 1) \
            or min_pointers & (min_pointers - 1) or max_bits > 64:
        raise h5.fail(f"{what} has an impossible geometry", c.at)
    number = _entry_number(src)
    if not h5.defined(index_block):
        return LazyIndex(src, number, lambda n: None)
    return LazyIndex(src, number, _Array(h5, src.layout.address, index_block, client, size, max_bits,
                                         index_elements, min_elements, min_pointers, page_bits,
                                         what).entry)


class _Array:
    """Entry n's raw bytes (None: never written), reading each block the first time a lookup
    passes through it."""

    def __init__(self, h5, header, index_block, client, size, max_bits, index_elements,
                 min_elements, min_pointers, page_bits, what):
        O = h5.offset_size
        self.h5, self.header, self.client, self.size, self.what = h5, header, client, size, what
        self.index_elements, self.page_elements = index_elements, 1 << page_bits
        self.max_bits, self.offset_bytes = max_bits, (max_bits + 7) // 8
        self.super_blocks = _super_blocks(max_bits, min_elements)
        self.in_index = 2 * (min_pointers.bit_length() - 1)     # super blocks kept by the index block
        direct = 2 * (min_pointers - 1)                          # their data blocks' addresses
        indirect = max(0, len(self.super_blocks) - self.in_index)
        if any(elements > self.page_elements
               for _, elements, _, _ in self.super_blocks[:self.in_index]):
            raise h5.fail(f"{what} has paged data blocks in its index block (HDF5 never pages "
                          "those)", h5.base + header)
        block = checked(h5, index_block, 6 + O + index_elements * size + (direct + indirect) * O
                        + CHECKSUM, what)
        if block.take(4) != INDEX_BLOCK:
            raise h5.fail(f"{what} has no \"EAIB\" index block", block.at, expected="EAIB")
        self._owner(block, "index block")
        self.entries = block.take(index_elements * size)
        self.data_blocks = [block.address() for _ in range(direct)]
        self.super_addresses = [block.address() for _ in range(indirect)]
        self._supers: dict[int, tuple[list[int], bytes]] = {}
        self._blocks: dict[int, object] = {}

    def _owner(self, c, kind: str) -> None:
        c.skip(1)                                                # version
        client, owner = c.u8(), c.address()
        if owner != self.header or client != self.client:
            raise self.h5.fail(f"the {kind} of {self.what} belongs to another array", c.at,
                               expected=f"header {self.header}, client {self.client}",
                               found=f"{owner}, {client}")

    def entry(self, n: int) -> bytes | None:
        if n < self.index_elements:
            return self.entries[n * self.size:(n + 1) * self.size]
        m = n - self.index_elements
        for s, (count, elements, start, first) in enumerate(self.super_blocks):
            if m < start + count * elements:
                break
        else:
            raise self.h5.fail(f"{self.what} has no room for entry {n:,} (its maximum is "
                               f"2^{self.max_bits})", None)
        d, k = divmod(m - start, elements)
        paged = elements > self.page_elements
        if s < self.in_index:
            address, bitmap = self.data_blocks[first + d], b""
        else:
            found = self._super_block(s, count, elements)
            if found is None:
                return None
            addresses, bitmap = found
            address = addresses[d]
        if not self.h5.defined(address):
            return None
        block = self._blocks.get(address)
        if block is None:
            block = self._blocks[address] = self._data_block(address, elements, paged, bitmap, d)
        if paged:
            return block.entry(k)
        return block[k * self.size:(k + 1) * self.size]

    def _super_block(self, s: int, count: int, elements: int):
        """Super block s's data block addresses and page bitmap (None: never allocated)."""
        if s in self._supers:
            return self._supers[s]
        h5, O = self.h5, self.h5.offset_size
        address = self.super_addresses[s - self.in_index]
        found = None
        if h5.defined(address):
            if count > MAX_BLOCKS:
                raise h5.fail(f"a super block of {self.what} holds {count:,} data blocks", None,
                              LimitError)
            pages = elements // self.page_elements if elements > self.page_elements else 0
            bitmap_bytes = count * ((pages + 7) // 8)
            c = checked(h5, address, 6 + O + self.offset_bytes + bitmap_bytes + count * O + CHECKSUM,
                        f"a super block of {self.what}")
            if c.take(4) != SUPER_BLOCK:
                raise h5.fail(f"{self.what} points at no \"EASB\" super block", c.at,
                              expected="EASB")
            self._owner(c, "super block")
            c.skip(self.offset_bytes)
            bitmap = c.take(bitmap_bytes)
            check_padding(h5, bitmap, count * pages, f"a super block of {self.what}", c.at)
            found = ([c.address() for _ in range(count)], bitmap)
        self._supers[s] = found
        return found

    def _data_block(self, address: int, elements: int, paged: bool, bitmap: bytes, d: int):
        """An unpaged data block's entries, or a paged one's Pages."""
        h5, O = self.h5, self.h5.offset_size
        prefix = 6 + O + self.offset_bytes
        what = f"a data block of {self.what}"
        c = checked(h5, address, prefix + (0 if paged else elements * self.size) + CHECKSUM, what)
        if c.take(4) != DATA_BLOCK:
            raise h5.fail(f"{self.what} points at no \"EADB\" data block", c.at, expected="EADB")
        self._owner(c, "data block")
        c.skip(self.offset_bytes)
        if not paged:
            return c.take(elements * self.size)
        pages = elements // self.page_elements
        return Pages(h5, address + prefix + CHECKSUM, elements, self.page_elements, self.size,
                     bitmap, d * pages, what)


def _super_blocks(max_bits: int, min_elements: int) -> list[tuple[int, int, int, int]]:
    """(data blocks, entries per data block, first entry, first data block) of each super block."""
    out, start, first = [], 0, 0
    for s in range(1 + max_bits - (min_elements.bit_length() - 1)):
        count, elements = 1 << (s // 2), (1 << ((s + 1) // 2)) * min_elements
        out.append((count, elements, start, first))
        start, first = start + count * elements, first + count
    return out


def _entry_number(src):
    """Each chunk's entry number: grid coordinates row-major, the unlimited dimension first, the
    others counted up to their maximum size (the dataspace's)."""
    maxshape = src.maxshape or src.shape
    unlimited = [i for i, m in enumerate(maxshape) if m is None]
    if len(unlimited) != 1:
        raise src.h5.fail(f"dataset {src.what} has an extensible array index but "
                          f"{len(unlimited):,} unlimited dimensions", None)
    if any(m is not None and m < d for m, d in zip(maxshape, src.shape)):
        raise src.h5.fail(f"dataset {src.what} has a maximum shape {list(maxshape)} below its shape "
                          f"{list(src.shape)}", None)
    u = unlimited[0]
    order = [u] + [i for i in range(len(src.shape)) if i != u]
    most = [-(-maxshape[i] // src.chunk[i]) if i != u else 0 for i in order]
    down = [math.prod(most[k + 1:]) for k in range(len(order))]

    def number(coords: tuple) -> int:
        return sum(coords[i] * step for i, step in zip(order, down))
    return number
