"""Tensor bytes as a NumPy array, exactly, for `Tensor.numpy()` in a notebook.

NumPy is optional (the runtime is the standard library; Pyodide has no numpy offline): it is
imported here on call, and its absence is said in a sentence that names it. Where NumPy has the
tensor's dtype the array has it too, bit for bit (the raw bytes through `frombuffer`); where it
has none (BF16, the float8/6/4 types, ggml quant blocks) the exact decoded values are float32,
which holds every one of them, as npy.py writes them.
"""

from __future__ import annotations

import math

from ..errors import UnsupportedError
from .plain import DType

# our dtype -> (numpy descr, struct code per element; None: bytes of bools). npy.py writes
# the same dtypes into .npy files.
NUMPY_DTYPES = {
    "BOOL": ("|b1", None), "U8": ("|u1", "B"), "I8": ("|i1", "b"), "U16": ("<u2", "H"),
    "I16": ("<i2", "h"), "U32": ("<u4", "I"), "I32": ("<i4", "i"), "U64": ("<u8", "Q"),
    "I64": ("<i8", "q"), "F16": ("<f2", "e"), "F32": ("<f4", "f"), "F64": ("<f8", "d"),
    "C64": ("<c8", "f"), "C128": ("<c16", "d"),
}
FALLBACK = ("<f4", "f")     # exact for every type narrower than float32


def numpy_module():
    try:
        import numpy
    except ImportError:
        raise UnsupportedError("Tensor.numpy() needs numpy, which is not installed (pip install "
                               "numpy); tensorloupe.values(tensor, 0, tensor.numel) gives the "
                               "same exact values as Python numbers") from None
    return numpy


def to_array(data: bytes, info: DType, shape: tuple[int, ...], element_strides: tuple[int, ...],
             big_endian: bool, contiguous: bool):
    """The elements `data` holds (from element 0 to the last one the strides reach) as an
    array of `shape`; a view's elements picked by its element strides."""
    np = numpy_module()
    descr = NUMPY_DTYPES.get(info.name, (None,))[0]
    if descr is not None:
        if big_endian and descr[0] == "<":
            descr = ">" + descr[1:]
        flat = np.frombuffer(data, dtype=descr)
    else:
        flat = np.array(info.decode(data, big_endian), dtype=FALLBACK[0])
    if contiguous:
        return flat[:math.prod(shape)].reshape(shape).copy()
    from numpy.lib.stride_tricks import as_strided
    step = flat.itemsize
    return as_strided(flat, shape, [s * step for s in element_strides]).copy()

