"""Whole-tensor statistics and histograms: every element, streamed in chunks.

Two passes: the statistics (min, max, mean, std, counts), then the histogram over the exact
[min, max] the first found (bins over a sampled range would drop the extremes). `exact_summary`
runs both and, for a tensor whose decoding costs more than keeping its values (ggml and other
block quantisations) and that is small enough, keeps the first pass's values for the second:
each block is then decoded once. An 8- or 16-bit float tensor takes one pass that counts its
element codes instead (codes.py): the same figures, no element decoded (but BF16 and F16, whose
values rawstats' F32 path summarises faster as the float32s they are). F32, BF16, F16, Q8_0 and
Q4_K chunks are summarised from their bytes (rawstats.py: the numbers the element path gives, with
less Python per element; the quantised ones keep their bytes between the passes); an F32, BF16 or
F16 chunk's statistics are those of its 64K-element pieces merged, on either path (rawstats.pieces). Every pass is a generator, so that callers can stop between
chunks: the CLI through a progress callback, the browser worker between messages.
"""

from __future__ import annotations

from array import array
from typing import Callable, Iterator, NamedTuple

from ..errors import Cancelled
from ..model import Tensor
from . import codes, rawstats
from .gather import WindowBytes, decode_window, dtype_of, gather_windows, read_windows
from .repeats import checked_view, repeated
from .stats import Binner, Histogram, Stats, compute, finite_floats, merge

EXACT_CHUNK_ELEMS = 1 << 20
# The most values `exact_summary` keeps between its passes (as doubles: 128 MB).
KEEP_ELEMS = 1 << 24

Progress = Callable[[int, int], object]


def _chunks(tensor: Tensor, chunk_elems: int, raw: bool = False) -> Iterator[tuple[int, int, object]]:
    """Every element in row-major chunks (whole quant blocks): yields (done, total, values), or
    with `raw` (a contiguous tensor) each chunk's bytes as read (gather.WindowBytes)."""
    info = dtype_of(tensor)
    chunk = max(info.block_elems, chunk_elems // info.block_elems * info.block_elems)
    total = tensor.numel
    starts = range(0, total, chunk)
    # The next chunks are read ahead, together (gather.BATCH_BYTES at a time).
    parts = (read_windows if raw else gather_windows)(
        (tensor, start, min(chunk, total - start)) for start in starts)
    for start, values in zip(starts, parts):
        yield min(start + chunk, total), total, values


def _chunk_stats(tensor: Tensor, chunk_elems: int, keep: list | None) -> Iterator[tuple[int, int, Stats]]:
    """Each chunk's statistics: (done, total, stats of the chunk). From the chunk's bytes where
    rawstats can (the same numbers, faster), else from its values; `keep` as exact_stats_steps."""
    if not rawstats.supported(tensor):
        # in the pieces, and with the sum of squares, rawstats takes for this dtype
        step = rawstats.PIECE_ELEMS.get(tensor.dtype)
        for done, total, values in _chunks(tensor, chunk_elems):
            if keep is not None:
                keep.append(array("d", values))
            size = step or max(1, len(values))
            yield done, total, _merged(rawstats.values_stats(values[at:at + size], tensor.dtype)
                                       for at in range(0, len(values), size))
        return
    for done, total, window in _chunks(tensor, chunk_elems, raw=True):
        decoded = None
        if keep is not None:   # one piece (a quantised window): what it decodes, kept for the histogram
            decoded = {}
            keep.append(KeptWindow(window, decoded))
        yield done, total, _merged(rawstats.chunk_stats(piece, decoded) or rawstats.element_stats(piece)
                                   for piece in rawstats.pieces(window))


class KeptWindow(NamedTuple):
    """A chunk's bytes kept between the passes, with what its statistics' pass decoded of them
    (rawstats.chunk_stats' `kept`) for the histogram's."""
    window: WindowBytes
    decoded: dict


def _merged(parts) -> Stats:
    result = None
    for part in parts:
        result = part if result is None else merge(result, part)
    return result if result is not None else compute([], percentiles=False)


def exact_stats_steps(tensor: Tensor, chunk_elems: int = EXACT_CHUNK_ELEMS,
                      max_elements: int | None = None,
                      keep: list | None = None) -> Iterator[tuple[int, int, Stats]]:
    """Statistics of every element, one chunk at a time: yields (done, total, stats so far).

    A stride-0 view is read once, its counts multiplied by its repeats; a pass over more
    elements than its bytes hold (or than `max_elements`) is refused before anything is read
    (repeats.py). `keep`, a list, receives each chunk's values (as an array of doubles), or its
    bytes where they are summarised from those (rawstats.py), with what that decoded of them
    (a KeptWindow)."""
    view, repeats, _ = checked_view(tensor, max_elements)   # now, not at the first step

    def steps():
        result = Stats()
        for done, total, part in _chunk_stats(view, chunk_elems, keep):
            result = merge(result, part) if result.count else part
            yield done * repeats, total * repeats, repeated(result, repeats)
    return steps()


def exact_histogram_steps(tensor: Tensor, stats: Stats, bins: int = 64,
                          chunk_elems: int = EXACT_CHUNK_ELEMS,
                          max_elements: int | None = None,
                          kept: list | None = None) -> Iterator[tuple[int, int, Binner]]:
    """The histogram of every element over the exact [min, max] that exact_stats found: a second
    streamed pass, over the values `kept` by the first if given (exact_stats_steps)."""
    view, repeats, _ = checked_view(tensor, max_elements)
    binner = Binner(stats.min, stats.max, bins)
    binner.weight = repeats
    every_finite = stats.finite == stats.count   # then no chunk needs filtering

    def chunks():
        if kept is None:
            yield from _chunks(view, chunk_elems, raw=rawstats.supported(view))
            return
        done = 0
        while kept:
            part = kept.pop(0)   # each kept chunk is let go once binned
            done += part.window.count if isinstance(part, KeptWindow) else len(part)
            yield done, view.numel, part

    def steps():
        for done, total, chunk in chunks():
            decoded = None
            if isinstance(chunk, KeptWindow):
                chunk, decoded = chunk
            if isinstance(chunk, WindowBytes):
                if rawstats.add_chunk(binner, chunk, every_finite, decoded):
                    yield done * repeats, total * repeats, binner
                    continue
                chunk = decode_window(*chunk)
            elif isinstance(chunk, array):
                chunk = chunk.tolist()
            # every finite value lies in [min, max]: they were found over these values
            binner.add(chunk if every_finite else finite_floats(chunk), within=True)
            yield done * repeats, total * repeats, binner
    return steps()


def _run(steps, progress, what: str):
    last = None
    for done, total, last in steps:
        if progress is not None and progress(done, total) is False:
            raise Cancelled(f"{what} cancelled")
    return last


def exact_stats(tensor: Tensor, progress: Progress | None = None,
                chunk_elems: int = EXACT_CHUNK_ELEMS, max_elements: int | None = None) -> Stats:
    """Statistics of every element, streamed in chunks. `progress(done, total)` returning False
    (or raising Cancelled) stops the work with Cancelled; `max_elements` allows a pass over more
    elements than the tensor's bytes hold (repeats.checked_view)."""
    return _run(exact_stats_steps(tensor, chunk_elems, max_elements), progress,
                f"exact statistics of {tensor.name!r}") or Stats()


def exact_histogram(tensor: Tensor, stats: Stats, bins: int = 64,
                    progress: Progress | None = None,
                    chunk_elems: int = EXACT_CHUNK_ELEMS, log: bool = False,
                    max_elements: int | None = None, kept: list | None = None) -> Histogram:
    """The histogram of every element, bins over [stats.min, stats.max] (from exact_stats)."""
    binner = _run(exact_histogram_steps(tensor, stats, bins, chunk_elems, max_elements, kept),
                  progress, f"exact histogram of {tensor.name!r}")
    return (binner or Binner(stats.min, stats.max, bins)).result(log)


def exact_summary(tensor: Tensor, bins: int = 64, progress: tuple[Progress | None, Progress | None] = (None, None),
                  chunk_elems: int = EXACT_CHUNK_ELEMS, log: bool = False,
                  max_elements: int | None = None) -> tuple[Stats, Histogram]:
    """`exact_stats` then `exact_histogram`, each with its progress callback; a block-quantised
    tensor of at most KEEP_ELEMS stored elements is decoded once, its values kept between."""
    view, repeats, _ = checked_view(tensor, max_elements)
    if codes.countable(view) and not rawstats.supported(view):   # BF16, F16: rawstats is faster
        return _counted_summary(tensor, view, repeats, bins, progress, chunk_elems, log)
    keep = [] if dtype_of(view).kind == "quant" and view.numel <= KEEP_ELEMS else None
    stats = _run(exact_stats_steps(tensor, chunk_elems, max_elements, keep), progress[0],
                 f"exact statistics of {tensor.name!r}") or Stats()
    return stats, exact_histogram(tensor, stats, bins, progress[1], chunk_elems, log, max_elements, keep)


def _counted_summary(tensor: Tensor, view: Tensor, repeats: int, bins: int, progress, chunk_elems: int,
                     log: bool) -> tuple[Stats, Histogram]:
    """`exact_summary` of a tensor whose element codes are counted (codes.py), in one pass."""
    steps = ((done * repeats, total * repeats, counts)
             for done, total, counts in codes.count_steps(view, chunk_elems))
    counts = _run(steps, progress[0], f"exact statistics of {tensor.name!r}")
    pairs = [(v, c * repeats) for v, c in
             codes.distinct_values(dtype_of(view), counts or {}, view.big_endian)]
    stats = codes.counted_stats(pairs)
    binner = Binner(stats.min, stats.max, bins)
    codes.counted_histogram(binner, pairs)
    if progress[1] is not None:
        progress[1](tensor.numel, tensor.numel)
    return stats, binner.result(log)
