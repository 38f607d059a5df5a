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
Paged data blocks (more entries than 2^`page bits`) are refused: small datasets never have them.
"""

from __future__ import annotations

import math

from ...errors import LimitError, UnsupportedError
from .file import Cursor

HEADER, INDEX_BLOCK, SUPER_BLOCK, DATA_BLOCK = b"EAHD", b"EAIB", b"EASB", b"EADB"
UNFILTERED, FILTERED = 0, 1         # the header's client ID
MAX_BLOCKS = 1 << 16


def chunks(src) -> dict:
    """A ChunkedSource's chunk index: grid coordinates -> (address, stored size, filter mask)."""
    h5, what = src.h5, f"the extensible array of dataset {src.what}"
    O, L = h5.offset_size, h5.length_size
    c = Cursor(h5, h5.read(src.layout.address, 12 + 6 * L + O, what), h5.base + src.layout.address, what)
    if c.take(4) != HEADER:
        raise h5.fail(f"{what} has no \"EAHD\" header", c.at, expected="EAHD")
    _version, client, size, max_bits, index_elements, min_elements, min_pointers, page_bits = \
        (c.u8() for _ in range(8))
    c.skip(6 * L)
    index_block = c.address()
    if client != (FILTERED if src.pipeline else UNFILTERED) or size < O + (4 + 1 if src.pipeline else 0):
        raise h5.fail(f"{what} holds {size}-byte entries of client {client}, not this dataset's", c.at)
    if not (min_elements and min_pointers) or min_elements & (min_elements - 1) \
            or min_pointers & (min_pointers - 1) or max_bits > 64:
        raise h5.fail(f"{what} has an impossible geometry", c.at)
    wanted = _entry_numbers(src)
    needed = max(wanted.values(), default=-1) + 1
    super_blocks = _super_blocks(max_bits, min_elements)
    in_index = 2 * (min_pointers.bit_length() - 1)          # super blocks kept by the index block
    direct = 2 * (min_pointers - 1)                          # their data blocks' addresses
    indirect = max(0, len(super_blocks) - in_index)
    block = Cursor(h5, h5.read(index_block, 6 + O + index_elements * size + (direct + indirect) * O, what),
                   h5.base + index_block, what)
    if block.take(4) != INDEX_BLOCK:
        raise h5.fail(f"{what} has no \"EAIB\" index block", block.at, expected="EAIB")
    block.skip(2 + O)
    entries = [block.take(size) for _ in range(min(index_elements, needed))]
    block.skip(max(0, index_elements - needed) * size)
    data_blocks = [block.address() for _ in range(direct)]
    super_addresses = [block.address() for _ in range(indirect)]
    offset_bytes = (max_bits + 7) // 8
    found: dict[int, bytes] = dict(enumerate(entries))
    for s, (count, elements, start, first) in enumerate(super_blocks):
        if index_elements + start >= needed:
            break
        if elements > 1 << page_bits:
            raise h5.fail(f"{what} has paged data blocks, which tensorloupe does not read", None,
                          UnsupportedError)
        if s < in_index:
            addresses = data_blocks[first:first + count]
        else:
            addresses = _super_block(h5, super_addresses[s - in_index], count, offset_bytes, what)
        for d, address in enumerate(addresses):
            at = index_elements + start + d * elements
            if h5.defined(address) and at < needed:
                body = Cursor(h5, h5.read(address, 6 + O + offset_bytes + elements * size, what),
                              h5.base + address, what)
                if body.take(4) != DATA_BLOCK:
                    raise h5.fail(f"{what} points at no \"EADB\" data block", body.at, expected="EADB")
                body.skip(2 + O + offset_bytes)
                for k in range(elements):
                    found[at + k] = body.take(size)
    out = {}
    for coords, number in wanted.items():
        raw = found.get(number)
        if raw is None:
            continue
        e = Cursor(h5, raw, 0, f"an entry of {what}")
        address = e.address()
        stored, mask = (e.uint(size - O - 4), e.u32()) if src.pipeline else (src.chunk_bytes, 0)
        if h5.defined(address):
            out[coords] = (h5.base + address, stored, mask)
    return out


def _super_blocks(max_bits: int, min_elements: int) -> list[tuple[int, int, int, int]]:
    """(data blocks, entries per data block, first entry, first data block) of each super block."""
    out, start, first = [], 0, 0
    for s in range(1 + max_bits - (min_elements.bit_length() - 1)):
        count, elements = 1 << (s // 2), (1 << ((s + 1) // 2)) * min_elements
        out.append((count, elements, start, first))
        start, first = start + count * elements, first + count
    return out


def _super_block(h5, address: int, count: int, offset_bytes: int, what: str) -> list[int]:
    if not h5.defined(address):
        return []
    if count > MAX_BLOCKS:
        raise h5.fail(f"a super block of {what} holds {count:,} data blocks", None, LimitError)
    c = Cursor(h5, h5.read(address, 6 + h5.offset_size + offset_bytes + count * h5.offset_size, what),
               h5.base + address, what)
    if c.take(4) != SUPER_BLOCK:
        raise h5.fail(f"{what} points at no \"EASB\" super block", c.at, expected="EASB")
    c.skip(2 + h5.offset_size + offset_bytes)
    return [c.address() for _ in range(count)]


def _entry_numbers(src) -> dict[tuple, int]:
    """Each chunk's entry number: grid coordinates row-major, the unlimited dimension first, the
    others counted up to their maximum size (the dataspace's)."""
    maxshape = src.maxshape or src.shape
    unlimited = [i for i, m in enumerate(maxshape) if m is None]
    if len(unlimited) != 1:
        raise src.h5.fail(f"dataset {src.what} has an extensible array index but "
                          f"{len(unlimited)} unlimited dimensions", None)
    if any(m is not None and m < d for m, d in zip(maxshape, src.shape)):
        raise src.h5.fail(f"dataset {src.what} has a maximum shape {list(maxshape)} below its shape "
                          f"{list(src.shape)}", None)
    u = unlimited[0]
    order = [u] + [i for i in range(len(src.shape)) if i != u]
    most = [-(-maxshape[i] // src.chunk[i]) if i != u else 0 for i in order]
    down = [math.prod(most[k + 1:]) for k in range(len(order))]
    out = {}
    for n in range(math.prod(src.grid)):
        coords = tuple((n // math.prod(src.grid[i + 1:])) % g for i, g in enumerate(src.grid))
        out[coords] = sum(coords[i] * step for i, step in zip(order, down))
    return out
