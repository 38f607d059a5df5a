"""ONNX TensorProto: one initializer's descriptor, from its fields, without its payload.

onnx/onnx.proto, message TensorProto: dims (1), data_type (2), segment (3), float_data (4),
int32_data (5), string_data (6), int64_data (7), name (8), raw_data (9), double_data (10),
uint64_data (11), external_data (13: StringStringEntryProto key 1 / value 2), data_location (14).
The values are in one of three places:
  - raw_data: little-endian elements (4-, 2- and 6-bit types packed, element 0 in the low bits):
    the tensor points at it in the .onnx file;
  - external_data: `location` (a file beside the model), `offset` and `length` in it;
  - a typed field (float_data, int32_data, ...), one entry per element or packed byte: packed
    float_data and double_data are little-endian elements already (pointed at in place); the
    varint fields are decoded into raw_data's layout when the values are first read (TypedSource).
"""

from __future__ import annotations

import math
import struct
from typing import NamedTuple

from ...dtypes import lookup
from ...errors import FormatError, LimitError
from ...source import ByteSource
from .wire import FIXED32, FIXED64, LENGTH, VARINT, Span, Wire, signed64

DIMS, DATA_TYPE, SEGMENT, FLOAT_DATA, INT32_DATA, STRING_DATA, INT64_DATA, NAME, RAW_DATA, \
    DOUBLE_DATA, UINT64_DATA, EXTERNAL_DATA, DATA_LOCATION = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14
ENTRY_KEY, ENTRY_VALUE = 1, 2
EXTERNAL = 1                       # DataLocation.EXTERNAL
MAX_DIMS = 64
MAX_NAME_BYTES = 1 << 16
MAX_ENTRY_BYTES = 1 << 12          # an external_data key or value (a file name, a number)
MAX_TYPED_VALUES = 1 << 24         # entries of a typed field decoded in memory (~16M)


class OnnxType(NamedTuple):
    name: str                # TensorProto.DataType's name
    dtype: str | None        # ours (dtypes/), None: not numbers (STRING, UNDEFINED)
    field: int | None        # the typed field that holds its values without raw_data
    pack: str | None         # struct code of one stored entry once decoded ("in place": none needed)
    mask: int = 0            # the bits of an int32_data entry that are the element (or byte)


# TensorProto.DataType, by code (onnx.proto; the typed fields: onnx.helper.tensor_dtype_to_field).
# Packed 4- and 2-bit types keep one packed byte per int32_data entry; FLOAT6 one element each.
TYPES = {
    0: OnnxType("UNDEFINED", None, None, None),
    1: OnnxType("FLOAT", "F32", FLOAT_DATA, "<I"),
    2: OnnxType("UINT8", "U8", INT32_DATA, "B", 0xFF),
    3: OnnxType("INT8", "I8", INT32_DATA, "B", 0xFF),
    4: OnnxType("UINT16", "U16", INT32_DATA, "<H", 0xFFFF),
    5: OnnxType("INT16", "I16", INT32_DATA, "<H", 0xFFFF),
    6: OnnxType("INT32", "I32", INT32_DATA, "<I", 0xFFFF_FFFF),
    7: OnnxType("INT64", "I64", INT64_DATA, "<q"),
    8: OnnxType("STRING", None, STRING_DATA, None),
    9: OnnxType("BOOL", "BOOL", INT32_DATA, "B", 0xFF),
    10: OnnxType("FLOAT16", "F16", INT32_DATA, "<H", 0xFFFF),
    11: OnnxType("DOUBLE", "F64", DOUBLE_DATA, "<Q"),
    12: OnnxType("UINT32", "U32", UINT64_DATA, "<I", 0xFFFF_FFFF),
    13: OnnxType("UINT64", "U64", UINT64_DATA, "<Q"),
    14: OnnxType("COMPLEX64", "C64", FLOAT_DATA, "<I"),
    15: OnnxType("COMPLEX128", "C128", DOUBLE_DATA, "<Q"),
    16: OnnxType("BFLOAT16", "BF16", INT32_DATA, "<H", 0xFFFF),
    17: OnnxType("FLOAT8E4M3FN", "F8_E4M3", INT32_DATA, "B", 0xFF),
    18: OnnxType("FLOAT8E4M3FNUZ", "F8_E4M3FNUZ", INT32_DATA, "B", 0xFF),
    19: OnnxType("FLOAT8E5M2", "F8_E5M2", INT32_DATA, "B", 0xFF),
    20: OnnxType("FLOAT8E5M2FNUZ", "F8_E5M2FNUZ", INT32_DATA, "B", 0xFF),
    21: OnnxType("UINT4", "U4", INT32_DATA, "B", 0xFF),
    22: OnnxType("INT4", "I4", INT32_DATA, "B", 0xFF),
    23: OnnxType("FLOAT4E2M1", "F4", INT32_DATA, "B", 0xFF),
    24: OnnxType("FLOAT8E8M0", "F8_E8M0", INT32_DATA, "B", 0xFF),
    25: OnnxType("UINT2", "U2", INT32_DATA, "B", 0xFF),
    26: OnnxType("INT2", "I2", INT32_DATA, "B", 0xFF),
    27: OnnxType("FLOAT6E2M3", "F6_E2M3", INT32_DATA, "six", 0x3F),
    28: OnnxType("FLOAT6E3M2", "F6_E3M2", INT32_DATA, "six", 0x3F),
}
IN_PLACE = {FLOAT_DATA: FIXED32, DOUBLE_DATA: FIXED64}   # packed: already raw_data's bytes
TYPED_FIELDS = (FLOAT_DATA, INT32_DATA, STRING_DATA, INT64_DATA, DOUBLE_DATA, UINT64_DATA)


class Stored(NamedTuple):
    """An initializer as its fields say, before its bytes are placed."""
    name: str
    dims: tuple[int, ...]
    code: int
    raw: Span | None
    typed: dict             # field number -> [Span or number, ...] (packed spans, unpacked values)
    external: dict | None   # key -> value of external_data, when data_location is EXTERNAL
    segment: bool
    at: int                 # where the TensorProto is in the file


def parse(wire: Wire, span: Span) -> Stored:
    name, dims, code, raw, external, segment, location = "", [], 1, None, {}, False, 0
    typed: dict = {}
    for f in wire.fields(span):
        if f.number == DIMS:
            dims += (wire.packed_varints(f.value, MAX_DIMS + 1, "a tensor's dims")
                     if f.wire == LENGTH else [f.value])
            if len(dims) > MAX_DIMS:
                raise wire.error(LimitError, f"a tensor has more than {MAX_DIMS:,} dims",
                                 offset=f.at, expected=f"at most {MAX_DIMS:,}")
        elif f.number == DATA_TYPE and f.wire == VARINT:
            code = f.value
        elif f.number == NAME and f.wire == LENGTH:
            name = wire.text(f.value, MAX_NAME_BYTES, "a tensor's name")
        elif f.number == RAW_DATA and f.wire == LENGTH:
            raw = f.value
        elif f.number == SEGMENT:
            segment = True
        elif f.number == DATA_LOCATION and f.wire == VARINT:
            location = f.value
        elif f.number == EXTERNAL_DATA and f.wire == LENGTH:
            key, value = entry(wire, f.value)
            external[key] = value
        elif f.number in TYPED_FIELDS:
            values = typed.setdefault(f.number, [])
            values.append(f.value)
            if len(values) > MAX_TYPED_VALUES:
                raise wire.error(LimitError, "a tensor's typed field has more entries than the "
                                 "limit", offset=f.at, expected=f"at most {MAX_TYPED_VALUES:,}")
    shape = tuple(signed64(d) for d in dims)
    if any(d < 0 for d in shape):
        raise wire.error(FormatError, f"tensor {name!r} has a negative dimension",
                         offset=span.offset, found=f"dims {list(shape)}")
    return Stored(name, shape, code, raw, typed, external if location == EXTERNAL else None,
                  segment, span.offset)


def entry(wire: Wire, span: Span) -> tuple[str, str]:
    """A StringStringEntryProto's (key, value)."""
    key = value = ""
    for f in wire.fields(span):
        if f.wire == LENGTH and f.number in (ENTRY_KEY, ENTRY_VALUE):
            text = wire.text(f.value, MAX_ENTRY_BYTES, "an external_data entry")
            key, value = (text, value) if f.number == ENTRY_KEY else (key, text)
    return key, value


def stored_bytes(dtype: str, numel: int) -> int:
    """Bytes the elements take in raw_data: packed sub-byte types padded to a whole byte (ONNX
    trims a last partial 6-bit group, as numpy_helper's _pack_6bit does)."""
    info = lookup(dtype)
    return -(-numel * info.block_bytes * 8 // info.block_elems // 8)


class TypedSource(ByteSource):
    """A typed field's entries as raw_data's bytes, decoded from the .onnx file on first read
    (bounded: MAX_TYPED_VALUES entries). Its offset in the file is the field's first entry."""

    def __init__(self, wire: Wire, kind: OnnxType, values: list, nbytes: int, numel: int,
                 name: str, at: int):
        super().__init__()
        self.wire, self.kind, self.values = wire, kind, values
        self.size, self.numel, self.name, self.at = nbytes, numel, name, at
        self._data: bytes | None = None

    def root(self) -> ByteSource:
        return self.wire.source.root()

    def known_file_offset(self, offset: int) -> int | None:
        return self.at

    def file_offset(self, offset: int) -> int:
        return self.at

    def _read(self, offset: int, n: int) -> bytes:
        if self._data is None:
            data = decode_typed(self.wire, self.kind, self.values, self.numel)
            if len(data) != self.size:
                raise self.wire.error(FormatError, f"tensor {self.name!r}: its {self.kind.name} "
                                      "field does not hold the values its shape needs",
                                      expected=f"{self.size:,} bytes", found=f"{len(data):,} bytes")
            self._data = data
        return self._count(self._data[offset:offset + n])


def short_value(value) -> str:
    """A number from the file, cut for a message (a varint may have thousands of digits)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def decode_typed(wire: Wire, kind: OnnxType, values: list, numel: int) -> bytes:
    """The entries of a typed field as raw_data's bytes: packed fixed-width runs as they are,
    varints masked to the element's bits (or read as int64) and packed as raw_data packs them."""
    width = struct.calcsize(kind.pack) if kind.field in IN_PLACE else 0
    out, numbers = bytearray(), []
    for value in values:
        if width and isinstance(value, Span):
            if value.length % width or len(out) + value.length > MAX_TYPED_VALUES * width:
                raise wire.error(FormatError if value.length % width else LimitError,
                                 f"a packed {kind.name} field of {value.length:,} bytes",
                                 offset=value.offset, expected=f"whole {width}-byte values, at "
                                 f"most {MAX_TYPED_VALUES:,}")
            out += wire.bytes(value, value.length, "a typed field")
        elif width:
            # One entry read by its own wire type: a varint where a fixed32/64 belongs can hold
            # any number, which must fit the element before it is packed.
            try:
                out += struct.pack(kind.pack, value)
            except (struct.error, OverflowError, TypeError):
                raise wire.error(FormatError, f"tensor entry {short_value(value)} does not fit a "
                                 f"{kind.name} element", expected=f"a {width}-byte {kind.name}") from None
        elif isinstance(value, Span):
            numbers += wire.packed_varints(value, MAX_TYPED_VALUES - len(numbers) + 1,
                                           "a typed field")
        else:
            numbers.append(value)
        if len(numbers) > MAX_TYPED_VALUES:
            raise wire.error(LimitError, "a typed field has more entries than the limit",
                             expected=f"at most {MAX_TYPED_VALUES:,}")
    if width:
        return bytes(out)
    if kind.mask:
        numbers = [v & kind.mask for v in numbers]
    elif kind.pack == "<q":
        numbers = [signed64(v) for v in numbers]
    if kind.pack == "six":
        return _pack_six(numbers[:numel]) if len(numbers) == numel else b""
    return struct.pack(f"<{len(numbers)}{kind.pack[-1]}", *numbers)


def _pack_six(codes: list[int]) -> bytes:
    """6-bit codes packed four to three bytes, element 0 in the low bits (onnx _pack_6bit)."""
    out = bytearray()
    for i in range(0, len(codes), 4):
        group = codes[i:i + 4] + [0] * (4 - len(codes[i:i + 4]))
        word = group[0] | group[1] << 6 | group[2] << 12 | group[3] << 18
        out += word.to_bytes(3, "little")
    return bytes(out[:-(-len(codes) * 6 // 8)])


def numel_of(stored: Stored) -> int:
    return math.prod(stored.dims)
