"""An ONNX graph's interface, as metadata: the opsets it imports and its inputs and outputs.

onnx.proto: OperatorSetIdProto (domain 1, version 2); ValueInfoProto (name 1, type 2); TypeProto
(tensor_type 1: elem_type 1, shape 2); TensorShapeProto (dim 1: dim_value 1 or dim_param 2).
"""

from __future__ import annotations

from .tensors import TYPES
from .wire import LENGTH, VARINT, Span, Wire, signed64

MAX_TEXT = 1 << 12
MAX_LISTED = 100          # inputs / outputs listed; the rest are counted


def opsets(wire: Wire, span: Span) -> dict[str, int]:
    domain, version = "", 0
    for f in wire.fields(span):
        if f.number == 1 and f.wire == LENGTH:
            domain = wire.text(f.value, MAX_TEXT, "an opset's domain")
        elif f.number == 2 and f.wire == VARINT:
            version = signed64(f.value)
    return {domain or "ai.onnx": version}


def graph_inputs(wire: Wire, spans: list[Span], skip: set[str] = frozenset()) -> list[dict]:
    """{"name", "type", "shape"} of each value (initializers listed as inputs are left out, as
    older exporters list every weight there too); after MAX_LISTED, one {"more": n}."""
    out = []
    for span in spans:
        value = _value_info(wire, span)
        if value["name"] in skip:
            continue
        if len(out) == MAX_LISTED:
            out.append({"more": 0})
        if len(out) > MAX_LISTED:
            out[-1]["more"] += 1
            continue
        out.append(value)
    return out


def _value_info(wire: Wire, span: Span) -> dict:
    value = {"name": "", "type": None, "shape": None}
    for f in wire.fields(span):
        if f.number == 1 and f.wire == LENGTH:
            value["name"] = wire.text(f.value, MAX_TEXT, "an input's name")
        elif f.number == 2 and f.wire == LENGTH:
            for t in wire.fields(f.value):
                if t.number == 1 and t.wire == LENGTH:   # tensor_type
                    _tensor_type(wire, t.value, value)
    return value


def _tensor_type(wire: Wire, span: Span, value: dict) -> None:
    for f in wire.fields(span):
        if f.number == 1 and f.wire == VARINT:
            kind = TYPES.get(f.value)
            value["type"] = kind.name if kind else f"onnx type {f.value}"
        elif f.number == 2 and f.wire == LENGTH:
            shape = []
            for d in wire.fields(f.value):
                if d.number == 1 and d.wire == LENGTH and len(shape) < 64:
                    shape.append(_dim(wire, d.value))
            value["shape"] = shape


def _dim(wire: Wire, span: Span):
    dim = None
    for f in wire.fields(span):
        if f.number == 1 and f.wire == VARINT:
            dim = signed64(f.value)
        elif f.number == 2 and f.wire == LENGTH:
            dim = wire.text(f.value, MAX_TEXT, "a dimension's name")
    return dim
