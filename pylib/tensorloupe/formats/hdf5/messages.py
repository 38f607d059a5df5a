"""The header messages (spec IV.A.2) a group or dataset needs, decoded into named records.

Each decoder takes one message's bytes and returns a NamedTuple; anything it does not support
becomes an UnsupportedError naming the message and the value, which the reader turns into the
dataset's problem (the file still opens).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ...errors import FormatError, LimitError, UnsupportedError
from .file import Cursor, H5File

# Message types (IV.A.2.a to IV.A.2.x)
DATASPACE, LINK_INFO, DATATYPE, FILL_OLD, FILL, LINK, LAYOUT = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x08
FILTERS, ATTRIBUTE, SYMBOL_TABLE, ATTRIBUTE_INFO = 0x0B, 0x0C, 0x11, 0x15
MAX_RANK = 32                       # H5S_MAX_RANK
SOFT_LINK, EXTERNAL_LINK = 1, 64    # link types of a link message (IV.A.2.q; 0 is hard)
# Chunk index types of a version 4 layout message (IV.A.2.i)
CHUNK_INDEXES = {1: "single", 2: "implicit", 3: "fixed-array", 4: "extensible-array", 5: "btree2"}

# Datatype classes (IV.A.2.d)
FIXED, FLOAT, TIME, STRING, BITFIELD, OPAQUE, COMPOUND, REFERENCE, ENUM, VLEN, ARRAY = range(11)
CLASS_NAMES = ("fixed-point", "floating-point", "time", "string", "bitfield", "opaque",
               "compound", "reference", "enumerated", "variable-length", "array")
# IEEE binary floats by size: (exponent location, exponent size, mantissa size, bias)
IEEE = {2: (10, 5, 10, 15, "F16"), 4: (23, 8, 23, 127, "F32"), 8: (52, 11, 52, 1023, "F64")}
INTS = {(1, True): "I8", (1, False): "U8", (2, True): "I16", (2, False): "U16",
        (4, True): "I32", (4, False): "U32", (8, True): "I64", (8, False): "U64"}


class Dataspace(NamedTuple):
    shape: tuple[int, ...] | None      # None: a null dataspace (no elements at all)
    maxshape: tuple | None = None      # each dimension's maximum (None: unlimited), if stored


class Datatype(NamedTuple):
    kind: int             # the class
    size: int             # bytes per element
    dtype: str | None     # our dtype name, or None when we cannot decode it
    big_endian: bool
    why: str | None       # why dtype is None
    text: str = ""        # for strings: "fixed" or "vlen", and the character set


class Layout(NamedTuple):
    kind: str                          # "compact", "contiguous", "chunked", "virtual"
    address: int | None                # contiguous data, or the chunk index
    size: int                          # contiguous data bytes
    data: bytes                        # compact raw data
    chunk: tuple[int, ...] = ()        # chunk dimensions (elements; the element size dropped)
    index: str = "btree1"              # chunk index type
    index_info: tuple = ()             # index parameters (fixed array page bits, ...)
    single_filtered: tuple = ()        # single chunk index: (filtered size, filter mask)
    edge_unfiltered: bool = False      # v4 flag: partial edge chunks are stored unfiltered
    data_at: int = 0                   # compact: where its data starts in the message


class Filter(NamedTuple):
    id: int
    name: str
    optional: bool
    values: tuple[int, ...]


def dataspace(h5: H5File, data: bytes, at: int) -> Dataspace:
    c = Cursor(h5, data, at, "a dataspace message")
    version, rank, flags = c.u8(), c.u8(), c.u8()
    if version == 1:
        c.skip(5)
        kind = 1 if rank else 0
    elif version == 2:
        kind = c.u8()
    else:
        raise h5.fail(f"a dataspace message has version {version}", at, UnsupportedError)
    if rank > MAX_RANK:
        raise h5.fail(f"a dataspace has {rank:,} dimensions", at, LimitError,
                      expected=f"at most {MAX_RANK:,}")
    if kind == 2:
        return Dataspace(None)
    shape = tuple(c.length() for _ in range(rank))
    if not flags & 0x01:
        return Dataspace(shape)
    unlimited = (1 << 8 * h5.length_size) - 1
    return Dataspace(shape, tuple(None if m == unlimited else m for m in (c.length() for _ in range(rank))))


def datatype(h5: H5File, data: bytes, at: int) -> Datatype:
    c = Cursor(h5, data, at, "a datatype message")
    head = c.u8()
    kind, version = head & 0x0F, head >> 4
    bits = c.uint(3)
    size = c.u32()
    name = CLASS_NAMES[kind] if kind < len(CLASS_NAMES) else f"class {kind}"
    if version not in (1, 2, 3, 4, 5):   # 5: HDF5 2.0 (h5py 3.16 writes it with libver="latest")
        raise h5.fail(f"a datatype message has version {version}", at, UnsupportedError)
    if kind == FIXED:
        big, signed = bool(bits & 1), bool(bits & 0x08)
        offset, precision = c.u16(), c.u16()
        dtype = INTS.get((size, signed))
        if dtype is None or offset != 0 or precision != 8 * size:
            return Datatype(kind, size, None, big, f"a {size:,}-byte integer with {precision:,} bits "
                            f"at bit {offset:,} has no dtype here")
        return Datatype(kind, size, dtype, big, None)
    if kind == FLOAT:
        order = (bits & 1) | ((bits >> 5) & 2)      # bits 0 and 6: 0 LE, 1 BE, 2 VAX
        offset, precision = c.u16(), c.u16()
        e_at, e_size, m_at, m_size, bias = c.u8(), c.u8(), c.u8(), c.u8(), c.u32()
        sign = (bits >> 8) & 0xFF
        ieee = IEEE.get(size)
        if order == 2 or ieee is None or (e_at, e_size, m_size, bias, sign) != (
                ieee[0], ieee[1], ieee[2], ieee[3], 8 * size - 1) or m_at or offset or \
                precision != 8 * size:
            return Datatype(kind, size, None, order == 1, f"a {size:,}-byte float that is not IEEE "
                            f"binary{8 * size} (exponent {e_size} bits at {e_at}, mantissa "
                            f"{m_size} bits, bias {bias:,}{', VAX order' if order == 2 else ''})")
        return Datatype(kind, size, ieee[4], order == 1, None)
    if kind == ENUM:
        # h5py writes numpy bool as an enum of int8 {FALSE: 0, TRUE: 1}
        base = datatype(h5, data[c.pos:], at + c.pos)
        members = bits & 0xFFFF
        c.pos = len(data)
        if base.dtype in ("I8", "U8") and members == 2:
            return Datatype(kind, size, "BOOL", False, None)
        return Datatype(kind, size, None, False, f"an enumeration of {members} values over "
                        f"{base.dtype or 'an unknown type'} has no dtype here")
    if kind == STRING:
        return Datatype(kind, size, None, False, "strings are not tensors", "fixed")
    if kind == VLEN:
        is_string = (bits & 0x0F) == 1
        return Datatype(kind, size, None, False, "variable-length data is not a tensor",
                        "vlen" if is_string else "")
    return Datatype(kind, size, None, False, f"the {name} datatype has no dtype here")


def layout(h5: H5File, data: bytes, at: int) -> Layout:
    c = Cursor(h5, data, at, "a data layout message")
    version = c.u8()
    if version in (1, 2):
        rank, kind = c.u8(), c.u8()
        c.skip(5)
        address = c.address() if kind != 0 else None
        dims = tuple(c.u32() for _ in range(rank))
        if kind == 0:
            n = c.u32()
            return Layout("compact", None, n, c.take(n), data_at=c.pos - n)
        if kind == 1:
            return Layout("contiguous", address, math.prod(dims), b"")
        c.skip(4)
        return Layout("chunked", address, 0, b"", dims[:-1])
    if version not in (3, 4, 5):
        raise h5.fail(f"a data layout message has version {version}", at, UnsupportedError)
    # 3 (HDF5 1.6+); 4 (1.10+, libver="latest"); 5 (2.0, for filtered chunks) has 4's fields
    kind = c.u8()
    if kind == 0:
        n = c.u16()
        return Layout("compact", None, n, c.take(n), data_at=c.pos - n)
    if kind == 1:
        return Layout("contiguous", c.address(), c.length(), b"")
    if kind == 2 and version == 3:
        rank = c.u8()
        address = c.address()
        dims = tuple(c.u32() for _ in range(rank))
        return Layout("chunked", address, 0, b"", dims[:-1])
    if kind == 3 and version > 3:
        return Layout("virtual", None, 0, b"")
    if kind != 2:
        raise h5.fail(f"a version {version} layout message has class {kind}", at, UnsupportedError)
    flags, rank, width = c.u8(), c.u8(), c.u8()
    dims = tuple(c.uint(width) for _ in range(rank))
    index = c.u8()
    single, info = (), ()
    if index == 1 and flags & 0x02:
        single = (c.length(), c.u32())
    elif index == 3:
        info = (c.u8(),)
    elif index == 4:
        info = tuple(c.u8() for _ in range(5))
    elif index == 5:
        info = (c.u32(), c.u8(), c.u8())
    if index not in CHUNK_INDEXES:
        raise h5.fail(f"a layout message names chunk index type {index}", at, UnsupportedError)
    return Layout("chunked", c.address(), 0, b"", dims[:-1], CHUNK_INDEXES[index], info, single,
                  bool(flags & 0x01))


def filters(h5: H5File, data: bytes, at: int) -> list[Filter]:
    c = Cursor(h5, data, at, "a filter pipeline message")
    version, count = c.u8(), c.u8()
    if version == 1:
        c.skip(6)
    elif version != 2:
        raise h5.fail(f"a filter pipeline message has version {version}", at, UnsupportedError)
    out = []
    for _ in range(count):
        fid = c.u16()
        name_length = c.u16() if version == 1 or fid >= 256 else 0
        flags, values = c.u16(), c.u16()
        raw = c.take(name_length)      # v1: the length counts the padding to 8 bytes
        name = raw.split(b"\0", 1)[0].decode("latin-1")
        out.append(Filter(fid, name, bool(flags & 1), tuple(c.u32() for _ in range(values))))
        if version == 1 and values % 2:
            c.skip(4)
    return out


def fill_value(h5: H5File, data: bytes, at: int) -> bytes | None:
    """The fill value's bytes if one is defined (new fill value message, IV.A.2.f)."""
    c = Cursor(h5, data, at, "a fill value message")
    version = c.u8()
    if version in (1, 2):
        c.skip(2)
        defined = c.u8()
        if version == 1 or defined:
            n = c.u32() if c.left >= 4 else 0
            return c.take(n) if n else None
        return None
    if version == 3:
        flags = c.u8()
        if flags & 0x20:
            return c.take(c.u32())
        return None
    raise h5.fail(f"a fill value message has version {version}", at, UnsupportedError)


class Link(NamedTuple):
    name: str
    address: int | None        # a hard link's object header; None for soft and external links
    kind: str                  # "hard", "soft", "external", or "type N"
    target: str = ""           # soft: the path it names; external: the object's path there
    file: str = ""             # external: the file it names


def link(h5: H5File, data: bytes, at: int) -> Link:
    c = Cursor(h5, data, at, "a link message")
    version, flags = c.u8(), c.u8()
    if version != 1:
        raise h5.fail(f"a link message has version {version}", at, UnsupportedError)
    kind = c.u8() if flags & 0x08 else 0
    if flags & 0x04:
        c.skip(8)
    if flags & 0x10:
        c.skip(1)
    name = c.take(c.uint(1 << (flags & 0x03)))
    text = _utf8(h5, name, at, "a link name")
    if kind == 0:
        return Link(text, c.address(), "hard")
    if kind == SOFT_LINK:          # a length and the path (IV.A.2.q)
        return Link(text, None, "soft", _utf8(h5, c.take(c.u16()), at, "a soft link's path"))
    if kind == EXTERNAL_LINK:      # a length, then version/flags, file name NUL, path NUL
        info = c.take(c.u16())
        parts = info[1:].split(b"\0")
        if len(info) < 1 or len(parts) < 2:
            raise h5.fail(f"external link {text!r} has no file name and path", at)
        return Link(text, None, "external", _utf8(h5, parts[1], at, "an external link's path"),
                    _utf8(h5, parts[0], at, "an external link's file name"))
    return Link(text, None, f"type {kind}")


def link_info(h5: H5File, data: bytes, at: int) -> tuple[int, int]:
    """(fractal heap address, name index v2 B-tree address) of a group's dense links."""
    c = Cursor(h5, data, at, "a link info message")
    version, flags = c.u8(), c.u8()
    if version != 0:
        raise h5.fail(f"a link info message has version {version}", at, UnsupportedError)
    if flags & 0x01:
        c.skip(8)
    return c.address(), c.address()


def attribute_heap(h5: H5File, data: bytes, at: int) -> tuple[int, int]:
    """(fractal heap address, name index v2 B-tree address) of an attribute info message
    (IV.A.2.v): defined when the object's attributes are kept densely."""
    c = Cursor(h5, data, at, "an attribute info message")
    _version, flags = c.u8(), c.u8()
    if flags & 0x01:
        c.skip(2)
    return c.address(), c.address()


def symbol_table(h5: H5File, data: bytes, at: int) -> tuple[int, int]:
    """(v1 B-tree address, local heap address) of an old-style group."""
    c = Cursor(h5, data, at, "a symbol table message")
    return c.address(), c.address()


def _utf8(h5: H5File, raw: bytes, at: int, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise h5.fail(f"{what} is not UTF-8", at + e.start, FormatError) from e
