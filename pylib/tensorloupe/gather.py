"""Read the elements a view needs, in as few byte-source reads as possible.

Every read costs ~1-1.5 ms in the browser whatever its size, so element positions are turned into
block ranges, neighbouring ranges are merged while the gap between them is small, and each merged
range is one read. Quantized blocks are decoded only where a requested element lies in them, each
block once per call.
"""

from __future__ import annotations

from bisect import bisect_left

from .dtypes import DType
from .errors import UnsupportedError
from .model import Tensor

# Merge two ranges when fewer than this many unwanted bytes lie between them: reading 64 KiB costs
# less than one extra read in the browser.
GAP_BYTES = 64 << 10
# Never ask a source for more than this in one read (wasm memory, and to keep progress responsive).
MAX_READ_BYTES = 16 << 20


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
    be, bb = info.block_elems, info.block_bytes
    wanted_blocks = sorted({p // be for p in positions})
    decoded: dict[int, list] = {}
    for first, last in _runs(wanted_blocks, bb):
        data = tensor.source.read_data(tensor.offset + first * bb, (last - first + 1) * bb)
        if info.kind != "quant":
            # Plain dtypes decode at C speed: decode the whole run, slice out the blocks we need.
            values = info.decode(data, tensor.big_endian)
            lo = bisect_left(wanted_blocks, first)
            hi = bisect_left(wanted_blocks, last + 1)
            for block in wanted_blocks[lo:hi]:
                start = (block - first) * be
                decoded[block] = values[start:start + be]
        else:
            view = memoryview(data)
            lo = bisect_left(wanted_blocks, first)
            hi = bisect_left(wanted_blocks, last + 1)
            for block in wanted_blocks[lo:hi]:
                start = (block - first) * bb
                decoded[block] = info.decode(view[start:start + bb], tensor.big_endian)
    return [decoded[p // be][p % be] for p in positions]


def gather_range(tensor: Tensor, start: int, count: int) -> list:
    """`count` consecutive logical elements from `start`, as few reads as the bytes allow."""
    if count <= 0:
        return []
    if not tensor.contiguous:
        return gather(tensor, storage_positions(tensor, range(start, start + count)))
    info = dtype_of(tensor)
    be, bb = info.block_elems, info.block_bytes
    first, last = start // be, (start + count - 1) // be
    values: list = []
    blocks_per_read = max(1, MAX_READ_BYTES // bb)
    for block in range(first, last + 1, blocks_per_read):
        n = min(blocks_per_read, last + 1 - block)
        data = tensor.source.read_data(tensor.offset + block * bb, n * bb)
        values += info.decode(data, tensor.big_endian)
    skip = start - first * be
    return values[skip:skip + count]


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
