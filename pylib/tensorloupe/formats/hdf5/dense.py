"""A group's links and an object's attributes in dense storage (libver="latest", more than 8
links or attributes, or an attribute too large for its header): the link info / attribute info
message names a fractal heap (spec III.G) holding each link or attribute message as a heap
object, and a version 2 B-tree (III.A.2) that lists them: record type 5 (name hash + heap ID)
for links, type 8 (heap ID, flags, creation order, name hash) for attributes.

The B-tree's records give the heap IDs; a managed object's ID holds its offset and length in
the heap's address space, which is laid out in direct blocks ("FHDB") either at the root or
under a root indirect block ("FHIB", rows of `table width` blocks doubling in size). A huge
object (larger than the heap's managed maximum: a big attribute) is found by its ID in the
heap's own v2 B-tree of huge objects (record type 1: address, length, ID); filtered huge objects
and tiny ones (never used for the messages HDF5 writes here) are refused. Every count is bounded.
"""

from __future__ import annotations

from ...errors import LimitError, UnsupportedError
from . import messages
from .btree2 import records
from .file import Cursor, H5File

HEAP, DIRECT, INDIRECT = b"FRHP", b"FHDB", b"FHIB"
NAME_INDEX, HUGE_INDEX, ATTRIBUTE_INDEX = 5, 1, 8
HUGE = 1                           # a heap ID's type bits: 0 managed, 1 huge, 2 tiny
ATTRIBUTE_HEAP_ID = 8              # H5O_FHEAP_ID_LEN: the heap ID that starts a type 8 record
# Bytes of a huge attribute message read: its name, type and shape, and a value small enough to
# show (attributes.py shows at most MAX_VALUES elements); a 100 MB attribute costs 64 KiB
ATTRIBUTE_HEAD = 1 << 16
MAX_BLOCKS = 1 << 16
MAX_DEPTH = 8


def links(h5: H5File, heap_address: int, btree_address: int, where: str) -> list[messages.Link]:
    heap = _Heap(h5, heap_address, f"group {where}")
    out = []
    for record in records(h5, btree_address, f"the link name index of group {where}", NAME_INDEX):
        out.append(messages.link(h5, heap.object(record[4:], where), h5.base + heap_address))
    return out


def attributes(h5: H5File, heap_address: int, btree_address: int, where: str) -> list[tuple[bytes, int]]:
    """(message bytes, where they are) of each attribute an object keeps in dense storage."""
    heap = _Heap(h5, heap_address, f"the attributes of {where}")
    what = f"the attribute name index of {where}"
    return [(heap.object(record[:ATTRIBUTE_HEAP_ID], where, ATTRIBUTE_HEAD), h5.base + heap_address)
            for record in records(h5, btree_address, what, ATTRIBUTE_INDEX)]


class _Heap:
    def __init__(self, h5: H5File, address: int, of: str):
        self.h5, self.what = h5, f"the fractal heap of {of}"
        L, O = h5.length_size, h5.offset_size
        c = Cursor(h5, h5.read(address, 4 + 1 + 2 + 2 + 1 + 4 + 12 * L + 3 * O + 10, self.what),
                   h5.base + address, self.what)
        if c.take(4) != HEAP:
            raise h5.fail(f"{self.what} has no \"FRHP\" header", c.at, expected="FRHP")
        c.skip(1)
        self.id_length, filters, self.flags = c.u16(), c.u16(), c.u8()
        c.skip(4 + L)                     # max managed object size, next huge object ID
        self.huge_index = c.address()     # the v2 B-tree of huge objects
        c.skip(L + O + L + L + L + L + L + L + L + L)
        self.huge: dict[int, tuple[int, int]] | None = None     # huge object ID -> (address, length)
        self.width, self.start, self.max_direct = c.u16(), c.length(), c.length()
        max_heap_bits = c.u16()
        c.skip(2)
        self.root, self.rows = c.address(), c.u16()
        if filters:
            raise h5.fail(f"{self.what} is filtered, which tensorloupe does not read", c.at,
                          UnsupportedError)
        if not (0 < self.start <= self.max_direct) or self.width == 0 or max_heap_bits > 64:
            raise h5.fail(f"{self.what} has an impossible geometry", c.at)
        self.offset_bytes = (max_heap_bits + 7) // 8
        self.blocks: list[tuple[int, int, int]] | None = None    # (heap offset, size, address)

    def _layout(self) -> list[tuple[int, int, int]]:
        if not self.rows:
            return [(0, self.start, self.root)]
        blocks: list[tuple[int, int, int]] = []
        self._indirect(self.root, self.rows, 0, blocks, 0)
        return blocks

    def _indirect(self, address: int, rows: int, offset: int, blocks: list, depth: int) -> None:
        h5 = self.h5
        if depth > MAX_DEPTH or len(blocks) > MAX_BLOCKS:
            raise h5.fail(f"{self.what} is nested too deep", h5.base + address, LimitError)
        direct_rows = (self.max_direct.bit_length() - self.start.bit_length()) + 2
        entries = rows * self.width
        c = Cursor(h5, h5.read(address, 5 + h5.offset_size + self.offset_bytes + entries *
                               h5.offset_size, self.what), h5.base + address, self.what)
        if c.take(4) != INDIRECT:
            raise h5.fail(f"{self.what} points at no \"FHIB\" block", c.at, expected="FHIB")
        c.skip(1 + h5.offset_size + self.offset_bytes)
        at = offset
        for row in range(rows):
            size = self.start if row < 2 else self.start << (row - 1)
            for _ in range(self.width):
                child = c.address()
                if h5.defined(child):
                    if row < direct_rows:
                        blocks.append((at, size, child))
                    else:
                        child_rows = (size.bit_length() - (self.start * self.width).bit_length()) + 1
                        self._indirect(child, child_rows, at, blocks, depth + 1)
                at += size

    def object(self, heap_id: bytes, where: str, head: int | None = None) -> bytes:
        """A heap object's bytes (a huge one's first `head` bytes, if given)."""
        h5 = self.h5
        if heap_id and heap_id[0] >> 6 == 0 and (heap_id[0] >> 4) & 3 == HUGE:
            return self._huge(heap_id, where, head)
        if not heap_id or heap_id[0] >> 6 != 0 or (heap_id[0] >> 4) & 3 != 0:
            raise h5.fail(f"a message of {where} is not a managed or huge heap object (tiny "
                          "objects are not read)", None, UnsupportedError)
        offset = int.from_bytes(heap_id[1:1 + self.offset_bytes], "little")
        length = int.from_bytes(heap_id[1 + self.offset_bytes:self.id_length], "little")
        if self.blocks is None:
            self.blocks = self._layout()
        for start, size, address in self.blocks:
            if start <= offset and offset + length <= start + size:
                return h5.read(address + offset - start, length, self.what)
        raise h5.fail(f"a message of {where} lies outside its fractal heap's blocks", None,
                      found=f"offset {offset:,}, {length:,} bytes")

    def _huge(self, heap_id: bytes, where: str, head: int | None) -> bytes:
        """A huge object, by the ID its heap ID holds (H5HF huge: the v2 B-tree key)."""
        h5, L, O = self.h5, self.h5.length_size, self.h5.offset_size
        if self.id_length - 1 >= O + L:    # a heap ID wide enough holds the address and length
            c = Cursor(h5, heap_id, 0, f"a huge object ID of {self.what}", 1)
            address, length = c.address(), c.length()
            return h5.read(address, length if head is None else min(length, head), self.what)
        if self.huge is None:
            if not h5.defined(self.huge_index):
                raise h5.fail(f"a message of {where} is a huge heap object, but {self.what} has "
                              "no huge objects", None)
            self.huge = {}
            for record in records(h5, self.huge_index, f"the huge objects of {self.what}", HUGE_INDEX):
                c = Cursor(h5, record, 0, f"a huge object record of {self.what}")
                address, length, number = c.address(), c.length(), c.length()
                self.huge[number] = (address, length)
        number = int.from_bytes(heap_id[1:1 + min(self.id_length - 1, L)], "little")
        if number not in self.huge:
            raise h5.fail(f"a message of {where} names huge object {number:,}, which {self.what} "
                          "does not hold", None)
        address, length = self.huge[number]
        return h5.read(address, length if head is None else min(length, head), self.what)
