"""Attribute messages (spec IV.A.2.m) read as metadata: numbers, fixed-length strings and the
variable-length strings h5py writes for Python `str` (kept in a global heap collection, III.E).

Only small values are read (MAX_VALUES elements); a value tensorloupe cannot show becomes a
short description of what it is, never a guess.
"""

from __future__ import annotations

import math
import struct

from ...errors import TensorloupeError
from . import messages
from .file import Cursor, H5File

MAX_VALUES = 64
MAX_TEXT = 4096
GLOBAL_HEAP = b"GCOL"
FORMATS = {"I8": "b", "U8": "B", "I16": "h", "U16": "H", "I32": "i", "U32": "I", "I64": "q",
           "U64": "Q", "F16": "e", "F32": "f", "F64": "d", "BOOL": "?"}


class Attributes:
    """Decodes a header's attribute messages; global heap collections are read once each."""

    def __init__(self, h5: H5File):
        self.h5 = h5
        self.heaps: dict[int, dict[int, bytes]] = {}

    def read(self, data: bytes, at: int) -> tuple[str, object]:
        h5 = self.h5
        c = Cursor(h5, data, at, "an attribute message")
        version, flags = c.u8(), c.u8()
        name_size, type_size, space_size = c.u16(), c.u16(), c.u16()
        if version == 3:
            c.skip(1)
        elif version not in (1, 2):
            raise h5.fail(f"an attribute message has version {version}", at)
        pad = 8 if version == 1 else 1
        name = c.take(name_size).split(b"\0", 1)[0].decode("utf-8", "replace")
        c.skip(-name_size % pad)
        type_at = c.at + c.pos
        type_raw = c.take(type_size)
        c.skip(-type_size % pad)
        space_at = c.at + c.pos
        space_raw = c.take(space_size)
        c.skip(-space_size % pad)
        if flags & 0x03:
            return name, "(a shared datatype or dataspace: not read)"
        try:
            kind = messages.datatype(h5, type_raw, type_at)
            shape = messages.dataspace(h5, space_raw, space_at).shape
        except TensorloupeError as e:
            return name, f"(not read: {e.message})"
        if shape is None:
            return name, None
        count = math.prod(shape)
        if count > MAX_VALUES:
            return name, f"({kind.dtype or 'values'} of shape {list(shape)}: not read)"
        raw = c.take(min(c.left, count * kind.size))
        values = self._values(kind, raw, count, c.at + c.pos)
        return name, values[0] if not shape and values else values

    def _values(self, kind: messages.Datatype, raw: bytes, count: int, at: int) -> list:
        if len(raw) < count * kind.size:
            return [f"(the value holds {len(raw):,} bytes, not {count * kind.size:,})"]
        if kind.dtype in FORMATS:
            code = (">" if kind.big_endian else "<") + FORMATS[kind.dtype] * count
            return list(struct.unpack(code, raw))
        if kind.text == "fixed":
            return [_text(raw[i * kind.size:(i + 1) * kind.size].rstrip(b"\0 "))
                    for i in range(count)]
        if kind.text == "vlen":
            step = 4 + self.h5.offset_size + 4
            out = []
            for i in range(count):
                c = Cursor(self.h5, raw[i * step:(i + 1) * step], at, "a variable-length string")
                length, heap, index = c.u32(), c.address(), c.u32()
                out.append(_text(self._heap_object(heap, index)[:length]))
            return out
        return [f"({kind.why})"]

    def _heap_object(self, address: int, index: int) -> bytes:
        if address not in self.heaps:
            self.heaps[address] = self._collection(address)
        found = self.heaps[address].get(index)
        if found is None:
            raise self.h5.fail(f"a variable-length string refers to object {index:,} of the global "
                               "heap collection, which it does not hold", self.h5.base + address)
        return found

    def _collection(self, address: int) -> dict[int, bytes]:
        h5 = self.h5
        head = h5.read(address, 8 + h5.length_size, "a global heap collection")
        if head[:4] != GLOBAL_HEAP:
            raise h5.fail("a variable-length string points at no global heap collection",
                          h5.base + address, expected="GCOL", found=head[:4].hex(" "))
        size = int.from_bytes(head[8:8 + h5.length_size], "little")
        c = Cursor(h5, h5.read(address, size, "a global heap collection"), h5.base + address,
                   "a global heap collection", 8 + h5.length_size)
        objects = {}
        while c.left >= 8 + h5.length_size:
            index = c.u16()
            c.skip(6)
            n = c.length()
            if index == 0:
                break
            objects[index] = c.take(n)
            c.skip(min(c.left, -n % 8))
        return objects


def _text(raw: bytes) -> str:
    return raw[:MAX_TEXT].decode("utf-8", "replace")
