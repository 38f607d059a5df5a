"""Byte-column tools the ggml block decoders are built from.

A ggml tensor is an array of fixed-size blocks. Rather than walking it block by block in Python,
the decoders cut it into *columns* (one field of every block, concatenated), turn packed codes
into one byte per element with `bytes.translate`, put those bytes in element order with strided
copies, and do the arithmetic with `map` over whole columns. The loops over elements all run in
C, which matters in Pyodide where Python bytecode is 2-3x slower than in CPython.

Exactness: ggml and gguf-py compute in float32; Python floats are doubles. A double holds the
product of an f16 scale and a small integer exactly, so where the float32 result is exact too the
double *is* the float32 value. Where float32 rounds (an added min, an f32 scale), the double
result of one operation rounded once to float32 is the correctly rounded float32 result (53 >= 2*24+2,
so double rounding is innocuous); `to_f32` does that rounding, C-cast style, overflow to inf.
"""

from __future__ import annotations

import struct
from array import array
from functools import lru_cache
from itertools import chain, repeat
from math import gcd
from typing import Callable, Iterable, NamedTuple


class Field(NamedTuple):
    name: str
    offset: int
    item: int   # bytes per C element: 1 for uint8_t arrays, 2 for ggml_half/uint16_t, 4 for float
    count: int  # C array length (1 for a scalar)


class Layout:
    """A ggml block struct (ggml-common.h), written once as its fields in declaration order.

    The block size is the sum of the fields, exactly as the C struct (no padding: ggml
    static_asserts that). Each Field keeps its C element width because big-endian GGUF files
    store multi-byte fields byte-swapped; `to_little` undoes that.
    """

    def __init__(self, c_name: str, *fields: tuple[str, int, int]):
        self.c_name = c_name
        self.fields: dict[str, Field] = {}
        offset = 0
        for name, item, count in fields:
            self.fields[name] = Field(name, offset, item, count)
            offset += item * count
        self.size = offset

    def col(self, buf: bytes, name: str, start: int = 0, width: int | None = None) -> bytes:
        """Field `name` of every block (or bytes [start, start+width) of it), concatenated."""
        f = self.fields[name]
        if width is None:
            width = f.item * f.count - start
        return column(buf, self.size, f.offset + start, width)

    def to_little(self, buf) -> bytes:
        """Swap every multi-byte C element of every block back to little-endian order."""
        out = bytearray(buf)
        bs = self.size
        for f in self.fields.values():
            if f.item == 1:
                continue
            for k in range(f.count):
                first = f.offset + k * f.item
                for i in range(f.item // 2):
                    a, b = first + i, first + f.item - 1 - i
                    out[a::bs], out[b::bs] = out[b::bs], out[a::bs]
        return bytes(out)


# memoryview.cast codes by unit size, for moving 8/4/2/1-byte units with strided copies.
_UNIT_CODES = {8: "Q", 4: "I", 2: "H", 1: "B"}


def byte_table(fn: Callable[[int], int]) -> bytes:
    """A 256-byte bytes.translate table: code -> fn(code) & 0xFF."""
    return bytes(fn(code) & 0xFF for code in range(256))


# The translate tables every decoder needs.
LOW_NIBBLE = byte_table(lambda b: b & 0x0F)
HIGH_NIBBLE = byte_table(lambda b: b >> 4)
CRUMBS = tuple(byte_table(lambda b, s=s: (b >> s) & 3) for s in (0, 2, 4, 6))  # 2-bit fields
BITS = tuple(byte_table(lambda b, s=s: (b >> s) & 1) for s in range(8))


@lru_cache(maxsize=None)
def _unit(*sizes: int) -> int:
    """Largest of 8/4/2/1 dividing every size: the widest strided copy we can use."""
    g = 0
    for size in sizes:
        g = gcd(g, size)
    return next(u for u in (8, 4, 2, 1) if g % u == 0)


def column(buf: bytes, block_bytes: int, start: int, width: int) -> bytes:
    """Bytes [start, start+width) of every block, concatenated."""
    if start == 0 and width == block_bytes:
        return bytes(buf)
    n_blocks = len(buf) // block_bytes
    u = _unit(block_bytes, start, width)
    copies = width // u
    if n_blocks <= copies:  # few blocks: slicing each is cheaper than `copies` strided passes
        return b"".join([buf[o:o + width] for o in range(start, len(buf), block_bytes)])
    out = bytearray(n_blocks * width)
    code = _UNIT_CODES[u]
    dst = memoryview(out).cast(code)
    src = memoryview(buf).cast(code)
    stride, first = block_bytes // u, start // u
    for k in range(copies):
        dst[k::copies] = src[first + k::stride]
    return bytes(out)


def interleave(*parts: tuple[bytes, int]) -> bytes:
    """Round-robin merge: chunk_0 bytes of part 0, chunk_1 bytes of part 1, ..., repeated.

    parts are (bytes, chunk) pairs that all hold the same number of chunks. This is how decoders
    put planes (low nibbles, high nibbles, 2-bit fields ...) back into element order.
    """
    chunks = [chunk for _, chunk in parts]
    round_bytes = sum(chunks)
    u = _unit(*chunks)
    code = _UNIT_CODES[u]
    out = bytearray(len(parts[0][0]) // chunks[0] * round_bytes)
    dst = memoryview(out).cast(code)
    stride = round_bytes // u
    base = 0
    for data, chunk in parts:
        src = memoryview(data).cast(code)
        n = chunk // u
        for k in range(n):
            dst[base + k::stride] = src[k::n]
        base += n
    return bytes(out)


def nibbles(packed: bytes, run: int, low: bytes = LOW_NIBBLE, high: bytes = HIGH_NIBBLE) -> bytes:
    """The ggml nibble order: `run` low nibbles of packed[0:run], then their `run` high nibbles,
    then the next run. `low`/`high` are translate tables, so codes can be mapped on the way."""
    return interleave((packed.translate(low), run), (packed.translate(high), run))


@lru_cache(maxsize=None)
def _bit_tables(value: int) -> tuple[bytes, ...]:
    return tuple(byte_table(lambda b, k=k: value if (b >> k) & 1 else 0) for k in range(8))


def spread_bits(packed: bytes, value: int = 1) -> bytes:
    """One byte per bit, least significant bit first: `value` where the bit is set, else 0."""
    return interleave(*((packed.translate(table), 1) for table in _bit_tables(value)))


def bit_or(a: bytes, b: bytes) -> bytes:
    """Bytewise a | b of two equal-length byte strings (through big ints: linear, in C)."""
    return (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(len(a), "little")


def repeat_each(values: Iterable, n: int):
    """v0 n times, v1 n times, ...: a per-group scale stretched over the group's elements."""
    return chain.from_iterable(map(repeat, values, repeat(n)))


def f16s(data: bytes) -> tuple[float, ...]:
    """Little-endian IEEE half floats (exact in a double: subnormals, inf and NaN included)."""
    return struct.unpack("<%de" % (len(data) // 2), data)


def f32s(data: bytes) -> tuple[float, ...]:
    return struct.unpack("<%df" % (len(data) // 4), data)


def u16s(data: bytes) -> tuple[int, ...]:
    return struct.unpack("<%dH" % (len(data) // 2), data)


def u32s(data: bytes) -> tuple[int, ...]:
    return struct.unpack("<%dI" % (len(data) // 4), data)


def signed(data: bytes) -> array:
    """Bytes read as int8."""
    return array("b", data)


def to_f32(values: Iterable[float]) -> list[float]:
    """Round each double to the nearest float32 (ties to even, overflow to +-inf)."""
    return array("f", values).tolist()
