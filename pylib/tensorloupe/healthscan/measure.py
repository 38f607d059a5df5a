"""One tensor's health numbers from a bounded read: rms, max|w|, non-finite counts, whether every
value is the same, and a digest of the bytes read (duplicate candidates are found by digest).

Each tensor is read in a few contiguous windows spread over it (as the sampler does) within a byte
budget; a tensor that fits in the budget is read whole, and then its numbers are exact. Quantized
tensors are measured on their dequantized values, block by block; the digest is of the raw bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator

from ..sampler import rawstats
from ..sampler.gather import WindowBytes, dtype_of, gather_range
from ..sampler.layout import storage_view
from ..model import Tensor
from ..jsonable import json_number
from ..roles import role_of
from ..sampler.repeats import checked_view, repeated
from ..sampler.sampling import plan_windows
from ..sampler.stats import SCALE_DOWN, Stats, merge

DEFAULT_BUDGET = 32 << 10      # bytes read per tensor: a 7B model's 291 tensors cost ~9 MB
# Few windows: every read costs ~1.5 ms in the browser and a model has hundreds of tensors.
WINDOWS = 8
# Largest piece decoded at once (elements): a whole-tensor read (`budget=None`) is streamed.
PIECE_ELEMS = 1 << 20
# Element kinds whose values are weights; integer and boolean tensors are buffers (ids, masks).
MEASURED_KINDS = ("float", "quant")


@dataclass
class Measure:
    name: str
    role: str
    layer: int | None
    expert: int | None
    dtype: str
    shape: tuple[int, ...]
    numel: int
    nbytes: int
    samples: int = 0          # elements read
    exact: bool = False       # every element was read
    rms: float = math.nan     # over finite values
    max_abs: float = math.nan
    mean_abs: float = math.nan   # mean |w|: moves with the bulk of the values, barely with a few huge ones
    mean: float = math.nan
    std: float = math.nan
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    zeros: int = 0            # values exactly 0
    constant: float | None = None   # the one value every element read has, if they all agree
    digest: str | None = None       # sha256 of the raw bytes read (contiguous tensors only)
    bytes_read: int = 0
    skipped: str | None = None      # why the tensor was not measured
    flags: list[str] = field(default_factory=list)   # kinds of the flags raised on it

    @property
    def measured(self) -> bool:
        return self.skipped is None

    @property
    def nonfinite(self) -> int:
        return self.nan + self.posinf + self.neginf

    def to_json(self) -> dict:
        out = {"name": self.name, "role": self.role, "layer": self.layer, "expert": self.expert,
               "dtype": self.dtype, "shape": list(self.shape), "numel": self.numel,
               "samples": self.samples, "exact": self.exact}
        if self.skipped:
            out["skipped"] = self.skipped
            return out
        out.update({key: json_number(getattr(self, key)) for key in
                    ("rms", "max_abs", "mean_abs", "mean", "std", "nan", "posinf", "neginf", "zeros")})
        out["constant"] = json_number(self.constant) if self.constant is not None else None
        out["flags"] = list(self.flags)
        return out


def skip_reason(tensor: Tensor) -> str | None:
    if tensor.problem:
        return tensor.problem
    info = tensor.dtype_info
    if info is None:
        return f"unknown dtype {tensor.dtype!r}"
    if info.kind not in MEASURED_KINDS:
        return f"{info.kind} values are not weights"
    if tensor.numel == 0:
        return "it has no elements"
    return None


def windows(tensor: Tensor, budget: int | None) -> list[tuple[int, int]]:
    """The element windows read from `tensor`: whole blocks within `budget` bytes (every element
    when `budget` is None or the tensor fits)."""
    info = dtype_of(tensor)
    block = info.block_elems if tensor.contiguous else 1
    if budget is None:
        return [(0, tensor.numel)]
    elements = max(1, budget // info.block_bytes) * info.block_elems
    return plan_windows(tensor.numel, elements, block, WINDOWS)


def pieces(planned: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The windows cut into the pieces read and decoded at once (at most PIECE_ELEMS each)."""
    for start, count in planned:
        for piece in range(start, start + count, PIECE_ELEMS):
            yield piece, min(PIECE_ELEMS, start + count - piece)


def exact_view(tensor: Tensor, budget: int | None, max_elements: int | None = None):
    """(the view read, its repeats): the tensor's elements in storage order (a strided view is
    read where its bytes lie: sampler.layout); a whole-tensor read (budget None) reads a stride-0
    view's stored elements once, and is refused first if it would decode more elements than its
    bytes hold (sampler.repeats); a budgeted read is bounded by its budget already."""
    if budget is None:
        view, repeats, _ = checked_view(tensor, max_elements)
        return view, repeats
    return storage_view(tensor), 1


def measure_steps(tensor: Tensor, budget: int | None, max_elements: int | None = None,
                  datas: list[bytes] | None = None) -> Iterator[Measure]:
    """Measure `tensor` piece by piece: yields the measure after each piece read (the last yield
    is complete), so that a long whole-tensor read can be cancelled between pieces. `datas`: the
    bytes of `planned_reads(tensor, budget)`, read already (reads.py reads them ahead)."""
    role = role_of(tensor.name)
    m = Measure(tensor.name, role.role, role.layer, role.expert, tensor.dtype, tuple(tensor.shape),
                tensor.numel, tensor.nbytes, skipped=skip_reason(tensor))
    if m.skipped:
        yield m
        return
    info = dtype_of(tensor)
    # the digest is of the tensor's bytes in its own order: a strided view (read in its
    # storage's order) has none, so that a transposed copy is not taken for a duplicate
    hashed = tensor.contiguous
    tensor, repeats = exact_view(tensor, budget, max_elements)   # repeats > 1: a stride-0 view
    import hashlib   # here: importing tensorloupe brings this module
    digest = hashlib.sha256() if hashed and tensor.contiguous and repeats == 1 else None
    # The sum of |w| is kept scaled by 2**-64: it can pass the largest float (values near 1e308)
    # while their mean does not, and scaling by a power of two is exact.
    stats, first, constant, abs_sum = Stats(), None, True, 0.0
    given = iter(datas) if datas is not None and digest is not None else None
    for piece_start, n in _pieces(tensor, budget):
        values, window = _read(tensor, info, piece_start, n, digest, m, next(given) if given else None)
        # the statistics from the bytes where rawstats can (the same numbers, less Python per value)
        part = (window and rawstats.chunk_stats(window)) or rawstats.values_stats(values, tensor.dtype)
        finite = values if part.finite == part.count else [v for v in values if math.isfinite(v)]
        abs_sum += _abs_sum_scaled(finite, info)
        stats = merge(stats, part) if stats.count else part
        if constant:
            if first is None:
                first = values[0]
            constant = part.finite == part.count and part.min == part.max == first
        m.samples += n * repeats
        _fill(m, repeated(stats, repeats), first if constant else None, abs_sum * repeats)
        yield m
    m.exact = m.samples == m.numel
    m.digest = digest.hexdigest() if digest is not None else None
    yield m


def _pieces(tensor: Tensor, budget: int | None) -> list[tuple[int, int]]:
    """(start, count) of the pieces read, in order: the windows, cut at PIECE_ELEMS."""
    return list(pieces(windows(tensor, budget)))


def _piece_range(tensor: Tensor, info, start: int, count: int) -> tuple[int, int]:
    """The bytes of a piece's whole blocks: (offset in the tensor's source, length)."""
    be, bb = info.block_elems, info.block_bytes
    first, last = start // be, (start + count - 1) // be
    return tensor.offset + first * bb, (last - first + 1) * bb


def planned_reads(tensor: Tensor, budget: int | None) -> list[tuple[int, int]] | None:
    """The ranges of `tensor.source` that `measure_steps` reads, in order, where they can all be
    read before it runs (a budgeted scan of a contiguous tensor: a few small windows); None
    where it reads for itself (a whole-tensor read is streamed; a strided one is gathered)."""
    if budget is None or skip_reason(tensor) is not None or not tensor.contiguous:
        return None
    info = dtype_of(tensor)
    return [_piece_range(tensor, info, start, count) for start, count in _pieces(tensor, budget)]


# Element types whose values all lie within float32's range, so that scaling them by 2**-64
# is exact and the scaled sum of |w| is the sum's scaled (below 2**-958 a double would lose bits).
_WIDE_FLOATS = ("F64",)


def _abs_sum_scaled(finite: list[float], info) -> float:
    """fsum of |w| * 2**-64 (see measure_steps): the same number, at C speed, where it is exact."""
    if info.name not in _WIDE_FLOATS:
        try:
            return math.fsum(map(abs, finite)) * SCALE_DOWN
        except OverflowError:
            pass
    return math.fsum([abs(v) * SCALE_DOWN for v in finite])


def _read(tensor: Tensor, info, start: int, count: int, digest, m: Measure, data: bytes | None):
    """(the piece's values, its bytes as a WindowBytes where rawstats can summarise them)."""
    if digest is None:
        before = tensor.source.root().bytes_read
        values = gather_range(tensor, start, count)
        m.bytes_read += tensor.source.root().bytes_read - before
        return values, None
    if data is None:
        data = tensor.source.read_data(*_piece_range(tensor, info, start, count))
    be = info.block_elems
    first = start // be
    m.bytes_read += len(data)
    digest.update(data)
    skip = start - first * be
    window = WindowBytes(tensor.dtype, tensor.big_endian, skip, count, data) if rawstats.supported(tensor) else None
    return info.decode(data, tensor.big_endian)[skip:skip + count], window


def _fill(m: Measure, stats: Stats, constant, abs_sum: float) -> None:
    m.nan, m.posinf, m.neginf, m.zeros = stats.nan, stats.posinf, stats.neginf, stats.exact_zeros
    m.mean, m.std = stats.mean, stats.std
    m.constant = float(constant) if constant is not None else None
    if stats.finite:
        m.rms = math.hypot(stats.std, stats.mean)     # sqrt(std² + mean²), without overflow
        m.max_abs = max(abs(stats.min), abs(stats.max))
        m.mean_abs = abs_sum / stats.finite / SCALE_DOWN
