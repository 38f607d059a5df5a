"""Compare two checkpoints tensor by tensor: what is only in one, what changed shape, what is
byte-identical (decided on the bytes), and how far the values moved (max|a−b|, mean|a−b|,
‖a−b‖/‖a‖, cosine, SNR), on the same element positions of both.

    cmp = tensorloupe.compare("model-bf16.safetensors", "model-Q8_0.gguf")
    print(cmp.summary["headline"])     # "Q8_0 vs BF16: median SNR 41.3 dB, worst blk.0.attn_v.weight 38.0 dB"

Sampled by default (a stated number of elements per tensor, in windows spread over the tensor,
the same positions on both sides); `exact=True` reads every element, in chunks, with progress and
cancel. A is the reference (the signal in SNR and the norm in the relative error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

from ..display import cut
from ..errors import Cancelled, LimitError, UsageError
from ..sampler.gather import dtype_of
from ..jsonable import json_number
from ..model import Checkpoint
from ..sampler.repeats import default_limit
from ..sampler.sampling import EXACT_CHUNK_ELEMS, plan_windows
from .metrics import CATEGORIES, Diff, bytes_comparable, first_difference, read_frame
from .summary import summarise

if TYPE_CHECKING:   # matching (namemap, roles) is imported by a comparison, not by `import tensorloupe`
    from .match import Pair

__all__ = ["compare", "compare_steps", "Comparison", "Row", "CATEGORIES", "DEFAULT_SAMPLES"]

DEFAULT_SAMPLES = 1 << 14


@dataclass
class Row:
    pair: Pair
    category: str
    diff: Diff | None = None
    exact: bool = False              # the statistics cover every element
    bytes_checked: bool = False      # identity was decided by reading every byte of both
    first_difference: int | None = None   # byte offset of the first differing byte
    message: str | None = None

    @property
    def name(self) -> str:
        return self.pair.name

    def to_json(self) -> dict:
        a, b = self.pair.a, self.pair.b
        out = {"name": self.name, "category": self.category,
               "a": a.label if a else None, "b": b.label if b else None,
               "a_dtype": a.tensor.dtype if a else None, "b_dtype": b.tensor.dtype if b else None,
               "a_shape": list(a.tensor.shape) if a else None, "b_shape": list(b.tensor.shape) if b else None,
               "dtype_changed": bool(a and b and a.tensor.dtype != b.tensor.dtype),
               "how": self.pair.how, "notes": self.pair.notes, "exact": self.exact,
               "bytes_checked": self.bytes_checked, "first_difference": self.first_difference,
               "message": self.message}
        empty = Diff().to_json()
        out.update(self.diff.to_json() if self.diff else {k: None for k in empty})
        return out


@dataclass
class Comparison:
    a: Checkpoint
    b: Checkpoint
    rows: list[Row]
    exact: bool
    samples: int | None
    name_map: str | None
    bytes_read: dict[str, int] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)

    def row(self, name: str) -> Row:
        for r in self.rows:
            if name in (r.name, r.pair.a and r.pair.a.label, r.pair.b and r.pair.b.label):
                return r
        raise UsageError(f"no tensor named {cut(name)!r} in either checkpoint")

    def close(self) -> None:
        self.a.close()
        self.b.close()

    def __enter__(self) -> "Comparison":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def to_json(self) -> dict:
        return {"a": _ckpt_json(self.a), "b": _ckpt_json(self.b),
                "mode": "exact" if self.exact else "sampled",
                "samples_per_tensor": None if self.exact else self.samples,
                "name_map": self.name_map, "bytes_read": self.bytes_read,
                "summary": _jsonable(self.summary), "tensors": [r.to_json() for r in self.rows]}


def _ckpt_json(ckpt: Checkpoint) -> dict:
    return {"name": ckpt.name, "format": ckpt.format, "tensors": len(ckpt.tensors)}


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return json_number(value)


def compare_steps(a: Checkpoint, b: Checkpoint, samples: int = DEFAULT_SAMPLES, exact: bool = False,
                  tensors: list[str] | None = None,
                  max_elements: int | None = None) -> Iterator[tuple[int, int] | Comparison]:
    """The comparison as steps: yields (tensors done, tensors to do) after every chunk read, so a
    caller can stop between chunks (the worker lets a cancel arrive); the last item is the
    Comparison. An exact comparison that would decode more elements than a side's bytes hold
    (a stride-0 view of 2**40 elements) is refused before anything is read (sampler.repeats),
    unless `max_elements` allows it."""
    if samples < 1:
        raise UsageError("samples must be at least 1")
    from .match import match
    pairs, arch = match(a, b)
    if tensors:
        wanted = set(tensors)
        pairs = [p for p in pairs if wanted & {p.name, p.a and p.a.label, p.b and p.b.label,
                                               p.a and p.a.tensor.name, p.b and p.b.tensor.name}]
        missing = wanted - {n for p in pairs for n in (p.name, p.a and p.a.label, p.b and p.b.label,
                                                       p.a and p.a.tensor.name, p.b and p.b.tensor.name)}
        if missing:
            raise UsageError(f"no tensor named {cut(sorted(missing)[0])!r} in either checkpoint")
    if exact:
        for pair in pairs:
            _check_exact_cost(pair, max_elements)
    before = (a.bytes_read(), b.bytes_read())
    rows = []
    for done, pair in enumerate(pairs):
        row = yield from _evaluate(pair, samples, exact, done, len(pairs))
        rows.append(row)
        yield done + 1, len(pairs)
    result = Comparison(a, b, rows, exact, samples, arch,
                        {"a": a.bytes_read() - before[0], "b": b.bytes_read() - before[1]})
    result.summary = summarise(result)
    yield result


def _check_exact_cost(pair: Pair, max_elements: int | None) -> None:
    """Refuse now an exact pass over a pair whose positions outnumber what its bytes hold."""
    if pair.a is None or pair.b is None or _unreadable(pair.a.tensor) or _unreadable(pair.b.tensor) \
            or pair.a.tensor.shape != pair.b.tensor.shape:
        return    # no values are read for these rows
    numel = pair.a.tensor.numel
    limit = max_elements if max_elements is not None else \
        max(default_limit(pair.a.tensor), default_limit(pair.b.tensor))
    if numel > limit:
        raise LimitError(f"an exact comparison of tensor {pair.name!r} would decode {numel:,} "
                         "elements on each side, more than its bytes hold (a view that repeats "
                         "them, stride 0?); compare a sample (without --exact), or allow it with "
                         f"--max-elements {numel}", expected=f"at most {limit:,} elements",
                         found=f"{numel:,}")


def compare(a: Checkpoint, b: Checkpoint, samples: int = DEFAULT_SAMPLES, exact: bool = False,
            tensors: list[str] | None = None,
            progress: Callable[[int, int], object] | None = None,
            max_elements: int | None = None) -> Comparison:
    """Compare two open checkpoints. `progress(done, total)` returning False (or raising
    Cancelled) stops the work with Cancelled."""
    for step in compare_steps(a, b, samples, exact, tensors, max_elements):
        if isinstance(step, Comparison):
            return step
        if progress is not None and progress(*step) is False:
            raise Cancelled("comparison cancelled")
    raise AssertionError("compare_steps ended without a result")


def _evaluate(pair: Pair, samples: int, exact: bool, done: int, total: int):
    a, b = pair.a, pair.b
    if a is None or b is None:
        return Row(pair, "only_in_a" if b is None else "only_in_b")
    problem = _unreadable(a.tensor) or _unreadable(b.tensor)
    if problem:
        return Row(pair, "unreadable", message=problem)
    if a.tensor.shape != b.tensor.shape and not (pair.regrouped and a.plain and b.plain):
        return Row(pair, "shape_changed",
                   message=f"shape {list(a.tensor.shape)} in A, {list(b.tensor.shape)} in B")
    first = None
    checked = bytes_comparable(a, b)
    if checked:
        first, _ = first_difference(a.tensor, b.tensor)
        yield done, total
        if first is None:
            return Row(pair, "byte_identical", exact=True, bytes_checked=True)
    numel = a.tensor.numel
    cols = math.prod(a.tensor.shape[1:]) if a.tensor.shape else 1
    if exact:
        windows = [(s, min(EXACT_CHUNK_ELEMS, numel - s)) for s in range(0, numel, EXACT_CHUNK_ELEMS)]
    else:
        block = max(dtype_of(a.tensor).block_elems, dtype_of(b.tensor).block_elems)
        windows = plan_windows(numel, samples, block if a.plain and b.plain else 1)
        if first is not None:
            info = dtype_of(a.tensor)
            windows = _with_difference(windows, first // info.block_bytes * info.block_elems, block)
    diff = Diff()
    for start, count in windows:
        diff.add(read_frame(a, start, count, cols), read_frame(b, start, count, cols))
        yield done, total
    compared_all = sum(count for _, count in windows) == numel
    same = diff.max_abs == 0.0 and diff.nonfinite_differ == 0
    return Row(pair, "same_values" if same else "values_differ", diff, compared_all, checked, first)


def _with_difference(windows: list[tuple[int, int]], element: int, block: int) -> list[tuple[int, int]]:
    """Add one block around the first element whose bytes differ, clipped to the gap between the
    planned windows (so no position is counted twice), unless a window already covers it."""
    if any(s <= element < s + n for s, n in windows):
        return windows
    start = max([element // block * block] + [s + n for s, n in windows if s + n <= element])
    end = min([start + block] + [s for s, _ in windows if s > element])
    return sorted(windows + [(start, end - start)])


def _unreadable(t) -> str | None:
    if t.problem:
        return f"{t.name}: {t.problem}"
    if t.dtype_info is None or t.source is None:
        return f"{t.name}: unknown dtype {t.dtype!r}"
    return None
