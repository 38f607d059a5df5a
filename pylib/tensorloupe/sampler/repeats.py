"""What an exact pass over a tensor costs, bounded by what the file's bytes can hold.

A torch view can repeat its storage: `torch.zeros(1).expand(2**40)` is saved as one stored
element with size (2**40,) and stride (0,), a 2 KB file whose exact statistics, element by
element, would take hours. Along a dimension of stride 0 every index reads the same elements, so
the tensor is its *distinct view* (those dimensions dropped) repeated `repeats` times, and exact
statistics and histograms are the distinct view's with every count multiplied (min, max, mean,
standard deviation and fractions are unchanged by repetition). That is exact, and as cheap as the
bytes stored.

Other overlapping views (nonzero strides that make elements alias, as `as_strided` can) are not
a product of repetitions; an exact pass over one costs more elements than the storage holds. So
an exact pass over more than `default_limit` elements (a small multiple of the elements the
view's bytes hold, never below MIN_LIMIT) is refused before it starts, naming its cost, unless
the caller allows more (`max_elements`, CLI `--max-elements`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..errors import LimitError
from ..model import Tensor
from .gather import dtype_of
from .layout import storage_view
from .stats import Stats

# An exact pass may decode this many times the elements the view's bytes hold (overlapping
# views reread some), and always this many elements (~1-3 s in CPython, 16M values).
SPAN_FACTOR = 16
MIN_LIMIT = 1 << 24


@dataclass(frozen=True)
class ExactCost:
    """What an exact pass over a tensor decodes: `elements` values, each standing for `repeats`
    elements of the tensor (numel = elements * repeats), and the elements allowed without asking."""
    numel: int
    elements: int
    repeats: int
    limit: int

    def to_json(self) -> dict:
        return {"numel": self.numel, "elements": self.elements, "repeats": self.repeats,
                "limit": self.limit}

    def said(self) -> str:
        """The cost in words: '4,000 elements' or '1 stored element × 1,099,511,627,776 repeats'."""
        if self.repeats == 1:
            return f"{self.elements:,} elements"
        one = "element" if self.elements == 1 else "elements"
        return f"{self.elements:,} distinct {one} × {self.repeats:,} repeats (stride 0)"


def distinct_view(tensor: Tensor) -> tuple[Tensor, int]:
    """The tensor without its stride-0 dimensions, and how many times it repeats in the tensor."""
    if tensor.contiguous or not tensor.shape:
        return tensor, 1
    kept = [(n, s) for n, s in zip(tensor.shape, tensor.element_strides()) if s != 0 or n <= 1]
    if len(kept) == len(tensor.shape):
        return tensor, 1
    repeats = math.prod(n for n, s in zip(tensor.shape, tensor.element_strides()) if s == 0 and n > 1)
    shape = tuple(n for n, _ in kept)
    view = replace(tensor, shape=shape, strides=tuple(s for _, s in kept))
    return view, repeats


def default_limit(tensor: Tensor) -> int:
    """The elements an exact pass may decode unasked: a small multiple of what its bytes hold."""
    info = dtype_of(tensor)
    held = tensor.nbytes // info.block_bytes * info.block_elems if info.block_bytes else 0
    return max(MIN_LIMIT, SPAN_FACTOR * held)


def exact_cost(tensor: Tensor, max_elements: int | None = None) -> ExactCost:
    view, repeats = distinct_view(tensor)
    limit = default_limit(tensor) if max_elements is None else max_elements
    return ExactCost(tensor.numel, view.numel, repeats, limit)


def checked_view(tensor: Tensor, max_elements: int | None = None) -> tuple[Tensor, int, ExactCost]:
    """The distinct view an exact pass reads (in storage order, layout.py), its repeats and cost; refused up front (LimitError)
    if it would decode more elements than allowed."""
    cost = exact_cost(tensor, max_elements)
    if cost.elements > cost.limit:
        asked = "the limit you gave" if max_elements is not None else (
            f"the default limit: {SPAN_FACTOR} times the elements its {tensor.nbytes:,} bytes "
            f"hold, at least {MIN_LIMIT:,}")
        raise LimitError(f"an exact pass over tensor {tensor.name!r} would decode "
                         f"{cost.elements:,} elements ({cost.said()}): more than {asked}; its "
                         "view reads the same stored bytes many times over. Sampled figures "
                         "need no such pass; to run it anyway, allow it with --max-elements "
                         f"{cost.elements}", file=getattr(tensor.source, "name", None),
                         expected=f"at most {cost.limit:,} elements", found=f"{cost.elements:,}")
    view, repeats = distinct_view(tensor)
    return storage_view(view), repeats, cost


def repeated(stats: Stats, repeats: int) -> Stats:
    """The statistics of values each repeated `repeats` times: the counts and the sum of squared
    deviations multiply; min, max, mean, std and the near-zero fraction stay."""
    if repeats == 1:
        return stats
    k = repeats
    return replace(stats, count=stats.count * k, finite=stats.finite * k,
                   exact_zeros=stats.exact_zeros * k, nan=stats.nan * k, posinf=stats.posinf * k,
                   neginf=stats.neginf * k, m2=stats.m2 * k)
