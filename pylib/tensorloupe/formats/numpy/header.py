"""The .npy header (numpy/lib/format.py, "Format Version 1.0" to "3.0"), parsed without eval.

    b"\\x93NUMPY", major, minor (1.0, 2.0 or 3.0), the header length (uint16 in 1.0, uint32 after),
    then the header: a Python literal dict {'descr': ..., 'fortran_order': ..., 'shape': (...)},
    padded with spaces to a 64-byte boundary and ended by a newline (latin-1 before 3.0, UTF-8 in 3.0).

numpy writes the dict with `repr`; `literal` reads that subset (strings, ints, True/False/None,
tuples, lists, dicts) with a tokenizer and a recursive descent bounded in depth and size: no eval,
no ast. A structured descr (a list of fields) is listed as such, not decoded.
"""

from __future__ import annotations

import math
import re
import struct
from typing import NamedTuple

from ...errors import FormatError, LimitError, TruncatedError

MAGIC = b"\x93NUMPY"
LENGTHS = {1: struct.Struct("<H"), 2: struct.Struct("<I"), 3: struct.Struct("<I")}
PREFIX = len(MAGIC) + 2
MAX_HEADER = 1 << 16        # numpy.load refuses headers above 10,000 bytes unless told otherwise
MAX_DEPTH = 16
MAX_DIMS = 64
# (kind, itemsize) of a descr -> our dtype (dtypes/); 'O' is an object array (a pickle)
DESCRS = {("b", 1): "BOOL", ("u", 1): "U8", ("i", 1): "I8", ("u", 2): "U16", ("i", 2): "I16",
          ("u", 4): "U32", ("i", 4): "I32", ("u", 8): "U64", ("i", 8): "I64", ("f", 2): "F16",
          ("f", 4): "F32", ("f", 8): "F64", ("c", 8): "C64", ("c", 16): "C128"}
DESCR = re.compile(r"^([<>|=])([a-zA-Z])(\d+)$")
OBJECT = "O"
TOKEN = re.compile(r"""\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?P<int>-?\d+)L?|"""
                   r"""(?P<name>True|False|None)|(?P<punct>[{}()\[\],:]))""", re.S)
NAMES = {"True": True, "False": False, "None": None}
ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "0": "\0"}


class Header(NamedTuple):
    descr: object               # '<f4', or a structured list
    fortran_order: bool
    shape: tuple[int, ...]
    data_offset: int            # bytes from the start of the .npy to its first element


def header_length(prefix: bytes, error) -> tuple[int, int]:
    """(version, header bytes) from the first 10 or 12 bytes."""
    if len(prefix) < PREFIX + 2 or prefix[:len(MAGIC)] != MAGIC:
        raise error(FormatError, "this is not a .npy file (it does not start with \\x93NUMPY)",
                    offset=0, found=prefix[:8].hex(" "))
    major, minor = prefix[6], prefix[7]
    if major not in LENGTHS or minor != 0:
        raise error(FormatError, f"unknown .npy format version {major}.{minor}", offset=6,
                    expected="1.0, 2.0 or 3.0", found=f"{major}.{minor}")
    size = LENGTHS[major]
    if len(prefix) < PREFIX + size.size:
        raise error(TruncatedError, "the file ends inside the .npy header length", offset=PREFIX)
    (n,) = size.unpack_from(prefix, PREFIX)
    if n > MAX_HEADER:
        raise error(LimitError, "the .npy header is longer than the limit", offset=PREFIX,
                    expected=f"at most {MAX_HEADER:,} bytes", found=n)
    return major, n


def parse(prefix: bytes, raw: bytes, error) -> Header:
    """The header, from its prefix (magic, version, length) and its `raw` bytes."""
    major, n = header_length(prefix, error)
    start = PREFIX + LENGTHS[major].size
    try:
        text = raw.decode("utf-8" if major == 3 else "latin-1")
    except UnicodeDecodeError as e:
        raise error(FormatError, "the .npy header is not valid UTF-8", offset=start + e.start) from e
    value = literal(text, error, start)
    if not isinstance(value, dict) or set(value) != {"descr", "fortran_order", "shape"}:
        raise error(FormatError, "the .npy header is not the dict numpy writes", offset=start,
                    expected="keys descr, fortran_order, shape", found=repr(text[:120]))
    shape, order = value["shape"], value["fortran_order"]
    if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        raise error(FormatError, "the .npy shape is not a tuple of sizes", offset=start,
                    found=repr(shape)[:120])
    if len(shape) > MAX_DIMS:
        raise error(LimitError, f"the .npy shape has {len(shape):,} dimensions", offset=start,
                    expected=f"at most {MAX_DIMS:,}")
    if type(order) is not bool:
        raise error(FormatError, "fortran_order is not True or False", offset=start,
                    found=repr(order)[:40])
    return Header(value["descr"], order, shape, start + n)


def dtype_of(descr) -> tuple[str | None, bool, int, str | None]:
    """(our dtype or None, big-endian, itemsize, why not) for a descr."""
    if not isinstance(descr, str):
        return None, False, 0, "a structured dtype (fields), which tensorloupe does not decode"
    if descr in ("|O", "O", "<O", ">O", "=O") or descr.endswith(("O4", "O8")):
        return OBJECT, False, 0, None
    found = DESCR.match(descr)
    if not found:
        return None, False, 0, f"dtype {descr!r} is not one tensorloupe reads"
    order, kind, size = found.group(1), found.group(2), int(found.group(3))
    dtype = DESCRS.get((kind, size))
    if dtype is None:
        return None, False, size, f"dtype {descr!r} (text, dates, raw bytes or long double) has no numbers to show"
    return dtype, order == ">" and size > 1, size, None


def strides_of(shape: tuple[int, ...], fortran: bool) -> tuple[int, ...] | None:
    """Element strides of a Fortran-ordered array (first index fastest), None for C order."""
    if not fortran or len(shape) < 2:
        return None
    strides, step = [], 1
    for d in shape:
        strides.append(step)
        step *= d
    return tuple(strides)


def nbytes_of(shape: tuple[int, ...], itemsize: int) -> int:
    return math.prod(shape) * itemsize


def literal(text: str, error, offset: int):
    """The Python literal numpy's repr wrote (see the module docstring)."""
    tokens = []
    at = 0
    stripped = text.rstrip(" \n\t\x00")
    while at < len(stripped):
        m = TOKEN.match(stripped, at)
        if not m or m.end() == at:
            raise error(FormatError, "the .npy header is not a Python literal numpy writes",
                        offset=offset + at, found=repr(stripped[at:at + 40]))
        tokens.append(m)
        at = m.end()
    value, end = _value(tokens, 0, 0, error, offset)
    if end != len(tokens):
        raise error(FormatError, "the .npy header has text after its dict", offset=offset)
    return value


def _value(tokens, i, depth, error, offset):
    if depth > MAX_DEPTH:
        raise error(LimitError, "the .npy header nests deeper than the limit", offset=offset)
    if i >= len(tokens):
        raise error(FormatError, "the .npy header ends early", offset=offset)
    m = tokens[i]
    if m.group("str") is not None:
        return _string(m.group("str")), i + 1
    if m.group("int") is not None:
        digits = m.group("int")
        if len(digits) > 40:
            raise error(LimitError, "a number in the .npy header is too long", offset=offset)
        return int(digits), i + 1
    if m.group("name") is not None:
        return NAMES[m.group("name")], i + 1
    opening = m.group("punct")
    closing = {"{": "}", "(": ")", "[": "]"}.get(opening)
    if closing is None:
        raise error(FormatError, f"unexpected {opening!r} in the .npy header", offset=offset)
    items, i, pairs = [], i + 1, opening == "{"
    while i < len(tokens) and tokens[i].group("punct") != closing:
        key, i = _value(tokens, i, depth + 1, error, offset)
        if pairs:
            if i >= len(tokens) or tokens[i].group("punct") != ":":
                raise error(FormatError, "a dict in the .npy header lacks a ':'", offset=offset)
            value, i = _value(tokens, i + 1, depth + 1, error, offset)
            if not isinstance(key, str):
                raise error(FormatError, "a .npy header key is not a string", offset=offset)
            key = (key, value)
        items.append(key)
        if i < len(tokens) and tokens[i].group("punct") == ",":
            i += 1
        elif i < len(tokens) and tokens[i].group("punct") != closing:
            raise error(FormatError, "items in the .npy header are not separated by ','",
                        offset=offset)
    if i >= len(tokens):
        raise error(FormatError, f"the .npy header lacks a closing {closing!r}", offset=offset)
    if pairs:
        return dict(items), i + 1
    return (tuple(items) if opening == "(" else items), i + 1


def _string(quoted: str) -> str:
    body, out, i = quoted[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            out.append(ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)
