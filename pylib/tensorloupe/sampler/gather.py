"""Read the elements a view needs, in as few byte-source reads as possible.

Every read costs ~1-1.5 ms in the browser whatever its size, so element positions are turned into
block ranges, neighbouring ranges are merged while the gap between them is small, and each merged
range is one read. Quantized blocks are decoded only where a requested element lies in them, each
block once per call.

Every read a call plans is issued together (`ByteSource.read_many`, in batches of at most
BATCH_BYTES), so the browser and HTTP sources can have them all in flight at once; the ranges are
the same ones a read-at-a-time loop would make.
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from itertools import islice
from typing import Iterable, Iterator, NamedTuple

from ..dtypes import DType, lookup
from ..errors import UnsupportedError
from ..model import Tensor

# Merge two ranges when fewer than this many unwanted bytes lie between them: reading 64 KiB costs
# less than one extra read in the browser.
GAP_BYTES = 64 << 10
# Never ask a source for more than this in one read (wasm memory, and to keep progress responsive).
MAX_READ_BYTES = 16 << 20
# Bytes held at once by one batch of reads issued together (read-ahead of exact statistics, the
# rows of a lattice): enough to keep every read of a view in one batch, bounded for wasm memory.
BATCH_BYTES = 32 << 20


def dtype_of(tensor: Tensor) -> DType:
    info = None if tensor.problem else tensor.dtype_info
    if info is None or tensor.source is None:
        raise UnsupportedError(
            f"the values of tensor {tensor.name!r} cannot be read: "
            f"{tensor.problem or f'unknown dtype {tensor.dtype!r}'}", file=getattr(tensor.source, "name", None))
    return info


def storage_positions(tensor: Tensor, flat_indices) -> list[int]:
    """Storage element offsets of logical row-major indices (identity for contiguous tensors)."""
    if tensor.contiguous:
        return list(flat_indices)
    shape, strides = tensor.shape, tensor.element_strides()
    out = []
    for flat in flat_indices:
        position = 0
        for dim, stride in zip(reversed(shape), reversed(strides)):
            flat, index = divmod(flat, dim)
            position += index * stride
        out.append(position)
    return out


def gather(tensor: Tensor, positions: list[int]) -> list:
    """Values at the given storage element offsets, in the order asked."""
    if not positions:
        return []
    info = dtype_of(tensor)
    computed = getattr(tensor.source, "elements", None)   # an adapter's ΔW: cells, not rows
    if computed is not None and tensor.offset == 0 and tensor.strides is None:
        return computed(positions)
    cells = getattr(tensor.source, "cells", None)   # a dequantised weight: only the cells asked
    if cells is not None and tensor.contiguous:
        found = cells(positions)
        if found is not None:
            return found
    if info.block_elems == 1 and all(map(operator.le, positions, islice(positions, 1, None))):
        return _gather_ascending(tensor, info, positions)
    be, bb = info.block_elems, info.block_bytes
    wanted_blocks, runs, ranges = _block_runs(tensor, info, positions)
    decoded: dict[int, list] = {}
    for (first, last), data in zip(runs, read_batched(tensor.source, ranges)):
        lo = bisect_left(wanted_blocks, first)
        hi = bisect_left(wanted_blocks, last + 1)
        if info.kind != "quant":
            # Plain dtypes decode at C speed: decode the whole run, slice out the blocks we need.
            values = info.decode(data, tensor.big_endian)
            for block in wanted_blocks[lo:hi]:
                start = (block - first) * be
                decoded[block] = values[start:start + be]
        else:
            view = memoryview(data)
            for block in wanted_blocks[lo:hi]:
                start = (block - first) * bb
                decoded[block] = info.decode(view[start:start + bb], tensor.big_endian)
    return [decoded[p // be][p % be] for p in positions]


def range_plan(tensor: Tensor, info: DType, positions) -> list[tuple[int, int]]:
    """The byte ranges `gather(tensor, positions)` reads (sampler/layout.py states costs by it)."""
    return _block_runs(tensor, info, positions)[2] if positions else []


def _block_runs(tensor: Tensor, info: DType, positions):
    """(the blocks the positions lie in, sorted; their runs worth one read each; each run's range)."""
    be, bb = info.block_elems, info.block_bytes
    wanted_blocks = sorted({p // be for p in positions})
    runs = list(_runs(wanted_blocks, bb))
    return wanted_blocks, runs, [(tensor.offset + first * bb, (last - first + 1) * bb) for first, last in runs]


def _gather_ascending(tensor: Tensor, info, positions: list[int]) -> list:
    """`gather` for one-element blocks at ascending positions (a heatmap lattice): the same runs
    as `_runs`, found and sliced at C speed, and only the elements asked for are decoded (a
    lattice row picks every 16th element of the row it reads)."""
    bb = info.block_bytes
    limit = GAP_BYTES // bb + 1      # a step of more elements than this starts a new read
    steps = map(operator.sub, islice(positions, 1, None), positions)
    breaks = [0] + [i for i, d in enumerate(steps, 1) if d > limit] + [len(positions)]
    runs = []
    max_blocks = max(1, MAX_READ_BYTES // bb)
    for lo, hi in zip(breaks, breaks[1:]):
        while positions[hi - 1] - positions[lo] >= max_blocks:   # rare: runs over 16 MiB
            cut = bisect_left(positions, positions[lo] + max_blocks, lo, hi)
            runs.append((lo, cut))
            lo = cut
        runs.append((lo, hi))
    ranges = [(tensor.offset + positions[lo] * bb, (positions[hi - 1] - positions[lo] + 1) * bb)
              for lo, hi in runs]
    out: list = []
    for (lo, hi), data in zip(runs, read_batched(tensor.source, ranges)):
        first, n = positions[lo], hi - lo
        step = positions[lo + 1] - first if n > 1 else 1
        if step > 0 and positions[lo:hi] == list(range(first, positions[hi - 1] + 1, step)):
            if step > 1:  # evenly spaced: keep the bytes of the picked elements only
                picked = bytearray(n * bb)
                for k in range(bb):
                    picked[k::bb] = data[k::step * bb]
                data = bytes(picked)
            out += info.decode(data, tensor.big_endian)
        else:
            values = info.decode(data, tensor.big_endian)
            out += [values[p - first] for p in positions[lo:hi]]
    return out


def reads_apart(tensor: Tensor, spans: list[tuple[int, int]]) -> bool:
    """Whether groups of element positions, each given by its (lowest, highest) storage offset in
    ascending order, lie so far apart that no read joins two of them (more than GAP_BYTES
    between neighbours). Then `gather` of any subset of the groups makes, for each group, the
    reads that `gather` of all of them makes: staged views read every byte once."""
    info = dtype_of(tensor)
    be, gap = info.block_elems, GAP_BYTES // info.block_bytes
    return all(b // be - a // be - 1 > gap for (_, a), (b, _) in zip(spans, islice(spans, 1, None)))


def gather_range(tensor: Tensor, start: int, count: int) -> list:
    """`count` consecutive logical elements from `start`, as few reads as the bytes allow."""
    return next(gather_windows([(tensor, start, count)]))


def gather_windows(windows: Iterable[tuple[Tensor, int, int]],
                   batch_bytes: int = BATCH_BYTES) -> Iterator[list]:
    """The values of each (tensor, start, count) window in turn, like `gather_range` on each.

    Windows are read ahead in batches of up to `batch_bytes`: one `read_many` per source per
    batch, so a sample's 32 windows, an expert's signature or the next chunks of an exact
    statistic are all in flight together. Values are decoded one window at a time as they are
    taken (a batch holds bytes, not millions of decoded floats)."""
    for batch in _batches(windows, batch_bytes):
        yield from _read_plans(batch)


def prefetch_windows(windows: Iterable[tuple[Tensor, int, int]],
                     batch_bytes: int = BATCH_BYTES) -> None:
    """Tell the sources that `gather_windows(windows)` comes next (`ByteSource.prefetch`): its
    first batch of reads is started now, where a source can (a browser File), and taken when
    `gather_windows` reads it; meanwhile the caller computes."""
    first = next(_batches(windows, batch_bytes))
    for source, ranges in _ranges_by_source(first).values():
        source.prefetch(ranges)


def _batches(windows, batch_bytes: int) -> Iterator[list]:
    """The windows' plans (`_plan`) in batches of up to `batch_bytes` (at least one plan each;
    no windows: one empty batch)."""
    batch: list = []
    held = 0
    for window in windows:
        plan = _plan(*window)
        size = sum(n for _, n in plan[-1]) if plan[-1] else 0
        if batch and held + size > batch_bytes:
            yield batch
            batch, held = [], 0
        batch.append(plan)
        held += size
    yield batch


def _plan(tensor: Tensor, start: int, count: int):
    """(tensor, start, count, first block, byte ranges); no ranges for an empty window, and None
    for a strided window (read by `gather` on its own)."""
    if count <= 0:
        return tensor, start, count, 0, []
    if not tensor.contiguous:
        return tensor, start, count, 0, None
    info = dtype_of(tensor)
    be, bb = info.block_elems, info.block_bytes
    first, last = start // be, (start + count - 1) // be
    blocks_per_read = max(1, MAX_READ_BYTES // bb)
    ranges = [(tensor.offset + block * bb, min(blocks_per_read, last + 1 - block) * bb)
              for block in range(first, last + 1, blocks_per_read)]
    return tensor, start, count, first, ranges


def _ranges_by_source(plans: list) -> dict[int, tuple]:
    """id(source) -> (source, every range the plans read from it, in order)."""
    by_source: dict[int, tuple] = {}
    for tensor, *_, ranges in plans:
        if ranges:
            by_source.setdefault(id(tensor.source), (tensor.source, []))[1].extend(ranges)
    return by_source


def _read_plans(plans: list) -> Iterator[list]:
    for (tensor, start, count, *_), raw in zip(plans, _raw_plans(plans)):
        if raw is None:
            yield gather(tensor, storage_positions(tensor, range(start, start + count)))
        else:
            yield decode_window(*raw)


def read_windows(windows: Iterable[tuple[Tensor, int, int]],
                 batch_bytes: int = BATCH_BYTES) -> Iterator[WindowBytes]:
    """The bytes `gather_windows` reads for each window (the same reads), not decoded: where
    the values are to be decoded elsewhere (the page's second Python). Contiguous tensors only
    (`contiguous_windows`)."""
    for batch in _batches(windows, batch_bytes):
        for raw in _raw_plans(batch):
            if raw is None:
                raise UnsupportedError("a strided window's bytes are not one range")
            yield raw


def contiguous_windows(windows: Iterable[tuple[Tensor, int, int]]) -> bool:
    """Whether every window is read as whole blocks of its tensor (`read_windows` can read them)."""
    return all(tensor.contiguous for tensor, _, _ in windows)


class WindowBytes(NamedTuple):
    """A window's bytes, as read: `decode_window` gives its values."""
    dtype: str
    big_endian: bool
    skip: int               # elements before the window in the first block read
    count: int
    data: bytes


def decode_window(dtype: str, big_endian: bool, skip: int, count: int, data: bytes) -> list:
    """The values of a window from its bytes (WindowBytes): the blocks decoded, then cut."""
    if not count:
        return []
    values = lookup(dtype).decode(data, big_endian)
    return values[skip:skip + count]


def _raw_plans(plans: list) -> Iterator[WindowBytes | None]:
    """Each plan's bytes (one read_many per source for all of them), None for a strided one."""
    data = {key: iter(source.read_many(ranges))
            for key, (source, ranges) in _ranges_by_source(plans).items()}
    for tensor, start, count, first, ranges in plans:
        if ranges is None:
            yield None
        elif not ranges:
            yield WindowBytes(tensor.dtype, tensor.big_endian, 0, 0, b"")
        else:
            chunks = data[id(tensor.source)]
            joined = b"".join([next(chunks) for _ in ranges])
            yield WindowBytes(tensor.dtype, tensor.big_endian, start - first * dtype_of(tensor).block_elems,
                              count, joined)


def read_batched(source, ranges: list[tuple[int, int]], batch_bytes: int = BATCH_BYTES) -> Iterator[bytes]:
    """`source.read_many` over consecutive batches of at most `batch_bytes` (one range may exceed
    it alone), yielding each range's bytes in order."""
    start, held = 0, 0
    for i, (_, n) in enumerate(ranges):
        if i > start and held + n > batch_bytes:
            yield from source.read_many(ranges[start:i])
            start, held = i, 0
        held += n
    if start < len(ranges):
        yield from source.read_many(ranges[start:])


def _runs(blocks: list[int], block_bytes: int):
    """Group sorted block indices into (first, last) runs worth one read each."""
    gap_blocks = GAP_BYTES // block_bytes
    max_blocks = max(1, MAX_READ_BYTES // block_bytes)
    first = last = blocks[0]
    for block in blocks[1:]:
        if block - last - 1 <= gap_blocks and block - first < max_blocks:
            last = block
        else:
            yield first, last
            first = last = block
    yield first, last
