"""An ONNX graph's nodes: each one's op (counted as metadata) and, for a Constant node, the
tensor it holds, listed beside the initializers under the node's name.

onnx.proto, message NodeProto: input (1), output (2), name (3), op_type (4), attribute (5),
domain (7). AttributeProto: name (1), f (2, fixed32), i (3), s (4), t (5: TensorProto),
floats (7), ints (8), strings (9), sparse_tensor (22). A Constant (onnx/defs/generator/defs.cc)
has exactly one of value (t), sparse_value, value_float (a float32 scalar), value_floats (1-D
float32), value_int (an int64 scalar), value_ints (1-D int64), value_string, value_strings.
Its scalars and lists become TensorProto-like records (tensors.Stored) with the values in the
typed field raw_data would be decoded from, so they are placed and read like any initializer.
"""

from __future__ import annotations

from typing import NamedTuple

from ...errors import LimitError
from . import sparse, tensors
from .tensors import FLOAT_DATA, INT64_DATA, STRING_DATA
from .wire import FIXED32, LENGTH, VARINT, Span, Wire

INPUT, OUTPUT, NAME, OP_TYPE, ATTRIBUTE, DOMAIN = 1, 2, 3, 4, 5, 7
A_NAME, A_FLOAT, A_INT, A_STRING, A_TENSOR, A_FLOATS, A_INTS, A_STRINGS, A_SPARSE = \
    1, 2, 3, 4, 5, 7, 8, 9, 22
MAX_TEXT = 1 << 16
MAX_LISTED_VALUES = 1 << 20    # entries of a value_ints / value_floats list counted at open
FLOAT, INT64, STRING = 1, 7, 8
# attribute name -> (the AttributeProto field it is in, TensorProto type, typed field, a list)
CONSTANT_VALUES = {
    "value_float": (A_FLOAT, FLOAT, FLOAT_DATA, False),
    "value_floats": (A_FLOATS, FLOAT, FLOAT_DATA, True),
    "value_int": (A_INT, INT64, INT64_DATA, False),
    "value_ints": (A_INTS, INT64, INT64_DATA, True),
    "value_string": (A_STRING, STRING, STRING_DATA, False),
    "value_strings": (A_STRINGS, STRING, STRING_DATA, True),
}
WIRES = {FLOAT: (FIXED32, LENGTH), INT64: (VARINT, LENGTH), STRING: (LENGTH,)}


class Node(NamedTuple):
    op: str                   # op_type, with its domain unless it is the default one
    name: str
    output: str               # its first output's name
    constant: "tensors.Stored | sparse.SparseStored | None"   # a Constant's tensor


def node(wire: Wire, span: Span) -> Node:
    op = domain = name = output = ""
    attributes: list[Span] = []
    for f in wire.fields(span):
        if f.wire != LENGTH:
            continue
        if f.number == OP_TYPE:
            op = wire.text(f.value, MAX_TEXT, "a node's op_type")
        elif f.number == DOMAIN:
            domain = wire.text(f.value, MAX_TEXT, "a node's domain")
        elif f.number == NAME:
            name = wire.text(f.value, MAX_TEXT, "a node's name")
        elif f.number == OUTPUT and not output:
            output = wire.text(f.value, MAX_TEXT, "a node's output")
        elif f.number == ATTRIBUTE:
            attributes.append(f.value)
    label = f"{domain}.{op}" if domain and domain != "ai.onnx" else op
    constant = None
    if op == "Constant" and domain in ("", "ai.onnx"):
        for a in attributes:
            constant = _constant(wire, a, name or output) or constant
    return Node(label, name, output, constant)


def _constant(wire: Wire, span: Span, name: str):
    """The tensor one attribute of a Constant holds, or None (not a value attribute)."""
    attr, found = "", {}
    for f in wire.fields(span):
        if f.number == A_NAME and f.wire == LENGTH:
            attr = wire.text(f.value, MAX_TEXT, "an attribute's name")
        else:
            found.setdefault(f.number, []).append(f)
    if attr == "value":
        t = found.get(A_TENSOR, [])
        return tensors.parse(wire, t[-1].value)._replace(name=name) if t and t[-1].wire == LENGTH else None
    if attr == "sparse_value":
        t = found.get(A_SPARSE, [])
        return sparse.parse(wire, t[-1].value, name) if t and t[-1].wire == LENGTH else None
    if attr not in CONSTANT_VALUES:
        return None
    number, code, field, listed = CONSTANT_VALUES[attr]
    # entries of the wire type their field has (packed lists as one length-delimited span);
    # others are not values of this attribute (protobuf parsers skip them too)
    entries = [f for f in found.get(number, []) if f.wire in WIRES[code]]
    if not entries and not listed:
        return None
    if not listed:
        entries = entries[-1:]        # a repeated scalar field: the last one counts (protobuf)
    count = 0
    for f in entries:
        if f.wire == LENGTH and code != STRING:     # packed numbers
            count += (f.value.length // 4 if code == FLOAT else
                      len(wire.packed_varints(f.value, MAX_LISTED_VALUES, f"constant {name!r}'s {attr}")))
        else:
            count += 1
        if count > MAX_LISTED_VALUES:
            raise wire.error(LimitError, f"constant {name!r}'s {attr} has more values than the limit",
                             offset=f.at, expected=f"at most {MAX_LISTED_VALUES:,}")
    dims = (count,) if listed else ()
    return tensors.Stored(name, dims, code, None, {field: [f.value for f in entries]}, None, False,
                          span.offset)
