"""ONNX models (`.onnx`): the graph's initializers as tensors, its shape as metadata.

An .onnx file is one protobuf ModelProto (onnx/onnx.proto): ir_version (1), producer_name (2),
producer_version (3), domain (4), model_version (5), graph (7), opset_import (8: domain 1,
version 2), metadata_props (14). The GraphProto (7) holds node (1: op_type 4, domain 7), name (2),
initializer (5: TensorProto, tensors.py), sparse_initializer (15: sparse.py, shown dense),
input (11), output (12). A Constant node's tensor is listed too, under the node's name
(constants.py). Only these fields are walked (wire.py): every other value, and every
initializer's payload, is skipped by its length. Protobuf caps a message at 2 GB, so big models
keep their initializers in external data files beside the model (tensors.py); those files are opened through the model's own source
(`ByteSource.beside`: the same folder on disk, in a dropped folder, or at the same URL) and read by
range like any tensor.
"""

from __future__ import annotations

from collections import Counter

from ...errors import (ErrorFactory, FormatError, LimitError, TensorloupeError, TruncatedError,
                       LOW_LEVEL_ERRORS, shown)
from ...model import Checkpoint, Tensor
from ...source import ByteSource
from ...source.base import inside_folder
from ...source.cache import CachedSource
from . import constants, sparse, tensors
from .graph import graph_inputs, opsets
from .tensors import IN_PLACE, TYPES, TypedSource, stored_bytes
from .wire import LENGTH, VARINT, Span, Wire

FORMAT = "onnx"
IR_VERSION, PRODUCER, PRODUCER_VERSION, DOMAIN, MODEL_VERSION, GRAPH, OPSET, PROPS = \
    1, 2, 3, 4, 5, 7, 8, 14
NODE, GRAPH_NAME, INITIALIZER, SPARSE_INITIALIZER, INPUT, OUTPUT = 1, 2, 5, 15, 11, 12
MAX_TEXT = 1 << 16
MAX_INITIALIZERS = 1 << 20
# the keys a ModelProto starts with, after ir_version: what a sniff accepts as the second field
MODEL_KEYS = {k << 3 | LENGTH for k in (PRODUCER, PRODUCER_VERSION, DOMAIN, GRAPH, OPSET, PROPS)}
MODEL_KEYS |= {MODEL_VERSION << 3 | VARINT}


def sniff(head: bytes, size: int, name: str) -> bool:
    """ir_version (field 1, a small varint) first, as every ONNX writer serialises it, then
    another ModelProto field."""
    return (len(head) >= 3 and head[0] == IR_VERSION << 3 | VARINT and 1 <= head[1] <= 64
            and head[2] in MODEL_KEYS)


def read(source: ByteSource) -> Checkpoint:
    error = ErrorFactory(source.name, FORMAT)
    wire = Wire(source, error)
    try:
        return _read(source, wire, error)
    except TensorloupeError as e:
        raise e.located(file=source.name, format=FORMAT)
    except LOW_LEVEL_ERRORS as e:
        raise error(FormatError, f"the protobuf cannot be read: {e}") from e


def _read(source: ByteSource, wire: Wire, error) -> Checkpoint:
    if source.size == 0:
        raise error(TruncatedError, "the file is empty")
    meta: dict = {"opset_import": {}}
    graphs: list[Span] = []
    names = {PRODUCER: "producer_name", PRODUCER_VERSION: "producer_version", DOMAIN: "domain"}
    props = {}
    for f in wire.fields(Span(0, source.size)):
        if f.number == IR_VERSION and f.wire == VARINT:
            meta["ir_version"] = f.value
        elif f.number == MODEL_VERSION and f.wire == VARINT:
            meta["model_version"] = f.value
        elif f.number in names and f.wire == LENGTH:
            meta[names[f.number]] = wire.text(f.value, MAX_TEXT, names[f.number])
        elif f.number == OPSET and f.wire == LENGTH:
            meta["opset_import"].update(opsets(wire, f.value))
        elif f.number == PROPS and f.wire == LENGTH:
            key, value = tensors.entry(wire, f.value)
            props[key] = value
        elif f.number == GRAPH and f.wire == LENGTH:
            graphs.append(f.value)
    if "ir_version" not in meta:
        raise error(FormatError, "this is not an ONNX model: it has no ir_version (field 1)",
                    offset=0)
    if not graphs:
        raise error(FormatError, "the model has no graph (field 7)")
    if props:
        meta["metadata_props"] = props
    stored, ops, sparse_stored, constant_nodes = [], Counter(), [], []
    inputs, outputs = [], []
    for span in graphs:   # a repeated message field merges: every occurrence adds its parts
        for f in wire.fields(span):
            if f.wire != LENGTH:
                continue
            if f.number == INITIALIZER:
                if len(stored) >= MAX_INITIALIZERS:
                    raise error(LimitError, "the graph has more initializers than the limit",
                                offset=f.at, expected=f"at most {MAX_INITIALIZERS:,}")
                stored.append(tensors.parse(wire, f.value))
            elif f.number == NODE:
                node = constants.node(wire, f.value)
                ops[node.op] += 1
                if node.constant is not None:
                    constant_nodes.append(node)
            elif f.number == GRAPH_NAME:
                meta["graph_name"] = wire.text(f.value, MAX_TEXT, "the graph's name")
            elif f.number == INPUT:
                inputs.append(f.value)
            elif f.number == OUTPUT:
                outputs.append(f.value)
            elif f.number == SPARSE_INITIALIZER:
                if len(stored) + len(sparse_stored) >= MAX_INITIALIZERS:
                    raise error(LimitError, "the graph has more initializers than the limit",
                                offset=f.at, expected=f"at most {MAX_INITIALIZERS:,}")
                sparse_stored.append(sparse.parse(wire, f.value))
    initialized = {s.name for s in stored} | {s.name for s in sparse_stored}
    meta["inputs"] = graph_inputs(wire, inputs, skip=initialized)
    meta["outputs"] = graph_inputs(wire, outputs)
    meta["op_counts"] = dict(ops.most_common())
    meta["nodes"] = sum(ops.values())
    warnings = []
    placed = _Placer(source, wire, error, warnings)
    found = [placed.tensor(s) for s in stored] + [placed.any(s, {}) for s in sparse_stored]
    found += _constants(placed, constant_nodes, {t.name for t in found})
    if constant_nodes:
        meta["constants"] = len(constant_nodes)
    names_seen = Counter(t.name for t in found)
    twice = [n for n, c in names_seen.items() if c > 1]
    if twice:
        raise error(FormatError, f"the graph has {len(twice):,} initializer name(s) used twice",
                    found=repr(twice[0]))
    for t in found:
        if t.problem:
            warnings.append(f"tensor {t.name!r}: {t.problem}")
    extras = {"onnx": {"external_files": sorted(placed.opened)}} if placed.opened else {}
    return Checkpoint(FORMAT, source.name, source.size + sum(s.size for s in placed.opened.values()
                                                            if s is not None),
                      found, metadata=meta, warnings=warnings, extras=extras,
                      sources=[source] + [s for s in placed.opened.values() if s is not None])


def _constants(placed: "_Placer", nodes: list, taken: set[str]) -> list[Tensor]:
    """The Constant nodes' tensors, each under its node's name (its output's where the name is
    empty or already an initializer's or another constant's)."""
    out = []
    for n in nodes:
        name = n.constant.name
        if name in taken and n.output and n.output not in taken:
            name = n.output
        t = placed.any(n.constant._replace(name=name), {"onnx": "Constant node", "node": n.name,
                                                         "output": n.output})
        taken.add(t.name)
        out.append(t)
    return out


class _Placer:
    """Where each initializer's bytes are: the .onnx file, a typed field, or an external file
    (each opened once, on its first tensor)."""

    def __init__(self, source: ByteSource, wire: Wire, error, warnings: list[str]):
        self.source, self.wire, self.error, self.warnings = source, wire, error, warnings
        self.opened: dict[str, ByteSource | None] = {}

    def any(self, s, info: dict) -> Tensor:
        """A TensorProto's tensor, or a SparseTensorProto's dense one, with `info` added."""
        if isinstance(s, sparse.SparseStored):
            return self.sparse(s, info)
        return self.tensor(s, info)

    def sparse(self, s: sparse.SparseStored, info: dict) -> Tensor:
        parts = [None if p is None else self.tensor(p._replace(name=f"{s.name} ({what})"))
                 for p, what in ((s.values, "values"), (s.indices, "indices"))]
        values, indices = parts
        kind = TYPES.get(s.values.code) if s.values is not None else None
        info = dict(info, onnx_type=kind.name if kind else "UNDEFINED")
        why = sparse.shape_problem(s, values, indices)
        if why is None:
            return sparse.dense_tensor(s, values, indices, info)
        dtype = values.dtype if values is not None else "UNDEFINED"
        return Tensor(s.name, dtype, s.dims, s.at, 0, None, problem=f"sparse: {why}", info=info)

    def tensor(self, s: tensors.Stored, extra: dict | None = None) -> Tensor:
        kind = TYPES.get(s.code)
        numel = tensors.numel_of(s)
        label = kind.name if kind else f"onnx type {s.code}"
        dtype = kind.dtype if kind and kind.dtype else (kind.name if kind else label)
        info = {**(extra or {}), "onnx_type": label}
        bare = Tensor(s.name, dtype, s.dims, s.at, 0, None, info=info)
        if kind is None or kind.dtype is None:
            what = ("strings: listed, not read" if kind and kind.name == "STRING"
                    else f"data type {label} has no numbers to show")
            bare.problem = what
            return bare
        if s.segment:
            bare.problem = "it is stored in segments, which tensorloupe does not read"
            return bare
        nbytes = stored_bytes(kind.dtype, numel)
        if s.external is not None:
            return self._external(s, bare, nbytes, info)
        if s.raw is not None:
            return self._sized(bare, self.source, s.raw.offset, s.raw.length, nbytes, "raw_data")
        values = s.typed.get(kind.field, [])
        if kind.field in IN_PLACE and len(values) == 1 and isinstance(values[0], Span):
            span = values[0]
            return self._sized(bare, self.source, span.offset, span.length, nbytes, "its typed field")
        if not values and numel:
            bare.problem = f"it has no values (no raw_data, external data or {label} field)"
            return bare
        typed = TypedSource(self.wire, kind, values, nbytes, numel, s.name,
                            values[0].offset if values and isinstance(values[0], Span) else s.at)
        return Tensor(s.name, kind.dtype, s.dims, 0, nbytes, typed, info=info)

    def _sized(self, bare: Tensor, source, offset: int, length: int, nbytes: int, where: str):
        if length != nbytes:
            raise self.error(FormatError, f"tensor {bare.name!r}: shape {list(bare.shape)} of "
                             f"{bare.dtype} needs {nbytes:,} bytes but {where} holds {length:,}",
                             offset=offset, expected=nbytes, found=length)
        return Tensor(bare.name, bare.dtype, bare.shape, offset, nbytes, source, info=bare.info)

    def _external(self, s: tensors.Stored, bare: Tensor, nbytes: int, info: dict) -> Tensor:
        where = s.external.get("location", "")
        location = checked_location(where, self.error, s.name)
        info = dict(info, location=location)
        try:
            offset = int(s.external.get("offset", "0"))
            length = int(s.external["length"]) if "length" in s.external else None
        except ValueError:
            raise self.error(FormatError, f"tensor {s.name!r}: its external data offset or "
                             "length is not a number", found=repr(s.external)[:120]) from None
        if offset < 0 or (length is not None and length < 0):
            raise self.error(FormatError, f"tensor {s.name!r}: a negative external data offset "
                             "or length", found=f"offset {offset:,}, length {shown(length)}")
        data = self._open(location)
        bare.info = info
        if data is None:
            bare.problem = (f"its data is in {location!r}, which is not beside the model: open "
                            "the model's folder, or give both files")
            return bare
        if length is None:
            length = data.size - offset
        if offset + length > data.size:
            raise self.error(TruncatedError, f"tensor {s.name!r}: its external data runs past the "
                             f"end of {location!r}", expected=f"{offset + length:,} bytes",
                             found=f"{data.size:,} bytes")
        return self._sized(bare, data, offset, length, nbytes, f"{location!r}")

    def _open(self, location: str) -> ByteSource | None:
        if location not in self.opened:
            try:
                found = self.source.beside(location)
                # a file beside the model is read like the model: through a block cache
                self.opened[location] = found if isinstance(found, CachedSource) else CachedSource(found)
            except TensorloupeError as e:
                self.opened[location] = None
                self.warnings.append(f"the external data file {location!r} cannot be opened: "
                                     f"{e.message}")
        return self.opened[location]


def checked_location(location: str, error, name: str) -> str:
    """An external data location that stays in the model's folder: relative, no '..' (onnx's
    checker refuses the same), no empty or drive-letter paths; returned with '/' separators."""
    path = inside_folder(location)
    if path is None:
        raise error(FormatError, f"tensor {name!r}: its external data location {location!r} is "
                    "not a file name inside the model's folder (absolute paths and '..' are "
                    "refused)", found=repr(location)[:200])
    return path
