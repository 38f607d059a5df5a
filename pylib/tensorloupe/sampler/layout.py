"""A strided tensor's elements in the order its storage holds them, and what reading them costs.

A torch view (`w.t()`, `x[:, ::2]`, `x.expand(...)`) or a Fortran-order `.npy` keeps its storage
in another order than its row-major index. A window of consecutive row-major indices of a
transposed matrix is a column of its storage: one element every row's worth of bytes, so the
reads that fetch it span nearly the whole tensor. Statistics, histograms and health numbers do not
depend on the order of the elements, so sampled views read the *storage view* instead: the same
elements with the dimensions ordered as the storage lays them out (largest stride outermost;
stride-0 dimensions, which repeat the elements, outermost of all). For a transposed tensor or a
Fortran array that view is contiguous and a window is one range of bytes, as for any other tensor.

`planned_bytes` is the one statement of what `gather` reads for a set of positions (the same
runs, coalesced the same way), so a stated cost and the bytes read are one computation.
"""

from __future__ import annotations

from dataclasses import replace

from ..model import Tensor, contiguous_strides
from .gather import dtype_of, range_plan, storage_positions


def storage_view(tensor: Tensor) -> Tensor:
    """The tensor's elements in storage order (see the module docstring); the tensor itself when
    it is contiguous. Its row-major index k is the k-th element of that order, not of the tensor's."""
    if tensor.contiguous or not tensor.shape:
        return tensor
    dims = [(n, s) for n, s in zip(tensor.shape, tensor.element_strides()) if n != 1]
    # stride 0 first (a repeat of everything inside it), then the largest stride outermost;
    # sorted() is stable, so equal strides (an overlapping view) keep the tensor's order
    dims.sort(key=lambda d: (d[1] != 0, -d[1]))
    shape = tuple(n for n, _ in dims)
    strides = tuple(s for _, s in dims)
    if shape == tuple(tensor.shape) and strides == tuple(tensor.element_strides()):
        return tensor
    return replace(tensor, shape=shape,
                   strides=None if strides == contiguous_strides(shape) else strides)


def planned_bytes(tensor: Tensor, positions) -> int:
    """Bytes `gather(tensor, positions)` asks of the source (its coalesced ranges)."""
    return sum(n for _, n in range_plan(tensor, dtype_of(tensor), sorted(set(positions))))


# A strided window of up to this many elements is costed exactly, element by element (~20 ms);
# a longer one (an exact pass) by the bytes between its first and last element, an upper bound.
EXACT_PLAN_ELEMS = 1 << 16


def window_cost(tensor: Tensor, start: int, count: int) -> tuple[int, bool]:
    """(bytes `gather_range(tensor, start, count)` asks of the source, whether that is exact
    rather than an upper bound): the whole blocks a contiguous window touches, or the coalesced
    ranges of a strided one's elements."""
    if count <= 0:
        return 0, True
    info = dtype_of(tensor)
    if tensor.contiguous:
        first, last = start // info.block_elems, (start + count - 1) // info.block_elems
        return (last - first + 1) * info.block_bytes, True
    if count > EXACT_PLAN_ELEMS and _ascending(tensor):
        # every element lies between the first's and the last's; gather reads no block outside
        lo, hi = storage_positions(tensor, (start, start + count - 1))
        return (hi // info.block_elems - lo // info.block_elems + 1) * info.block_bytes, False
    return planned_bytes(tensor, storage_positions(tensor, range(start, start + count))), True


def window_bytes(tensor: Tensor, start: int, count: int) -> int:
    """`window_cost`'s bytes: at least what the window asks of the source."""
    return window_cost(tensor, start, count)[0]


def _ascending(tensor: Tensor) -> bool:
    """Whether row-major order is ascending storage order (each stride passes everything inside
    it): a storage view of elements that do not overlap."""
    inner = 0
    for n, s in zip(reversed(tensor.shape), reversed(tensor.element_strides())):
        if n > 1 and s <= inner:
            return False
        inner += (n - 1) * s
    return True


def costed(tensor: Tensor) -> bool:
    """Whether the tensor's values are read from its own stored bytes (so `planned_bytes` is what
    a read asks), not computed from parts (a dequantised weight, an adapter's ΔW)."""
    return not tensor.parts and all(getattr(tensor.source, a, None) is None for a in ("cells", "elements"))

