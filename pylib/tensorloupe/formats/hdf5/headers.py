"""Object headers (spec IV.A.1): the messages that describe one group or dataset.

Version 1: version, reserved, message count (2), reference count (4), header size (4), padded
to 8 bytes; each message is type (2), size (2), flags (1), 3 reserved bytes, then its data, all
8-byte aligned. Version 2 starts "OHDR", version 2, flags, optional times and attribute phase
change values, then chunk 0's size in 1, 2, 4 or 8 bytes (flags bits 0-1); each message is
type (1), size (2), flags (1), a creation order (2) if flags bit 2, then its data; a checksum
ends each block. A continuation message (type 0x10) names another block of messages ("OCHK" in
version 2). The blocks form a chain: each is read once, and their number is capped.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ...errors import LimitError, UnsupportedError
from .file import Cursor, H5File

V1_PREFIX = struct.Struct("<BBHII")        # version, reserved, messages, references, size
V1_MESSAGE = struct.Struct("<HHB3x")       # type, size, flags
V2_SIGNATURE, V2_CONTINUATION = b"OHDR", b"OCHK"
CONTINUATION = 0x10
SHARED = 0x02                              # message flag: the data is a shared-message reference
MAX_BLOCKS = 256                           # continuation blocks of one header
MAX_MESSAGES = 65536                       # messages of one header
CHECKSUM = 4
# v2 flags (IV.A.1.b): bits 0-1 size of chunk 0's length, 2 attribute creation order tracked,
# 4 attribute phase change values stored, 5 times stored
V2_TIMES, V2_PHASE, V2_ORDER = 0x20, 0x10, 0x04


class Message(NamedTuple):
    type: int
    flags: int
    data: bytes
    at: int          # file offset of the message's data (for errors)


def read_header(h5: H5File, address: int, what: str) -> list[Message]:
    """Every message of the object header at `address`, continuation blocks followed."""
    start = h5.check(address, 4, f"the object header of {what}")
    first = h5.read(address, min(512, h5.size - start), f"the object header of {what}")
    if first[:4] == V2_SIGNATURE:
        return _v2(h5, address, what)
    if first[0] != 1:
        raise h5.fail(f"the object header of {what} has version {first[0]}; the spec defines 1 "
                      "and 2 (\"OHDR\")", start, UnsupportedError)
    return _v1(h5, address, what)


def _v1(h5: H5File, address: int, what: str) -> list[Message]:
    prefix = Cursor(h5, h5.read(address, V1_PREFIX.size, f"the object header of {what}"),
                    h5.base + address, f"the object header of {what}")
    _version, _r, count, _refs, size = V1_PREFIX.unpack(prefix.take(V1_PREFIX.size))
    if count > MAX_MESSAGES:
        raise h5.fail(f"the object header of {what} declares {count:,} messages", h5.base + address,
                      LimitError, expected=f"at most {MAX_MESSAGES:,}")
    blocks = [(address + V1_PREFIX.size + 4, size)]      # the prefix is padded to 16 bytes
    messages: list[Message] = []
    seen = set()
    while blocks:
        block, length = blocks.pop(0)
        _chain(h5, seen, block, what)
        data = h5.read(block, length, f"an object header block of {what}")
        c = Cursor(h5, data, h5.base + block, f"the object header of {what}")
        while c.left >= V1_MESSAGE.size:
            kind, n, flags = V1_MESSAGE.unpack(c.take(V1_MESSAGE.size))
            at = c.at + c.pos
            body = c.take(n)
            c.align(0)
            messages.append(Message(kind, flags, body, at))
            if kind == CONTINUATION:
                blocks.append(_continuation(h5, body, at))
            if len(messages) > MAX_MESSAGES:
                raise h5.fail(f"the object header of {what} holds more than {MAX_MESSAGES:,} "
                              "messages", at, LimitError)
    return messages


def _v2(h5: H5File, address: int, what: str) -> list[Message]:
    head = Cursor(h5, h5.read(address, min(64, h5.size - h5.base - address), "an object header"),
                  h5.base + address, f"the object header of {what}", 4)
    version, flags = head.u8(), head.u8()
    if version != 2:
        raise h5.fail(f"the \"OHDR\" object header of {what} has version {version}, not 2",
                      head.at + 4, UnsupportedError)
    if flags & V2_TIMES:
        head.skip(16)
    if flags & V2_PHASE:
        head.skip(4)
    length = head.uint(1 << (flags & 0x03))
    blocks = [(address + head.pos, length, address)]
    messages: list[Message] = []
    seen = set()
    while blocks:
        block, size, signed_at = blocks.pop(0)
        _chain(h5, seen, block, what)
        data = h5.read(block, size, f"an object header block of {what}")
        _verify(h5, signed_at, block + size, what)
        c = Cursor(h5, data, h5.base + block, f"the object header of {what}")
        entry = 4 + (2 if flags & V2_ORDER else 0)
        while c.left >= entry:
            kind, n, mflags = c.u8(), c.u16(), c.u8()
            if flags & V2_ORDER:
                c.skip(2)
            at = c.at + c.pos
            body = c.take(n)
            messages.append(Message(kind, mflags, body, at))
            if kind == CONTINUATION:
                where, n_bytes = _continuation(h5, body, at)
                signature = h5.read(where, 4, f"a continuation block of {what}")
                if signature != V2_CONTINUATION or n_bytes < 4 + CHECKSUM:
                    raise h5.fail(f"a continuation block of {what} does not start with \"OCHK\"",
                                  h5.base + where, expected="OCHK", found=signature.hex(" "))
                blocks.append((where + 4, n_bytes - 4 - CHECKSUM, where))
            if len(messages) > MAX_MESSAGES:
                raise h5.fail(f"the object header of {what} holds more than {MAX_MESSAGES:,} "
                              "messages", at, LimitError)
    return messages


def _continuation(h5: H5File, body: bytes, at: int) -> tuple[int, int]:
    c = Cursor(h5, body, at, "a continuation message")
    return c.address(), c.length()


def _chain(h5: H5File, seen: set, block: int, what: str) -> None:
    if block in seen:
        raise h5.fail(f"the object header of {what} continues into a block it already read (a "
                      "cycle)", h5.base + block)
    seen.add(block)
    if len(seen) > MAX_BLOCKS:
        raise h5.fail(f"the object header of {what} has more than {MAX_BLOCKS:,} continuation "
                      "blocks", h5.base + block, LimitError)


def _verify(h5: H5File, start: int, end: int, what: str) -> None:
    """The Jenkins lookup3 checksum that ends a v2 block (spec III.A: 'Checksum')."""
    data = h5.read(start, end - start + CHECKSUM, f"an object header block of {what}")
    stated = int.from_bytes(data[-CHECKSUM:], "little")
    if lookup3(data[:-CHECKSUM]) != stated:
        raise h5.fail(f"the object header of {what} fails its checksum (corrupted file?)",
                      h5.base + end, expected=f"{stated:#010x}",
                      found=f"{lookup3(data[:-CHECKSUM]):#010x}")


MASK = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & MASK


def lookup3(data: bytes, initval: int = 0) -> int:
    """Bob Jenkins' hashlittle (lookup3.c), the checksum of HDF5's v2 structures (H5checksum.c
    H5_checksum_lookup3)."""
    length = len(data)
    a = b = c = (0xDEADBEEF + length + initval) & MASK
    # every 12-byte block but the last (which the final mix takes), unpacked at once: paged
    # chunk indexes checksum pages of 8-20 KB, so this loop is most of a page's cost
    blocks = (length - 1) // 12 if length else 0
    words = struct.unpack_from(f"<{3 * blocks}I", data)
    M = MASK
    for j in range(0, 3 * blocks, 3):
        a = (a + words[j]) & M
        b = (b + words[j + 1]) & M
        c = (c + words[j + 2]) & M
        a = (a - c) & M; a ^= ((c << 4) | (c >> 28)) & M; c = (c + b) & M
        b = (b - a) & M; b ^= ((a << 6) | (a >> 26)) & M; a = (a + c) & M
        c = (c - b) & M; c ^= ((b << 8) | (b >> 24)) & M; b = (b + a) & M
        a = (a - c) & M; a ^= ((c << 16) | (c >> 16)) & M; c = (c + b) & M
        b = (b - a) & M; b ^= ((a << 19) | (a >> 13)) & M; a = (a + c) & M
        c = (c - b) & M; c ^= ((b << 4) | (b >> 28)) & M; b = (b + a) & M
    i = 12 * blocks
    tail = data[i:] + bytes(12 - (length - i))
    if length - i == 0:
        return c
    a = (a + int.from_bytes(tail[0:4], "little")) & MASK
    b = (b + int.from_bytes(tail[4:8], "little")) & MASK
    c = (c + int.from_bytes(tail[8:12], "little")) & MASK
    c ^= b; c = (c - _rot(b, 14)) & MASK
    a ^= c; a = (a - _rot(c, 11)) & MASK
    b ^= a; b = (b - _rot(a, 25)) & MASK
    c ^= b; c = (c - _rot(b, 16)) & MASK
    a ^= c; a = (a - _rot(c, 4)) & MASK
    b ^= a; b = (b - _rot(a, 14)) & MASK
    c ^= b; c = (c - _rot(b, 24)) & MASK
    return c
