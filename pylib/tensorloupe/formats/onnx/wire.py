"""The protobuf wire format, read field by field from a byte source, for the ONNX reader.

Spec: protobuf's "Encoding" page. A message is a sequence of fields, each a varint key
(field number << 3 | wire type) and a value: a varint (type 0), 8 bytes (1), a varint length and
that many bytes (2: strings, bytes, embedded messages, packed repeated numbers) or 4 bytes (5).
Groups (3, 4) are deprecated and never written by ONNX: refused.

`fields(span)` walks one message and yields its fields; a length-delimited value is returned as
its (offset, length) in the file, never read, so an initializer's raw_data is skipped by its
length. Reads go through a window over the source: fields that follow each other come from one
read, a skip past the window costs one small read where the next field starts. Every length is
checked against the end of its enclosing message before it is trusted; a varint longer than 10
bytes, a length past the end, and a walk of more than MAX_FIELDS fields are errors.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from ...errors import FormatError, LimitError, TruncatedError

VARINT, FIXED64, LENGTH, GROUP_START, GROUP_END, FIXED32 = 0, 1, 2, 3, 4, 5
MAX_VARINT_BYTES = 10
WINDOW = 512                   # bytes read where a walk resumes after a skipped value (an
                               # initializer's dims, type and name; a longer one reads again)
MAX_FIELDS = 20_000_000        # fields walked in one file (a 2 GB graph has a few million)
FIXED = {FIXED64: struct.Struct("<Q"), FIXED32: struct.Struct("<I")}


class Span(NamedTuple):
    """A length-delimited value: where its bytes are in the file."""
    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length


class Field(NamedTuple):
    number: int
    wire: int
    value: int | Span       # a number (types 0, 1, 5) or a Span (type 2)
    at: int                 # the offset of the field's key (for messages)


class Wire:
    """Sequential reads of a message tree out of one source, through a moving window."""

    def __init__(self, source, error):
        self.source, self.error = source, error
        self.start, self.data = 0, b""
        self.walked = 0

    def _window(self, offset: int, n: int) -> memoryview:
        """At least `n` bytes at `offset` (the caller has checked they are inside the file)."""
        if not (self.start <= offset and offset + n <= self.start + len(self.data)):
            want = min(self.source.size - offset, max(n, WINDOW))
            # The first window is a cached read; later ones pass straight through (read_data):
            # rounding each to the block cache's 64 KiB would read most of a file of inline data.
            read = self.source.read if not self.data else self.source.read_data
            self.start, self.data = offset, read(offset, want)
        at = offset - self.start
        return memoryview(self.data)[at:at + n]

    def bytes(self, span: Span, limit: int, what: str) -> bytes:
        """A small length-delimited value's bytes (a name, a string), at most `limit`."""
        if span.length > limit:
            raise self.error(LimitError, f"{what} is longer than the limit", offset=span.offset,
                             expected=f"at most {limit:,} bytes", found=span.length)
        return bytes(self._window(span.offset, span.length))

    def text(self, span: Span, limit: int, what: str) -> str:
        raw = self.bytes(span, limit, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(FormatError, f"{what} is not valid UTF-8",
                             offset=span.offset + e.start) from e

    def varint(self, offset: int, end: int) -> tuple[int, int]:
        """(value, offset after it), the varint inside [offset, end)."""
        n = min(MAX_VARINT_BYTES, end - offset)
        if n <= 0:
            raise self.error(TruncatedError, "a message ends inside a field", offset=offset,
                             expected="a varint", found="the end of the message")
        window = self._window(offset, n)
        value = shift = 0
        for i, byte in enumerate(window):
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value & 0xFFFF_FFFF_FFFF_FFFF, offset + i + 1
            shift += 7
        if n < MAX_VARINT_BYTES:
            raise self.error(TruncatedError, "a varint runs past the end of its message",
                             offset=offset, expected="a byte below 0x80", found=f"{n:,} bytes")
        raise self.error(FormatError, "a varint is longer than 10 bytes", offset=offset)

    def fields(self, span: Span) -> Iterator[Field]:
        """The fields of the message in `span`, in file order."""
        at, end = span.offset, span.end
        while at < end:
            self.walked += 1
            if self.walked > MAX_FIELDS:
                raise self.error(LimitError, "the file has more protobuf fields than the limit",
                                 offset=at, expected=f"at most {MAX_FIELDS:,}")
            key_at = at
            key, at = self.varint(at, end)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise self.error(FormatError, "a field has number 0", offset=key_at)
            if wire == VARINT:
                value, at = self.varint(at, end)
            elif wire == LENGTH:
                length, at = self.varint(at, end)
                if length > end - at:
                    raise self.error(TruncatedError, f"field {number} is {length:,} bytes long, "
                                     "past the end of its message", offset=key_at,
                                     expected=f"at most {end - at:,} bytes", found=length)
                value = Span(at, length)
                at += length
            elif wire in FIXED:
                size = FIXED[wire].size
                if size > end - at:
                    raise self.error(TruncatedError, f"field {number} runs past the end of its "
                                     "message", offset=key_at, expected=f"{size:,} bytes",
                                     found=end - at)
                (value,) = FIXED[wire].unpack(self._window(at, size))
                at += size
            else:
                raise self.error(FormatError, f"field {number} has wire type {wire}, which "
                                 "ONNX never writes (groups are deprecated)", offset=key_at,
                                 expected="wire type 0, 1, 2 or 5", found=wire)
            yield Field(number, wire, value, key_at)

    def packed_varints(self, span: Span, limit: int, what: str) -> list[int]:
        """The varints of a packed repeated field, at most `limit` of them."""
        out, at = [], span.offset
        while at < span.end:
            if len(out) >= limit:
                raise self.error(LimitError, f"{what} has more values than the limit",
                                 offset=span.offset, expected=f"at most {limit:,}")
            value, at = self.varint(at, span.end)
            out.append(value)
        return out


def signed64(value: int) -> int:
    """An int64 field's value (varints carry its two's complement in 64 bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value
