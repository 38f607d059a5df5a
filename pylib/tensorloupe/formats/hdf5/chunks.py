"""Chunked datasets: where each chunk is (the chunk index), how it is decoded (the filter
pipeline), and ChunkedSource, the dataset's row-major bytes made from the chunks a read needs.

Chunk indexes (spec IV.A.2.i, III.A.1, VII): the v1 B-tree of raw data chunks (libver
"earliest"; keys: chunk size, filter mask, the chunk's offset in each dimension, then 0), and
in layout version 4 a single chunk, an implicit index (chunks one after another), a fixed
array (farray.py), an extensible array (one unlimited dimension, earray.py) or a v2 B-tree
(more than one, btree2.py); the two arrays' data blocks may be paged (arrays.py), and are looked
up chunk by chunk. Filters: deflate (1), shuffle (2), fletcher32 (3); others (szip, lzf, ...)
make the dataset's problem. Every chunk lies inside the file and decodes to exactly its size, or
the read is refused.
"""

from __future__ import annotations

import math
import zlib
from collections import OrderedDict

from ...errors import FormatError, LimitError, UnsupportedError
from ...source import ByteSource
from . import btree2, earray, farray
from .file import Cursor, H5File
from .groups import btree_node
from .messages import Filter, Layout

DEFLATE, SHUFFLE, FLETCHER32 = 1, 2, 3
FILTER_NAMES = {1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit",
                6: "scaleoffset", 32000: "lzf", 32001: "blosc", 32004: "lz4", 32015: "zstd"}
READ_FILTERS = frozenset({DEFLATE, SHUFFLE, FLETCHER32})
RAW_CHUNK_NODE = 1
MAX_CHUNK_BYTES = 64 << 20       # one decoded chunk
MAX_CHUNKS = 1 << 20             # chunks of one dataset
KEPT_BYTES = 64 << 20            # decoded chunks kept for the next read


def problem_of(layout: Layout, pipeline: list[Filter], shape, element: int) -> str | None:
    """Why this chunked dataset cannot be read, or None."""
    for f in pipeline:
        if f.id not in READ_FILTERS:
            name = FILTER_NAMES.get(f.id, f.name or f"filter {f.id}")
            return f"its chunks are compressed with {name} (HDF5 filter {f.id}), which tensorloupe does not decode"
    grid = math.prod(-(-d // c) for d, c in zip(shape, layout.chunk))
    if grid > MAX_CHUNKS:
        return f"it is stored in {grid:,} chunks, more than the {MAX_CHUNKS:,} tensorloupe indexes"
    if math.prod(layout.chunk) * element > MAX_CHUNK_BYTES:
        return (f"a chunk holds {math.prod(layout.chunk) * element:,} bytes, more than the "
                f"{MAX_CHUNK_BYTES:,} tensorloupe decodes at once")
    return None


class ChunkedSource(ByteSource):
    """The row-major bytes of a chunked dataset. The chunk index is read on first use; a read
    decodes each chunk it touches once (decoded chunks kept up to KEPT_BYTES)."""

    def __init__(self, h5: H5File, layout: Layout, pipeline: list[Filter], shape, element: int,
                 fill: bytes | None, what: str, maxshape: tuple | None = None):
        super().__init__()
        self.h5, self.layout, self.pipeline, self.maxshape = h5, layout, pipeline, maxshape
        self.shape, self.element, self.what = tuple(shape), element, what
        self.chunk = layout.chunk
        self.name = h5.source.name
        self.size = math.prod(self.shape) * element
        self.chunk_bytes = math.prod(self.chunk) * element
        self.fill = (fill * math.prod(self.chunk))[:self.chunk_bytes] if fill and \
            len(fill) == element else bytes(self.chunk_bytes)
        self.grid = tuple(-(-d // c) for d, c in zip(self.shape, self.chunk))
        # coords -> (addr, size, mask): a dict, or an array index's LazyIndex (same .get)
        self._index = None
        self._kept: OrderedDict[tuple, bytes] = OrderedDict()

    @property
    def waits(self) -> bool:
        return self.h5.source.waits

    def root(self) -> ByteSource:
        return self.h5.source.root()

    def index(self) -> dict:
        if self._index is None:
            if math.prod(self.grid) > MAX_CHUNKS:
                raise self.h5.fail(f"dataset {self.what} has {math.prod(self.grid):,} chunks",
                                   None, LimitError, expected=f"at most {MAX_CHUNKS:,}")
            # an undefined index address: no chunk was ever written, all reads are the fill value
            self._index = INDEXES[self.layout.index](self) if self.h5.defined(
                self.layout.address) else {}
        return self._index

    def file_offset(self, offset: int) -> int:
        """Where the first chunk's stored bytes begin (a chunked dataset has no one offset)."""
        first = self.index().get((0,) * len(self.shape))
        return first[0] if first else self.h5.base + (self.layout.address or 0)

    def known_file_offset(self, offset: int) -> int | None:
        return None if self._index is None else self.file_offset(offset)

    def _read(self, offset: int, n: int) -> bytes:
        return self._count(self._bytes(offset, n))

    def _bytes(self, offset: int, n: int) -> bytes:
        """Bytes [offset, offset + n) of the row-major dataset, copied run by run: a run is a
        stretch of the last dimension inside one chunk."""
        e = self.element
        first, last = offset // e, -(-(offset + n) // e)
        out = bytearray()
        shape, chunk = self.shape, self.chunk
        strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
        cstrides = [math.prod(chunk[i + 1:]) for i in range(len(chunk))]
        i = first
        while i < last:
            index = [(i // s) % d for s, d in zip(strides, shape)]
            coords = tuple(x // c for x, c in zip(index, chunk))
            inner = sum((x % c) * s for x, c, s in zip(index, chunk, cstrides))
            run = min(chunk[-1] - index[-1] % chunk[-1], shape[-1] - index[-1], last - i)
            data = self._decoded(coords)
            out += data[inner * e:(inner + run) * e]
            i += run
        start = offset - first * e
        return bytes(out[start:start + n])

    def _decoded(self, coords: tuple) -> bytes:
        kept = self._kept.get(coords)
        if kept is not None:
            self._kept.move_to_end(coords)
            return kept
        entry = self.index().get(coords)
        data = self.fill if entry is None else self._decode(coords, *entry)
        self._kept[coords] = data
        while len(self._kept) > 1 and len(self._kept) * self.chunk_bytes > KEPT_BYTES:
            self._kept.popitem(last=False)
        return data

    def _decode(self, coords: tuple, address: int, size: int, mask: int) -> bytes:
        h5 = self.h5
        where = f"chunk {list(coords)} of dataset {self.what}"
        if size > MAX_CHUNK_BYTES + 4096 + self.chunk_bytes:
            raise h5.fail(f"{where} declares {size:,} stored bytes", address, LimitError)
        if address < h5.base or address + size > h5.size:
            raise h5.fail(f"{where} lies outside the file", address, FormatError,
                          expected=f"{size:,} bytes at {address:,}", found=f"file size {h5.size:,}")
        data = h5.source.read_data(address, size)
        edge = self.layout.edge_unfiltered and any(
            (c + 1) * k > d for c, k, d in zip(coords, self.chunk, self.shape))
        for position, f in reversed(list(enumerate(self.pipeline))):
            if edge or mask & (1 << position):
                continue                     # this filter was skipped for this chunk
            data = _unfilter(h5, f, data, self.element, self.chunk_bytes, where, address)
        if len(data) != self.chunk_bytes:
            raise h5.fail(f"{where} decodes to {len(data):,} bytes, not the chunk's "
                          f"{self.chunk_bytes:,}", address)
        return data


def _unfilter(h5: H5File, f: Filter, data: bytes, element: int, expected: int, where: str,
              at: int) -> bytes:
    if f.id == DEFLATE:
        inflater = zlib.decompressobj()
        try:
            out = inflater.decompress(data, expected + 1)
        except zlib.error as e:
            raise h5.fail(f"{where} does not inflate: {e}", at) from e
        if len(out) > expected or not inflater.eof:
            raise h5.fail(f"{where} inflates to more than the chunk's {expected:,} bytes, or "
                          "does not end", at, LimitError)
        return out
    if f.id == SHUFFLE:
        size = f.values[0] if f.values else element
        if size <= 1 or len(data) < size:
            return data
        count = len(data) // size
        out = bytearray(data)
        for b in range(size):       # byte b of every element was stored as one run
            out[b:count * size:size] = data[b * count:(b + 1) * count]
        return bytes(out)
    if f.id == FLETCHER32:
        if len(data) < 4:
            raise h5.fail(f"{where} is too short for its Fletcher-32 checksum", at)
        body, stated = data[:-4], int.from_bytes(data[-4:], "little")
        if fletcher32(body) != stated:
            raise h5.fail(f"{where} fails its Fletcher-32 checksum (corrupted file?)", at)
        return body
    raise h5.fail(f"{where} needs filter {f.id}", at, UnsupportedError)


def fletcher32(data: bytes) -> int:
    """H5checksum.c H5_checksum_fletcher32: 16-bit big-endian words, an odd last byte as the
    high byte of a word."""
    sum1 = sum2 = 0
    n = len(data) // 2
    for i in range(n):
        sum1 = (sum1 + (data[2 * i] << 8 | data[2 * i + 1])) % 0xFFFF
        sum2 = (sum2 + sum1) % 0xFFFF
    if len(data) % 2:
        sum1 = (sum1 + (data[-1] << 8)) % 0xFFFF
        sum2 = (sum2 + sum1) % 0xFFFF
    return (sum2 << 16) | sum1


def _btree1(src: ChunkedSource) -> dict:
    h5, rank = src.h5, len(src.shape)
    key_size = 8 + 8 * (rank + 1)
    found, queue, seen = {}, [src.layout.address], set()
    while queue:
        address = queue.pop(0)
        if address in seen or len(seen) > MAX_CHUNKS:
            raise h5.fail(f"the chunk B-tree of dataset {src.what} has a cycle or too many nodes",
                          h5.base + address)
        seen.add(address)
        node_type, level, children = btree_node(h5, address, key_size, f"dataset {src.what}")
        if node_type != RAW_CHUNK_NODE:
            raise h5.fail(f"the chunk B-tree of dataset {src.what} is not a chunk B-tree",
                          h5.base + address, expected="node type 1", found=node_type)
        for key, child in children:
            if level:
                queue.append(child)
                continue
            c = Cursor(h5, key, h5.base + address, "a chunk key")
            size, mask = c.u32(), c.u32()
            offsets = [c.uint(8) for _ in range(rank)]
            coords = _coords(src, offsets)
            found[coords] = (h5.base + child, size, mask)
    return found


def _coords(src: ChunkedSource, offsets: list[int]) -> tuple:
    if any(o % c or o >= max(d, 1) for o, c, d in zip(offsets, src.chunk, src.shape)):
        raise src.h5.fail(f"dataset {src.what} has a chunk at {offsets}, which is not on its "
                          "chunk grid", None)
    return tuple(o // c for o, c in zip(offsets, src.chunk))


def _single(src: ChunkedSource) -> dict:
    size, mask = src.layout.single_filtered or (src.chunk_bytes, 0)
    return {(0,) * len(src.shape): (src.h5.base + src.layout.address, size, mask)}


def _implicit(src: ChunkedSource) -> dict:
    out = {}
    for n in range(math.prod(src.grid)):
        coords = tuple((n // math.prod(src.grid[i + 1:])) % g for i, g in enumerate(src.grid))
        out[coords] = (src.h5.base + src.layout.address + n * src.chunk_bytes, src.chunk_bytes, 0)
    return out


INDEXES = {"btree1": _btree1, "single": _single, "implicit": _implicit,
           "fixed-array": farray.chunks, "btree2": btree2.chunks, "extensible-array": earray.chunks}
