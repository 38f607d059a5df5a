"""HDF5 files as h5py writes them: every dataset a Tensor descriptor, every attribute metadata.

A contiguous dataset's bytes are read in place (its address and size from the layout message);
a compact one's bytes are inside its object header (read there too); a chunked one is read
through ChunkedSource, which decodes the chunks a view needs. A dataset tensorloupe cannot read
(an unsupported filter, datatype or chunk index) keeps its name and shape with a problem.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...errors import LOW_LEVEL_ERRORS, ErrorFactory, FormatError, TensorloupeError, UnsupportedError
from ...model import Checkpoint, Tensor
from ...source import ByteSource
from . import links, messages
from .attributes import Attributes
from .chunks import FILTER_NAMES, ChunkedSource, problem_of
from .file import FORMAT, SIGNATURE, H5File, open_file
from .groups import Obj, walk

MAX_METADATA = 10_000          # attributes kept as metadata


def sniff(head: bytes, size: int, name: str) -> bool:
    return head.startswith(SIGNATURE)


def read(source: ByteSource, fmt: str = FORMAT) -> Checkpoint:
    try:
        return _read(source, fmt)
    except TensorloupeError as e:
        raise e.located(file=source.name, format=fmt)
    except LOW_LEVEL_ERRORS as e:
        raise ErrorFactory(source.name, fmt)(
            FormatError, f"malformed HDF5 file: {type(e).__name__}") from e


def _read(source: ByteSource, fmt: str, follow: bool = True) -> Checkpoint:
    """`follow`: external links are followed into the files they name beside this one."""
    h5, root, facts = open_file(source)
    warnings: list[str] = []
    found_links: list = []
    objects = walk(h5, root, warnings, found_links)
    attributes = Attributes(h5)
    metadata: dict = {}
    tensors = []
    for obj in objects:
        for data, at in _attribute_messages(h5, obj, warnings):
            if len(metadata) >= MAX_METADATA:
                break
            key, value = attributes.read(data, at)
            metadata[f"{obj.path or '/'}@{key}"] = value
        if obj.is_dataset:
            tensor = _dataset(h5, obj)
            if tensor is not None:
                tensors.append(tensor)
                if tensor.problem:
                    warnings.append(f"tensor {tensor.name!r}: {tensor.problem}")
    extras = {"hdf5": {**facts, "objects": len(objects),
                       "offset_size": h5.offset_size, "length_size": h5.length_size}}
    sources = [source]
    if found_links:
        resolved, described, said = links.resolve({o.path: o for o in objects}, found_links)
        tensors += _linked(tensors, resolved)
        warnings += said
        extras["hdf5"]["links"] = described
        if any(e["kind"] == "external" for e in described.values()):
            from .external import follow as follow_external
            reached, opened = follow_external(
                source, described, warnings,
                (lambda other: _linked_file(other, fmt)) if follow else _not_followed)
            tensors += reached
            sources += opened
    return Checkpoint(fmt, source.name, source.size + sum(s.size for s in sources[1:]), tensors,
                      metadata=metadata, warnings=warnings, extras=extras, sources=sources)


def _linked_file(other: ByteSource, fmt: str) -> Checkpoint:
    """Another HDF5 file an external link names, read without following its own."""
    try:
        return _read(other, fmt, follow=False)
    except LOW_LEVEL_ERRORS as e:
        raise FormatError(f"malformed HDF5 file: {type(e).__name__}", file=other.name) from e


def _not_followed(other: ByteSource) -> Checkpoint:
    """A file reached through an external link does not follow its own (external.py)."""
    raise UnsupportedError("it is reached through an external link, and external links are "
                           "followed one file deep", file=other.name)


def _attribute_messages(h5: H5File, obj: Obj, warnings: list[str]) -> list[tuple[bytes, int]]:
    """(bytes, where) of the object's attribute messages: in its header, then those kept in
    dense storage (an attribute info message with a fractal heap, dense.py). Dense ones that
    cannot be read are said, and the file opens (its datasets do not depend on them)."""
    out = [(m.data, m.at) for m in obj.all(messages.ATTRIBUTE)]
    info = obj.first(messages.ATTRIBUTE_INFO)
    if info is not None:
        try:
            heap, index = messages.attribute_heap(h5, info.data, info.at)
            if h5.defined(heap):
                from .dense import attributes
                out += attributes(h5, heap, index, repr(obj.path or "/"))
        except TensorloupeError as e:
            warnings.append(f"{obj.path or '/'}: its attributes in dense storage cannot be read: "
                            f"{e.message}")
    return out


def _linked(tensors: list[Tensor], resolved: list) -> list[Tensor]:
    """A tensor for each soft link that reaches a dataset: its target's, under the link's path."""
    by_name = {t.name: t for t in tensors}
    out = []
    for r in resolved:
        target = by_name.get(r.target) if r.target is not None else None
        if target is not None:
            out.append(replace(target, name=r.path, info={**target.info, "soft link to": "/" + r.target}))
    return out


def _dataset(h5: H5File, obj: Obj) -> Tensor | None:
    space_m, type_m, layout_m = (obj.first(messages.DATASPACE), obj.first(messages.DATATYPE),
                                 obj.first(messages.LAYOUT))
    if space_m is None or type_m is None:
        raise h5.fail(f"dataset {obj.path!r} has no dataspace or datatype message",
                      h5.base + obj.address)
    if type_m.flags & 0x02:
        return _problem(obj, (), "F32", "its datatype is a shared (committed) type, which "
                        "tensorloupe does not follow")
    kind = messages.datatype(h5, type_m.data, type_m.at)
    space = messages.dataspace(h5, space_m.data, space_m.at)
    shape = space.shape or ()
    if space.shape is None or (kind.dtype is None and kind.text):
        return None                  # null dataspaces and string data are not tensors
    if kind.dtype is None:
        return _problem(obj, shape, f"H5_{messages.CLASS_NAMES[kind.kind].upper()}_{kind.size}"
                        if kind.kind < len(messages.CLASS_NAMES) else "H5_UNKNOWN", kind.why)
    try:
        lay = messages.layout(h5, layout_m.data, layout_m.at)
    except TensorloupeError as e:
        return _problem(obj, shape, kind.dtype, e.message)
    nbytes = math.prod(shape) * kind.size
    info = {"layout": lay.kind}
    common = dict(big_endian=kind.big_endian)
    if lay.kind == "compact":
        if len(lay.data) < nbytes:
            return _problem(obj, shape, kind.dtype, f"its compact data holds {len(lay.data):,} "
                            f"bytes, not {nbytes:,}")
        # in place: the bytes inside the object header (its layout message), not a copy
        return Tensor(obj.path, kind.dtype, shape, layout_m.at + lay.data_at, nbytes, h5.source,
                      info=info, **common)
    if lay.kind == "contiguous":
        if not h5.defined(lay.address):
            info["unwritten"] = True  # never written: h5py reads it as the fill value
            fill = _fill(h5, obj, kind.size) or bytes(kind.size)
            return Tensor(obj.path, kind.dtype, shape, 0, nbytes,
                          FillSource(fill, nbytes, h5.source), info=info, **common)
        if lay.size < nbytes:
            return _problem(obj, shape, kind.dtype, f"its layout stores {lay.size:,} bytes, not "
                            f"the {nbytes:,} its shape needs")
        try:
            at = h5.check(lay.address, nbytes, f"the data of dataset {obj.path!r}")
        except TensorloupeError as e:
            return _problem(obj, shape, kind.dtype, e.message)
        return Tensor(obj.path, kind.dtype, shape, at, nbytes, h5.source, info=info, **common)
    if lay.kind == "chunked":
        pipeline_m = obj.first(messages.FILTERS)
        pipeline = messages.filters(h5, pipeline_m.data, pipeline_m.at) if pipeline_m else []
        if len(lay.chunk) != len(shape) or not all(lay.chunk):
            return _problem(obj, shape, kind.dtype, f"its chunk shape {list(lay.chunk)} does not "
                            f"fit its shape {list(shape)}")
        info.update(chunk=list(lay.chunk), index=lay.index,
                    filters=[FILTER_NAMES.get(f.id, f.name or str(f.id)) for f in pipeline])
        why = problem_of(lay, pipeline, shape, kind.size)
        if why:
            return _problem(obj, shape, kind.dtype, why, info)
        source = ChunkedSource(h5, lay, pipeline, shape, kind.size, _fill(h5, obj, kind.size),
                               repr(obj.path), space.maxshape)
        return Tensor(obj.path, kind.dtype, shape, 0, nbytes, source, info=info, **common)
    return _problem(obj, shape, kind.dtype, f"its layout is {lay.kind}, which tensorloupe does "
                    "not read")


class FillSource(ByteSource):
    """A dataset never written: its fill value repeated, made for the bytes a read asks (a
    declared shape of 2**60 elements costs nothing until read, and a read is what it asks)."""

    def __init__(self, element: bytes, size: int, file: ByteSource):
        super().__init__()
        self.element, self.size, self.file, self.name = element, size, file, file.name

    def root(self) -> ByteSource:
        return self.file.root()

    def known_file_offset(self, offset: int) -> int | None:
        return None

    def file_offset(self, offset: int) -> int:
        return 0

    def _read(self, offset: int, n: int) -> bytes:
        e = len(self.element)
        start = offset % e
        return self._count((self.element * (-(-(start + n) // e)))[start:start + n])


def _fill(h5: H5File, obj: Obj, element: int) -> bytes | None:
    m = obj.first(messages.FILL)
    if m is None:
        return None
    value = messages.fill_value(h5, m.data, m.at)
    return value if value is not None and len(value) == element else None


def _problem(obj: Obj, shape, dtype: str, why: str, info: dict | None = None) -> Tensor:
    return Tensor(obj.path, dtype, tuple(shape), 0, 0, None, problem=why, info=info or {})
