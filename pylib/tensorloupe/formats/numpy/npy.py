""".npy files (numpy.save): one array, its header (header.py), then its elements in place.

An object array (descr 'O') is a pickle after the header (numpy.save pickles it; numpy.load
unpickles it only with allow_pickle=True): it is listed, without values, and its pickle is read as
data by the allow-list machine for the safety report, never run.
"""

from __future__ import annotations

from ...errors import ErrorFactory, TensorloupeError, TruncatedError
from ...model import Checkpoint, Tensor
from ...source import ByteSource
from . import header as npy_header

FORMAT = "npy"
PEEK = 256            # numpy pads the header to 64 bytes: most headers are 128 bytes


def sniff(head: bytes, size: int, name: str) -> bool:
    return head.startswith(npy_header.MAGIC)


def read(source: ByteSource) -> Checkpoint:
    error = ErrorFactory(source.name, FORMAT)
    array = read_array(source, 0, source.size, source.name.rsplit(".", 1)[0] or "array", error)
    return Checkpoint(FORMAT, source.name, source.size, [array.tensor], metadata=array.metadata,
                      warnings=array.warnings, extras=array.extras, sources=[source])


class Array:
    """One .npy's tensor and what was said about it."""

    def __init__(self, tensor: Tensor, metadata: dict, warnings: list, extras: dict):
        self.tensor, self.metadata, self.warnings, self.extras = tensor, metadata, warnings, extras


def read_array(source: ByteSource, base: int, length: int, name: str, error,
               prefix: bytes | None = None) -> Array:
    """The .npy at [base, base + length) of `source`, as the tensor `name`; `prefix`: its first
    min(length, PEEK) bytes if the caller has read them already."""
    if prefix is None:
        prefix = source.read(base, min(length, PEEK))
    version, n = npy_header.header_length(prefix, error)
    start = npy_header.PREFIX + npy_header.LENGTHS[version].size
    if start + n > length:
        raise error(TruncatedError, "the .npy header runs past the end of the file",
                    offset=base + start, expected=f"{n:,} header bytes", found=length - start)
    raw = prefix[start:start + n] if start + n <= len(prefix) else source.read(base + start, n)
    head = npy_header.parse(prefix, raw, error)
    dtype, big, itemsize, why = npy_header.dtype_of(head.descr)
    meta = {"npy_version": f"{version}.0", "descr": head.descr if isinstance(head.descr, str)
            else "structured", "fortran_order": head.fortran_order}
    offset = base + head.data_offset
    rest = length - head.data_offset
    if dtype == npy_header.OBJECT:
        return _object_array(source, name, head, offset, rest, meta, error)
    if dtype is None:
        t = Tensor(name, str(meta["descr"]), head.shape, offset, 0, source, problem=why,
                   info={"descr": meta["descr"]})
        return Array(t, meta, [f"tensor {name!r}: {why}"], {})
    nbytes = npy_header.nbytes_of(head.shape, itemsize)
    if nbytes > rest:
        raise error(TruncatedError, f"array {name!r} of shape {list(head.shape)} {head.descr} "
                    f"needs {nbytes:,} bytes after its header, the file holds {rest:,}",
                    offset=offset, expected=nbytes, found=rest)
    warnings = []
    if nbytes < rest:
        warnings.append(f"{rest - nbytes:,} bytes follow array {name!r} (numpy.load ignores them)")
    t = Tensor(name, dtype, head.shape, offset, nbytes, source,
               strides=npy_header.strides_of(head.shape, head.fortran_order), big_endian=big,
               info={"descr": head.descr})
    return Array(t, meta, warnings, {})


def _object_array(source, name, head, offset, rest, meta, error) -> Array:
    """An object array: its pickle, read as data for the safety report (formats/pytorch)."""
    from ..pytorch.common import load_pickle, storage_loader
    from ..pytorch.safety import safety_report, safety_warnings
    from ...unpickling.objects import LIMITS
    problem = ("an object array: its elements are Python objects in a pickle (numpy.load needs "
               "allow_pickle=True to run it), not numbers")
    t = Tensor(name, "OBJECT", head.shape, offset, rest, source, problem=problem,
               info={"descr": "O"})
    warnings = [f"tensor {name!r}: {problem}"]
    if rest > LIMITS.max_bytes:
        warnings.append(f"the pickle of {name!r} ({rest:,} bytes) is larger than the "
                        f"{LIMITS.max_bytes:,} read for a safety report: not analysed")
        return Array(t, meta, warnings, {})
    try:
        result = load_pickle(source.read(offset, rest), storage_loader())
    except TensorloupeError as e:
        from ..pytorch.loadpath import named_dangerous
        dangerous = named_dangerous(e)
        warnings.append(f"the pickle of {name!r} cannot be read: {e.message}"
                        + (f"; before it broke it named {', '.join(dangerous)}" if dangerous else ""))
        safety = {"globals": [], "dangerous": dangerous, "calls": [], "notes": [], "opcodes": {}}
        return Array(t, meta, warnings, {"safety": safety})
    safety = safety_report([result])
    return Array(t, meta, warnings + safety_warnings(safety), {"safety": safety})
