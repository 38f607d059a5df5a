"""Version 2 B-trees (spec III.A.2): every record of one, leaves and internal nodes alike, for
dense links (record type 5) and attributes (8), huge heap objects (1: dense.py) and the chunks
of a dataset with more than one unlimited dimension (10 unfiltered, 11 filtered: `chunks`).

A node's child pointers carry record counts whose byte widths follow from the node size and the
record size, level by level (H5B2__hdr_init's node_info); every count is bounded, and a node
seen twice is a cycle.
"""

from __future__ import annotations

from ...errors import LimitError, UnsupportedError
from .file import Cursor, H5File

BTREE_HEADER, BTREE_INTERNAL, BTREE_LEAF = b"BTHD", b"BTIN", b"BTLF"
NODE_OVERHEAD = 10                 # signature, version, type, checksum
MAX_RECORDS = 1 << 20
MAX_BLOCKS = 1 << 16
MAX_DEPTH = 8
CHUNKS, FILTERED_CHUNKS = 10, 11


def _width(n: int) -> int:
    """Bytes of a count up to n (H5VM_limit_enc_size)."""
    return max(1, (n.bit_length() + 7) // 8)


def records(h5: H5File, address: int, what: str, expected_kind: int) -> list[bytes]:
    c = Cursor(h5, h5.read(address, 16 + h5.offset_size + 2 + h5.length_size, what),
               h5.base + address, what)
    if c.take(4) != BTREE_HEADER:
        raise h5.fail(f"{what} is not a version 2 B-tree", c.at, expected="BTHD")
    _version, kind, node_size, record_size, depth = c.u8(), c.u8(), c.u32(), c.u16(), c.u16()
    c.skip(2)
    root, root_count, total = c.address(), c.u16(), c.length()
    if kind != expected_kind:
        raise h5.fail(f"{what} has record type {kind}, not {expected_kind}", c.at, UnsupportedError)
    if total > MAX_RECORDS or depth > MAX_DEPTH or record_size < 5 or node_size < 64:
        raise h5.fail(f"{what} declares {total:,} records, depth {depth:,}", c.at, LimitError)
    # per level: (max records in a node, max records below it), leaves first
    leaf = (node_size - NODE_OVERHEAD) // record_size
    levels = [(leaf, leaf)]
    for d in range(1, depth + 1):
        child_max, child_total = levels[d - 1]
        pointer = h5.offset_size + _width(child_max) + (_width(child_total) if d > 1 else 0)
        most = (node_size - NODE_OVERHEAD - pointer) // (record_size + pointer)
        levels.append((most, most + (most + 1) * child_total))
    out: list[bytes] = []
    stack = [(root, root_count, depth)]
    seen = set()
    while stack:
        node, count, level = stack.pop()
        if node in seen or len(seen) > MAX_BLOCKS:
            raise h5.fail(f"{what} has a cycle or too many nodes", h5.base + node)
        seen.add(node)
        n = count
        if n > levels[level][0]:
            raise h5.fail(f"a node of {what} declares {count:,} records", h5.base + node, LimitError)
        body = Cursor(h5, h5.read(node, min(node_size, h5.size - h5.base - node), what),
                      h5.base + node, what)
        signature = body.take(4)
        body.skip(2)
        if signature != (BTREE_LEAF if level == 0 else BTREE_INTERNAL):
            raise h5.fail(f"{what} points at a node that is not one", body.at,
                          expected="BTLF" if level == 0 else "BTIN", found=signature.hex(" "))
        out += [body.take(record_size) for _ in range(n)]
        if level:
            child_max, child_total = levels[level - 1]
            for _ in range(n + 1):
                child = body.address()
                child_count = body.uint(_width(child_max))
                if level > 1:
                    body.uint(_width(child_total))
                stack.append((child, child_count, level - 1))
        if len(out) > MAX_RECORDS:
            raise h5.fail(f"{what} holds more than {MAX_RECORDS:,} records", body.at, LimitError)
    return out


def chunks(src) -> dict:
    """A chunked dataset's chunks (a ChunkedSource's index): record type 10 holds a chunk's
    address and its scaled offsets (its coordinates on the chunk grid, 8 bytes each), type 11
    the same with the filtered size and the filter mask after the address (the size's width is
    what the record size leaves: HDF5 sizes it from the chunk's bytes when it creates the tree)."""
    h5, rank = src.h5, len(src.shape)
    filtered = bool(src.pipeline)
    what = f"the chunk B-tree of dataset {src.what}"
    fixed = h5.offset_size + 8 * rank + (4 if filtered else 0)
    out = {}
    for record in records(h5, src.layout.address, what, FILTERED_CHUNKS if filtered else CHUNKS):
        size_bytes = len(record) - fixed
        if not (0 < size_bytes <= 8 if filtered else size_bytes == 0):
            raise h5.fail(f"{what} has {len(record):,}-byte records, not a rank-{rank:,} chunk's", None)
        c = Cursor(h5, record, 0, f"a record of {what}")
        address = c.address()
        size, mask = (c.uint(size_bytes), c.u32()) if filtered else (src.chunk_bytes, 0)
        coords = tuple(c.uint(8) for _ in range(rank))
        if any(k >= g for k, g in zip(coords, src.grid)):
            raise h5.fail(f"{what} has a chunk at {list(coords)}, outside its grid {list(src.grid)}", None)
        if coords in out:
            raise h5.fail(f"{what} lists the chunk at {list(coords)} twice", None)
        out[coords] = (h5.base + address, size, mask)
    return out
