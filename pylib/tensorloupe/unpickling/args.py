"""Readers for the arguments of pickle opcodes, one per `pickletools` argument kind.

Each reader is `(data, pos) -> (value, position after the argument)`. Every declared length is
checked against the bytes that remain before anything is sliced or allocated; a length larger
than any pickle we accept is a LimitError (a resource bomb), a shorter shortfall a TruncatedError.
"""

from __future__ import annotations

import codecs
import struct
from typing import Callable

from ..errors import FormatError, LimitError, TruncatedError
from .objects import LIMITS


def _fixed(fmt: str):
    layout = struct.Struct(fmt)
    unpack, size = layout.unpack_from, layout.size

    def read(data, pos):
        return unpack(data, pos)[0], pos + size
    return read


def _uint1(data, pos):
    return data[pos], pos + 1


def _counted(length_format: str, convert):
    """A length (struct format) followed by that many bytes, given to convert."""
    layout = struct.Struct(length_format)
    unpack, size = layout.unpack_from, layout.size

    def read(data, pos):
        n = unpack(data, pos)[0]
        pos += size
        if n < 0 or n > len(data) - pos:
            cls = LimitError if n > LIMITS.max_bytes else TruncatedError
            raise cls(f"a pickle argument declares {n:,} bytes but only {len(data) - pos:,} remain",
                      offset=pos, expected=f"at most {len(data) - pos:,} bytes", found=n)
        return convert(data[pos:pos + n]), pos + n
    return read


def _line(data, pos):
    end = data.find(b"\n", pos)
    if end < 0:
        raise TruncatedError("a text argument has no terminating newline", offset=pos)
    return data[pos:end], end + 1


def _lined(convert):
    def read(data, pos):
        text, pos = _line(data, pos)
        return convert(text), pos
    return read


_BOOLS = {b"00": False, b"01": True}


def _decimal_short(text):
    # Protocol 0 spells True and False as INT 00 and 01 (pickletools reads GET/PUT this way too).
    return _BOOLS[text] if text in _BOOLS else int(text)


def _decimal_long(text):
    return int(text[:-1] if text.endswith(b"L") else text)


def _quoted(text):
    if len(text) < 2 or text[0] != text[-1] or text[:1] not in (b"'", b'"'):
        raise FormatError("the STRING argument is not quoted")
    return _py2_string(codecs.escape_decode(text[1:-1])[0])


def _py2_string(raw: bytes):
    # A Python 2 str: torch.load decodes them as UTF-8; keep bytes where that fails.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _signed(raw: bytes) -> int:
    return int.from_bytes(raw, "little", signed=True)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogatepass")


def _pair(data, pos):
    module, pos = _line(data, pos)
    name, pos = _line(data, pos)
    return (module.decode("utf-8"), name.decode("utf-8")), pos


READERS: dict[str, Callable] = {
    "uint1": _uint1, "uint2": _fixed("<H"), "int4": _fixed("<i"), "uint4": _fixed("<I"),
    "uint8": _fixed("<Q"), "float8": _fixed(">d"),
    "long1": _counted("<B", _signed), "long4": _counted("<i", _signed),
    "string1": _counted("<B", _py2_string), "string4": _counted("<i", _py2_string),
    "bytes1": _counted("<B", bytes), "bytes4": _counted("<I", bytes),
    "bytes8": _counted("<Q", bytes), "bytearray8": _counted("<Q", bytearray),
    "unicodestring1": _counted("<B", _text), "unicodestring4": _counted("<I", _text),
    "unicodestring8": _counted("<Q", _text),
    "decimalnl_short": _lined(_decimal_short), "decimalnl_long": _lined(_decimal_long),
    "floatnl": _lined(float), "stringnl": _lined(_quoted),
    "stringnl_noescape": _lined(lambda b: b.decode("ascii")),
    "unicodestringnl": _lined(lambda b: str(b, "raw-unicode-escape")),
    "stringnl_noescape_pair": _pair,
}
