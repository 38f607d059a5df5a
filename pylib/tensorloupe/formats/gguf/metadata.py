"""GGUF metadata values: the value-type table, a buffered cursor, and lazy arrays.

Spec (ggml docs/gguf.md, "File Structure" and `gguf_metadata_value_type`): a value is a uint32 type
id followed by its payload. Scalars are fixed-size; a string is a length (uint64; uint32 in version 1)
and that many UTF-8 bytes; an array is an element type id (uint32), a length (uint64; uint32 in
version 1) and the elements, which may themselves be arrays.

A GGUF header is thousands of tiny fields (a 256k-token vocabulary is 256k length-prefixed
strings), so fields are never read one by one from the byte source: the cursor pulls chunks that
double up to a few MB and parses them with `struct.unpack_from` on a memoryview. Arrays longer than
LAZY_ENTRIES are not decoded at all when a file is opened: numeric ones are skipped by arithmetic,
string ones by walking their lengths, remembering every INDEX_STRIDE-th element offset so a page of
entries can later be decoded without walking from the start (`read_entries`).
"""

from __future__ import annotations

import math
import struct
from typing import NamedTuple
from weakref import WeakKeyDictionary

from ...errors import ErrorFactory, FormatError, LimitError, TruncatedError

FORMAT = "gguf"
# Arrays with more entries than this are summarised, not decoded, when a file is opened.
LAZY_ENTRIES = 1024
# A sparse index of string/array element offsets: one entry per INDEX_STRIDE elements.
INDEX_STRIDE = 256
# Strings longer than this are summarised, never read whole (a tokenizer.json stored as one value is
# tens of MB); keys and tensor names longer than MAX_NAME_BYTES are refused outright.
MAX_INLINE_STRING = 1 << 20
MAX_NAME_BYTES = 1 << 16
# Nested arrays deeper than this are refused (real files nest at most 2 deep).
MAX_ARRAY_DEPTH = 16
# The header cursor's first chunk is the 64 KiB block that opening any file has read already (the
# block cache serves it), so a small header costs no byte more; a bigger one (a vocabulary of MBs)
# is then read in chunks of REFILL_CHUNK, doubling on every refill up to MAX_CHUNK: a few reads,
# overshooting the header's end by less than the header's own size.
FIRST_CHUNK = 64 << 10
REFILL_CHUNK = 256 << 10
MAX_CHUNK = 4 << 20
# A page of a lazy array (read_entries) starts smaller: 50 tokens of a vocabulary are ~1 KB, and
# every page of a 262k vocabulary should not cost a quarter MB per array.
PAGE_CHUNK = 16 << 10

STRING, ARRAY = 8, 9


class ValueType(NamedTuple):
    name: str
    code: str | None     # struct format character of a fixed-size scalar; None for string/array


# gguf_metadata_value_type (spec "File Structure"); the id is the row's key.
VALUE_TYPES: dict[int, ValueType] = {
    0: ValueType("uint8", "B"),
    1: ValueType("int8", "b"),
    2: ValueType("uint16", "H"),
    3: ValueType("int16", "h"),
    4: ValueType("uint32", "I"),
    5: ValueType("int32", "i"),
    6: ValueType("float32", "f"),
    7: ValueType("bool", "B"),   # one byte, 0 or 1
    STRING: ValueType("string", None),
    ARRAY: ValueType("array", None),
    10: ValueType("uint64", "Q"),
    11: ValueType("int64", "q"),
    12: ValueType("float64", "d"),
}
BOOL, FLOAT32 = 7, 6
INTEGER_TYPES = frozenset(i for i, t in VALUE_TYPES.items() if t.code and t.code in "BbHhIiQq" and i != BOOL)


class Layout:
    """The struct layouts of one byte order and version (version 1 used uint32 lengths)."""

    def __init__(self, big_endian: bool, version: int):
        order = ">" if big_endian else "<"
        self.big_endian, self.version = big_endian, version
        self.u32 = struct.Struct(order + "I")
        self.u64 = struct.Struct(order + "Q")
        # String lengths, array lengths, header counts and tensor dims: uint64 since version 2.
        self.length = self.u32 if version == 1 else self.u64
        self.scalars = {i: struct.Struct(order + t.code) for i, t in VALUE_TYPES.items() if t.code}
        self.order = order

    def min_size(self, vtype: int) -> int:
        """The fewest bytes one value of `vtype` can take (to check counts before looping)."""
        if vtype == STRING:
            return self.length.size
        if vtype == ARRAY:
            return self.u32.size + self.length.size
        return self.scalars[vtype].size


def short_float32(x: float) -> float:
    """The shortest decimal that rounds to the same float32 (1e-05, not 9.999999747378752e-06)."""
    if not math.isfinite(x) or x == 0:
        return x
    packed = struct.pack("<f", x)
    for digits in range(1, 10):
        candidate = float(f"{x:.{digits}g}")
        if struct.pack("<f", candidate) == packed:
            return candidate
    return x


class Cursor:
    """Sequential reads of a byte source through a chunk buffer; errors name file and offset."""

    def __init__(self, source, position: int, layout: Layout, chunk: int = FIRST_CHUNK,
                 refill: int = REFILL_CHUNK):
        self.source, self.layout = source, layout
        self.size = source.size
        self.pos = position
        self._buf = memoryview(b"")
        self._base = 0
        self._chunk = chunk
        self._refill = refill       # the second chunk; each later one doubles

    def error(self, cls, message: str, offset: int | None = None, **kw):
        return ErrorFactory(self.source.name, FORMAT)(
            cls, message, offset=self.pos if offset is None else offset, **kw)

    @property
    def remaining(self) -> int:
        return self.size - self.pos

    def need(self, n: int, what: str) -> None:
        """Refuse to go on if fewer than n bytes remain (checked before any loop or allocation)."""
        if n > self.size - self.pos:
            raise self.error(TruncatedError, f"{what} runs past the end of the file",
                             expected=f"{n:,} bytes", found=f"{self.size - self.pos:,} bytes left")

    def _fill(self, n: int) -> None:
        start = self.pos - self._base
        if 0 <= start and start + n <= len(self._buf):
            return
        length = min(max(n, self._chunk), self.size - self.pos)
        self._buf = memoryview(self.source.read(self.pos, length))
        self._base = self.pos
        self._chunk = min(max(self._chunk * 2, self._refill), MAX_CHUNK)

    def unpack(self, st: struct.Struct, what: str):
        self.need(st.size, what)
        self._fill(st.size)
        values = st.unpack_from(self._buf, self.pos - self._base)
        self.pos += st.size
        return values

    def one(self, st: struct.Struct, what: str):
        return self.unpack(st, what)[0]

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        self._fill(n)
        start = self.pos - self._base
        self.pos += n
        return bytes(self._buf[start:start + n])

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n

    def name(self, what: str) -> str:
        """A key or tensor name: a length-prefixed UTF-8 string that must decode."""
        start = self.pos
        n = self.one(self.layout.length, f"the length of {what}")
        if n > MAX_NAME_BYTES:
            raise self.error(LimitError, f"{what} is {n:,} bytes long", offset=start,
                             expected=f"at most {MAX_NAME_BYTES:,} bytes", found=n)
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(FormatError, f"{what} is not valid UTF-8",
                             offset=start + self.layout.length.size + e.start,
                             found=repr(raw[:64])) from e

    def value_type(self, what: str) -> int:
        start = self.pos
        vtype = self.one(self.layout.u32, what)
        if vtype not in VALUE_TYPES:
            raise self.error(FormatError, f"{what} is an unknown metadata value type", offset=start,
                             expected=f"one of {sorted(VALUE_TYPES)}", found=vtype)
        return vtype

    # --- values ----------------------------------------------------------------------------------

    def value(self, vtype: int, what: str, depth: int = 0):
        """Decode one value; big arrays and long strings come back as summaries (see module doc)."""
        if vtype == STRING:
            return self.string(what)
        if vtype == ARRAY:
            return self.array(what, depth)
        v = self.one(self.layout.scalars[vtype], what)
        return self._scalar(vtype, v)

    @staticmethod
    def _scalar(vtype: int, v):
        if vtype == BOOL:
            return v != 0
        if vtype == FLOAT32:
            return short_float32(v)
        return v

    def string(self, what: str):
        """A string value; invalid UTF-8 is shown with U+FFFD (values are for reading, not keys)."""
        start = self.pos
        n = self.one(self.layout.length, f"the length of {what}")
        if n > self.remaining:
            raise self.error(TruncatedError, f"{what} is a {n:,}-byte string, longer than the rest "
                             "of the file", offset=start, expected=f"{n:,} bytes",
                             found=f"{self.remaining:,} bytes left")
        if n > MAX_INLINE_STRING:
            self.skip(n, what)
            return {"string": True, "length": n, "lazy": True}
        return self.take(n, what).decode("utf-8", errors="replace")

    def array_head(self, what: str, depth: int) -> tuple[int, int]:
        """Element type and length of an array, with the length checked against the file."""
        if depth >= MAX_ARRAY_DEPTH:
            raise self.error(LimitError, f"{what} nests arrays more than {MAX_ARRAY_DEPTH} deep",
                             expected=f"at most {MAX_ARRAY_DEPTH} levels")
        etype = self.value_type(f"the element type of {what}")
        at = self.pos
        n = self.one(self.layout.length, f"the length of {what}")
        least = n * self.layout.min_size(etype)
        if least > self.remaining:
            raise self.error(TruncatedError, f"{what} claims {n:,} {VALUE_TYPES[etype].name} entries, "
                             "more than the rest of the file can hold", offset=at,
                             expected=f"at least {least:,} bytes", found=f"{self.remaining:,} bytes left")
        return etype, n

    def array(self, what: str, depth: int = 0):
        etype, n = self.array_head(what, depth)
        if n > LAZY_ENTRIES:
            self.skip_entries(etype, n, what, depth)
            return {"array": True, "type": VALUE_TYPES[etype].name, "length": n, "lazy": True}
        return self.entries(etype, n, what, depth)

    def entries(self, etype: int, n: int, what: str, depth: int = 0) -> list:
        code = VALUE_TYPES[etype].code
        if code is not None:
            st = struct.Struct(f"{self.layout.order}{n}{code}")
            return [self._scalar(etype, v) for v in self.unpack(st, what)]
        return [self.value(etype, f"entry {i:,} of {what}", depth + 1) for i in range(n)]

    def skip_entries(self, etype: int, n: int, what: str, depth: int = 0,
                     index: list[int] | None = None) -> None:
        """Step over n entries without decoding them; optionally record every INDEX_STRIDE-th
        entry's offset in `index`."""
        code = VALUE_TYPES[etype].code
        if code is not None:
            self.skip(n * self.layout.scalars[etype].size, what)
        elif etype == STRING:
            self._skip_strings(n, what, index)
        else:
            for i in range(n):
                if index is not None and i % INDEX_STRIDE == 0:
                    index.append(self.pos)
                sub, count = self.array_head(f"entry {i:,} of {what}", depth + 1)
                self.skip_entries(sub, count, f"entry {i:,} of {what}", depth + 1)

    def _skip_strings(self, n: int, what: str, index: list[int] | None) -> None:
        # The hot loop of opening a GGUF: one unpack_from per string over a chunk in memory.
        length = self.layout.length
        unpack, lsize = length.unpack_from, length.size
        size = self.size
        i = 0
        while i < n:
            self._fill(lsize)
            buf, base = self._buf, self._base
            p, end = self.pos - base, len(buf) - lsize
            while i < n and p <= end:
                if index is not None and i % INDEX_STRIDE == 0:
                    index.append(base + p)
                (k,) = unpack(buf, p)
                q = p + lsize + k
                if base + q > size:
                    self.pos = base + p
                    raise self.error(TruncatedError, f"string {i:,} of {what} runs past the end of "
                                     "the file", expected=f"{lsize + k:,} bytes",
                                     found=f"{size - base - p:,} bytes left")
                p = q
                i += 1
            self.pos = base + p
            if i < n:
                self.need(lsize, f"the length of string {i:,} of {what}")


def top_level(cursor: Cursor, key: str, vtype: int) -> tuple[object, dict | None]:
    """A metadata value and, if it was left undecoded, a JSON-able record of where it lies (the
    key of Checkpoint.extras["gguf_arrays"]); the sparse index of an array goes to the cache."""
    what = f"metadata value {key!r}"
    start = cursor.pos
    if vtype == ARRAY:
        etype, n = cursor.array_head(what, 0)
        if n <= LAZY_ENTRIES:
            return cursor.entries(etype, n, what), None
        record = {"kind": "array", "key": key, "type": VALUE_TYPES[etype].name, "etype": etype,
                  "length": n, "offset": cursor.pos}
        index: list[int] | None = [] if VALUE_TYPES[etype].code is None else None
        cursor.skip_entries(etype, n, what, 0, index)
        record["end"] = cursor.pos
        if index is not None:
            _INDEXES.setdefault(cursor.source, {})[record["offset"]] = index
        return {"array": True, "type": record["type"], "length": n, "lazy": True}, record
    value = cursor.value(vtype, what)
    if isinstance(value, dict):  # a string too long to hold: keep where it is
        return value, {"kind": "string", "key": key, "type": "string", "etype": STRING,
                       "length": value["length"], "offset": start + cursor.layout.length.size,
                       "end": cursor.pos}
    return value, None


# Sparse indexes of lazy string/array arrays: source -> {array offset: [offset of every
# INDEX_STRIDE-th entry]}. A cache, not state: read_entries rebuilds a missing one by walking the
# array once. Kept out of Checkpoint.extras so that stays small, plain JSON.
_INDEXES: WeakKeyDictionary = WeakKeyDictionary()


def read_entries(source, layout: Layout, record: dict, start: int, count: int) -> list:
    """Entries [start, start + count) of a lazy array described by `record` (see gguf.read)."""
    etype, length = record["etype"], record["length"]
    count = max(0, min(count, length - start))
    if count == 0:
        return []
    what = f"metadata array {record['key']!r}"
    cursor = Cursor(source, record["offset"], layout, PAGE_CHUNK, 2 * PAGE_CHUNK)
    code = VALUE_TYPES[etype].code
    if code is not None:
        cursor.pos = record["offset"] + start * layout.scalars[etype].size
        return cursor.entries(etype, count, what)
    index = _INDEXES.get(source, {}).get(record["offset"])
    if index is None:
        index = []
        cursor.skip_entries(etype, length, what, 1, index)
        _INDEXES.setdefault(source, {})[record["offset"]] = index
    anchor = start // INDEX_STRIDE
    cursor.pos = index[anchor]
    cursor.skip_entries(etype, start - anchor * INDEX_STRIDE, what, 1)
    return cursor.entries(etype, count, what, 1)
