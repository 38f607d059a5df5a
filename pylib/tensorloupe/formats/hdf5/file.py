"""The superblock (spec II.A) and the bounded reads every other module makes through `H5File`.

Addresses in the file are `size of offsets` bytes (2, 4 or 8), lengths `size of lengths` bytes,
both little-endian; an address of all one bits is "undefined". Every address is relative to the
base address and is checked against the file's size before it is read.
"""

from __future__ import annotations

import struct

from ...errors import ErrorFactory, FormatError, LimitError, TruncatedError, UnsupportedError
from ...source import ByteSource

FORMAT = "hdf5"
SIGNATURE = b"\x89HDF\r\n\x1a\n"
# The superblock may sit at 0, 512, 1024, 2048, ... (a user block before it, II.A); h5py writes
# it at 0 unless asked for a user block. Searched up to this offset.
MAX_SUPERBLOCK_AT = 1 << 20
SIZES = (2, 4, 8)
# II.A version 0 and 1: after the signature, the versions, sizes and B-tree parameters.
SUPER_V0 = struct.Struct("<BBBBBBBBHHI")
# II.A version 2 and 3: version, size of offsets, size of lengths, file consistency flags.
SUPER_V2 = struct.Struct("<BBBB")
MAX_READ = 64 << 20        # one header, heap or B-tree node read at once


class H5File:
    """The file's geometry (size of offsets and lengths, base address) and checked reads."""

    def __init__(self, source: ByteSource, name: str | None = None):
        self.source = source
        self.error = ErrorFactory(name or source.name, FORMAT)
        self.size = source.size
        self.offset_size = 8
        self.length_size = 8
        self.base = 0
        self.undefined = (1 << 64) - 1

    def fail(self, message: str, offset: int | None = None, cls=FormatError, **kw):
        return self.error(cls, message, offset=offset, **kw)

    def read(self, address: int, n: int, what: str) -> bytes:
        """`n` bytes at file address `address` (relative to the base), or an error naming `what`."""
        at = self.base + address
        if n > MAX_READ:
            raise self.fail(f"{what} declares {n:,} bytes, more than the {MAX_READ:,} tensorloupe "
                            "reads for one structure", at, LimitError)
        if address < 0 or n < 0 or at + n > self.size:
            raise self.fail(f"{what} lies outside the file", at, TruncatedError,
                            expected=f"{n:,} bytes at {at:,}", found=f"file size {self.size:,}")
        return self.source.read(at, n)

    def check(self, address: int, n: int, what: str) -> int:
        """The absolute offset of `n` bytes at `address`, checked to lie in the file."""
        at = self.base + address
        if address < 0 or n < 0 or at + n > self.size:
            raise self.fail(f"{what} lies outside the file", at, TruncatedError,
                            expected=f"{n:,} bytes at {at:,}", found=f"file size {self.size:,}")
        return at

    def defined(self, address: int) -> bool:
        return address != self.undefined


class Cursor:
    """Sequential little-endian fields of one structure already read (`data`, read from file
    address `at`): every field is checked to lie in it."""

    __slots__ = ("h5", "data", "at", "pos", "what")

    def __init__(self, h5: H5File, data: bytes, at: int, what: str, pos: int = 0):
        self.h5, self.data, self.at, self.pos, self.what = h5, data, at, pos, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.h5.fail(f"{self.what} ends early", self.at + self.pos, TruncatedError,
                               expected=f"{n:,} more bytes", found=f"{len(self.data) - self.pos:,}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def u8(self) -> int:
        return self.uint(1)

    def u16(self) -> int:
        return self.uint(2)

    def u32(self) -> int:
        return self.uint(4)

    def address(self) -> int:
        return self.uint(self.h5.offset_size)

    def length(self) -> int:
        return self.uint(self.h5.length_size)

    def skip(self, n: int) -> None:
        self.take(n)

    def align(self, base: int, to: int = 8) -> None:
        """Skip to the next multiple of `to` counted from `base` (v1 headers pad so)."""
        self.pos = min(len(self.data), base + -(-(self.pos - base) // to) * to)

    @property
    def left(self) -> int:
        return len(self.data) - self.pos


def superblock_at(source: ByteSource) -> int | None:
    """Where the signature is: 0, 512, 1024, ... (None if nowhere below MAX_SUPERBLOCK_AT)."""
    at = 0
    while at + len(SIGNATURE) <= min(source.size, MAX_SUPERBLOCK_AT):
        if source.read(at, len(SIGNATURE)) == SIGNATURE:
            return at
        at = 512 if at == 0 else at * 2
    return None


def open_file(source: ByteSource) -> tuple[H5File, int, dict]:
    """The file's geometry, the root group's object header address, and the superblock's facts."""
    h5 = H5File(source)
    at = superblock_at(source)
    if at is None:
        raise h5.fail("there is no HDF5 signature at byte 0 (or 512, 1024, ...)", 0,
                      expected=SIGNATURE.hex(" "), found=source.read(0, min(8, source.size)).hex(" "))
    head = Cursor(h5, source.read(at, min(256, source.size - at)), at, "the superblock",
                  len(SIGNATURE))
    version = head.u8()
    if version in (0, 1):
        head.pos -= 1
        (version, _free, _root, _r1, _shared, offsets, lengths, _r2, leaf_k, node_k,
         _flags) = SUPER_V0.unpack(head.take(SUPER_V0.size))
        _sizes(h5, offsets, lengths, at)
        if version == 1:
            head.skip(4)               # indexed storage internal node K, reserved
        h5.base = head.address()
        head.skip(h5.offset_size)      # free-space info address
        eof = head.address()
        head.skip(h5.offset_size)      # driver information block address
        head.skip(h5.offset_size)      # root entry: link name offset
        root = head.address()          # root entry: object header address
        facts = {"superblock": version, "group_leaf_k": leaf_k, "group_node_k": node_k}
    elif version in (2, 3):
        head.pos -= 1
        _version, offsets, lengths, _flags = SUPER_V2.unpack(head.take(SUPER_V2.size))
        _sizes(h5, offsets, lengths, at)
        h5.base = head.address()
        head.skip(h5.offset_size)      # superblock extension address
        eof = head.address()
        root = head.address()
        facts = {"superblock": version}
    else:
        raise h5.fail(f"superblock version {version} is not one the spec defines (0 to 3)", at + 8,
                      UnsupportedError)
    # A file with a user block may say base 0 and mean the superblock's own offset.
    h5.base = h5.base or at
    if h5.base > source.size:
        raise h5.fail("the base address lies outside the file", at, found=h5.base)
    if h5.defined(eof) and h5.base + eof > source.size:
        raise h5.fail(f"the superblock says the file is {h5.base + eof:,} bytes long but it has "
                      f"{source.size:,} (truncated download?)", at, TruncatedError)
    if not h5.defined(root):
        raise h5.fail("the superblock has no root group", at)
    return h5, root, facts


def _sizes(h5: H5File, offsets: int, lengths: int, at: int) -> None:
    if offsets not in SIZES or lengths not in SIZES:
        raise h5.fail("the superblock's size of offsets or lengths is not 2, 4 or 8", at + 13,
                      found=f"{offsets} and {lengths}")
    h5.offset_size, h5.length_size = offsets, lengths
    h5.undefined = (1 << (8 * offsets)) - 1
