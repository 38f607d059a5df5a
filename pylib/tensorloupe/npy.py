"""A tensor's values (or a tile of them) as a NumPy `.npy` file, written with the standard library.

Format 1.0 (numpy/lib/format.py): the magic b"\\x93NUMPY", version 1.0, a little-endian uint16
header length, then a Python-literal dict {'descr', 'fortran_order', 'shape'} padded with spaces
and ended by a newline so the data starts on a 64-byte boundary; then the elements, row-major.

The values are the exact decoded elements. Where NumPy has the tensor's dtype, the file has it
too (bit for bit: an F16 tensor is written as '<f2'); where it has none (BF16, the float8/6/4
types, ggml quant blocks) the values are written as float32, which holds every one of them
exactly, and `export` says which dtype was written.
"""

from __future__ import annotations

import math
import struct
from typing import NamedTuple

from .dtypes.arrays import FALLBACK, NUMPY_DTYPES
from .errors import UsageError
from .model import Tensor
from .sampler.sampling import grid, values

MAGIC = b"\x93NUMPY\x01\x00"
ALIGN = 64
# Whole-tensor exports are built in memory (the browser hands them to a download link).
MAX_ELEMENTS = 1 << 25

class Export(NamedTuple):
    data: bytes               # the .npy file
    descr: str                # the NumPy dtype written ('<f4', ...)
    shape: tuple[int, ...]
    exact_dtype: bool         # the file's dtype is the tensor's own


def npy_bytes(elements: list, shape: tuple[int, ...], dtype: str) -> Export:
    descr, code = NUMPY_DTYPES.get(dtype, FALLBACK)
    if len(elements) != math.prod(shape):
        raise UsageError(f"{len(elements):,} values do not fill shape {shape}")
    if code is None:
        body = bytes(1 if v else 0 for v in elements)
    elif descr[1] == "c":
        body = struct.pack(f"<{2 * len(elements)}{code}",
                           *(part for v in elements for part in (v.real, v.imag)))
    else:
        body = struct.pack(f"<{len(elements)}{code}", *elements)
    dims = "".join(f"{d}, " for d in shape) if len(shape) == 1 else ", ".join(map(str, shape))
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({dims}), }}"
    pad = -(len(MAGIC) + 2 + len(header) + 1) % ALIGN
    header = (header + " " * pad + "\n").encode("latin-1")
    return Export(MAGIC + struct.pack("<H", len(header)) + header + body, descr, tuple(shape),
                  dtype in NUMPY_DTYPES)


def export_tensor(tensor: Tensor, max_elements: int = MAX_ELEMENTS) -> Export:
    """Every element of the tensor, in its own shape."""
    if tensor.numel > max_elements:
        raise UsageError(f"tensor {tensor.name!r} has {tensor.numel:,} elements, more than the "
                         f"{max_elements:,} an export holds; export the visible tile instead")
    return npy_bytes(values(tensor, 0, tensor.numel), tensor.shape, tensor.dtype)


def export_tile(tensor: Tensor, region: tuple[int, int, int, int],
                plane: tuple[int, int] | None = None, index: dict[int, int] | None = None,
                max_elements: int = MAX_ELEMENTS) -> Export:
    """The elements of `region` (r0, r1, c0, c1) of a 2-D view, every one of them."""
    r0, r1, c0, c1 = region
    if (r1 - r0) * (c1 - c0) > max_elements:
        raise UsageError(f"the tile has {(r1 - r0) * (c1 - c0):,} elements, more than the "
                         f"{max_elements:,} an export holds")
    g = grid(tensor, r1 - r0, c1 - c0, region, plane, index)
    return npy_bytes(g.values, (g.rows, g.cols), tensor.dtype)
