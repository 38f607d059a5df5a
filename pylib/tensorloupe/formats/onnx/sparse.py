"""ONNX sparse tensors (GraphProto.sparse_initializer, a Constant's sparse_value) shown as the
dense tensors they stand for.

onnx.proto, message SparseTensorProto: values (1: a TensorProto of shape [NNZ]), indices (2: an
INT64 TensorProto, [NNZ] linear indices into the row-major dense tensor, or [NNZ, rank]
coordinates), dims (3: the dense shape). Every element not listed is 0. onnx's checker requires
the indices in ascending order without repeats (checker.cc, check_sparse_tensor_indices_1/2):
here an index out of the shape, out of order or repeated is the file's FormatError.

The dense tensor's bytes are computed on demand (SparseSource): a read of any range holds zeros
and the listed values that fall in it. Its values and indices are read once, whole, on the first
read (at most MAX_NONZERO of them; the open reads neither).
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_left
from typing import NamedTuple

from ...errors import LOW_LEVEL_ERRORS, FormatError, LimitError, TensorloupeError
from ...model import Tensor
from ...source import ByteSource
from . import tensors
from .wire import LENGTH, VARINT, Span, Wire, signed64

VALUES, INDICES, DIMS = 1, 2, 3
INT64 = 7
MAX_NONZERO = 1 << 22          # listed values read to compute a dense range (~32 MB of indices)
# Types whose zero is all-zero bytes and whose elements are whole bytes: the rest (packed 4-, 2-
# and 6-bit types, E8M0 which has no zero) are listed with the reason, not shown.
DENSE_DTYPES = {"F32", "F16", "BF16", "F64", "U8", "I8", "U16", "I16", "I32", "I64", "U32", "U64",
                "BOOL", "C64", "C128", "F8_E4M3", "F8_E4M3FNUZ", "F8_E5M2", "F8_E5M2FNUZ"}


class SparseStored(NamedTuple):
    """A sparse tensor as its fields say: its two TensorProtos and the dense shape."""
    name: str
    dims: tuple[int, ...]
    values: tensors.Stored | None
    indices: tensors.Stored | None
    at: int


def parse(wire: Wire, span: Span, name: str = "") -> SparseStored:
    """`name`: a Constant node's (its values TensorProto's name otherwise, as onnx names a
    sparse initializer by its values)."""
    values = indices = None
    dims: list[int] = []
    for f in wire.fields(span):
        if f.number == VALUES and f.wire == LENGTH:
            values = tensors.parse(wire, f.value)
        elif f.number == INDICES and f.wire == LENGTH:
            indices = tensors.parse(wire, f.value)
        elif f.number == DIMS:
            dims += (wire.packed_varints(f.value, tensors.MAX_DIMS + 1, "a sparse tensor's dims")
                     if f.wire == LENGTH else [f.value] if f.wire == VARINT else [])
            if len(dims) > tensors.MAX_DIMS:
                raise wire.error(LimitError, f"a sparse tensor has more than {tensors.MAX_DIMS:,} "
                                 "dims", offset=f.at, expected=f"at most {tensors.MAX_DIMS:,}")
    shape = tuple(signed64(d) for d in dims)
    name = name or (values.name if values is not None else "")
    if any(d < 0 for d in shape):
        raise wire.error(FormatError, f"sparse tensor {name!r} has a negative dimension",
                         offset=span.offset, found=f"dims {list(shape)}")
    return SparseStored(name, shape, values, indices, span.offset)


def shape_problem(s: SparseStored, values: Tensor | None, indices: Tensor | None) -> str | None:
    """Why the dense tensor cannot be shown from these parts (None: it can)."""
    if values is None or indices is None:
        return f"its {'values' if values is None else 'indices'} tensor is missing"
    for part in (values, indices):
        if part.problem:
            return f"its {'values' if part is values else 'indices'} cannot be read ({part.problem})"
    if indices.info.get("onnx_type") != "INT64":
        return f"its indices are {indices.info.get('onnx_type')}, not INT64"
    if values.dtype not in DENSE_DTYPES:
        return f"sparse values of type {values.info.get('onnx_type')} are not shown as a dense tensor"
    nnz = values.shape[0] if len(values.shape) == 1 else None
    rank = len(s.dims)
    if nnz is None:
        return f"its values have shape {list(values.shape)}, not [NNZ]"
    if indices.shape not in ((nnz,), (nnz, rank)):
        return (f"its indices have shape {list(indices.shape)} for {nnz:,} values of a rank-{rank:,} "
                f"tensor (expected [{nnz}] or [{nnz}, {rank}])")
    if nnz > MAX_NONZERO:
        return f"it lists {nnz:,} values, more than the {MAX_NONZERO:,} read to show it dense"
    if nnz > math.prod(s.dims):
        return f"it lists {nnz:,} values for {math.prod(s.dims):,} elements"
    return None


def dense_tensor(s: SparseStored, values: Tensor, indices: Tensor, info: dict) -> Tensor:
    numel = math.prod(s.dims)
    item = tensors.stored_bytes(values.dtype, 1)     # whole-byte types only (DENSE_DTYPES)
    coordinates = len(indices.shape) == 2 and len(s.dims) != 1
    info = dict(info, sparse={"nonzero": values.numel, "indices": "coordinates" if coordinates
                              else "linear", "stored_type": values.info.get("onnx_type")})
    info["computed as"] = (f"dense from {values.numel:,} listed values at their "
                           f"{'coordinates' if coordinates else 'linear indices'} (COO), 0 elsewhere")
    source = SparseSource(s.name, values, indices, s.dims, item)
    return Tensor(s.name, values.dtype, s.dims, 0, numel * item, source, info=info,
                  parts=(values, indices))


class SparseSource(ByteSource):
    """The dense tensor's bytes (row-major, little-endian)."""

    def __init__(self, name: str, values: Tensor, indices: Tensor, dims: tuple, item: int):
        super().__init__()
        self.tensor_name, self.values, self.indices, self.dims, self.item = name, values, indices, dims, item
        self.name = values.source.name
        self.size = math.prod(dims) * item
        self._linear: list[int] | None = None
        self._data: bytes = b""

    @property
    def waits(self) -> bool:
        return self.values.source.waits

    def root(self) -> ByteSource:
        return self.values.source.root()

    def known_file_offset(self, offset: int) -> int | None:
        return self.values.known_file_offset

    def file_offset(self, offset: int) -> int:
        return self.values.locate()

    def _load(self) -> None:
        """Values and indices, read once; the indices checked and made linear."""
        if self._linear is not None:
            return
        try:
            v, i = self.values, self.indices
            data = v.source.read_data(v.offset, v.nbytes) if v.nbytes else b""
            raw = i.source.read_data(i.offset, i.nbytes) if i.nbytes else b""
            numbers = list(struct.unpack(f"<{i.numel}q", raw))
            self._linear = _linear(numbers, self.dims, len(i.shape) == 2 and len(self.dims) != 1,
                                   self.tensor_name)
            self._data = data
        except TensorloupeError as e:
            raise e.located(file=self.name)
        except LOW_LEVEL_ERRORS as e:
            raise FormatError(f"sparse tensor {self.tensor_name!r} cannot be read: {e}",
                              file=self.name) from e

    def _read(self, offset: int, n: int) -> bytes:
        self._load()
        item, linear = self.item, self._linear
        e0, e1 = offset // item, -(-(offset + n) // item)
        out = bytearray((e1 - e0) * item)
        for k in range(bisect_left(linear, e0), bisect_left(linear, e1)):
            at = (linear[k] - e0) * item
            out[at:at + item] = self._data[k * item:(k + 1) * item]
        skip = offset - e0 * item
        return self._count(bytes(out[skip:skip + n]))


def _linear(numbers: list[int], dims: tuple, coordinates: bool, name: str) -> list[int]:
    """Linear indices, checked: inside the shape, ascending, no repeats."""
    numel = math.prod(dims)
    if coordinates:
        rank = len(dims)
        strides = [math.prod(dims[k + 1:]) for k in range(rank)]
        linear = []
        for n in range(len(numbers) // rank):
            point = numbers[n * rank:(n + 1) * rank]
            if any(not 0 <= c < d for c, d in zip(point, dims)):
                raise FormatError(f"sparse tensor {name!r}: coordinate {point} is outside its "
                                  f"shape {list(dims)}", expected=f"each below {list(dims)}")
            linear.append(sum(c * s for c, s in zip(point, strides)))
    else:
        linear = numbers
    previous = -1
    for k, index in enumerate(linear):
        if not 0 <= index < numel:
            raise FormatError(f"sparse tensor {name!r}: index {index:,} (value {k:,}) is outside its "
                              f"{numel:,} elements", expected=f"0 to {numel - 1:,}")
        if index <= previous:
            raise FormatError(f"sparse tensor {name!r}: index {index:,} (value {k:,}) is not after "
                              f"index {previous:,} (onnx requires ascending indices, no repeats)",
                              expected="ascending indices")
        previous = index
    return linear
