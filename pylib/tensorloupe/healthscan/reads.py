"""The scan's reads, issued ahead: the windows of many tensors in one vectored read, and the next
batch started while this one is measured.

In the browser a read of a File costs ~1.3 ms one at a time and ~0.3 ms when issued together
(DESIGN.md), and a 135M-parameter GGUF has 272 tensors of 8 windows each. So the ranges each
tensor's measure reads (measure.planned_reads) are read together for consecutive tensors, at most
READ_AHEAD_BYTES and READ_AHEAD_TENSORS at a time, and the next batch is announced
(ByteSource.prefetch) as soon as one is read, so that the page's slices arrive while Python
computes. The ranges are exactly those the tensors would read one by one, so the CLI (where
read_many reads them in turn) reads and counts the same bytes as the page.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

from ..model import Tensor
from .measure import planned_reads, skip_reason

READ_AHEAD_BYTES = 4 << 20
READ_AHEAD_TENSORS = 64


class Batch(NamedTuple):
    source: object                   # the tensors' byte source (one per batch)
    members: list[int]               # indices of the tensors read, in order
    ranges: list[list[tuple[int, int]]]   # each member's planned reads
    follows: bool                    # nothing else reads between the previous batch and this one


def batches(tensors: list[Tensor], budget: int | None) -> list[Batch]:
    """The scan's batches of reads, in order. A tensor that reads for itself (a strided one, any
    with budget None, one whose windows pass READ_AHEAD_BYTES) ends a batch, and the batch after it is not prefetched (its read would
    come first and drop the announced one)."""
    out: list[Batch] = []
    held, follows = 0, True
    for i, tensor in enumerate(tensors):
        plan = planned_reads(tensor, budget)
        size = sum(n for _, n in plan) if plan is not None else 0
        if plan is None or size > READ_AHEAD_BYTES:   # a large budget: read piece by piece
            if skip_reason(tensor) is None:
                follows, held = False, READ_AHEAD_BYTES   # reads in between; the next batch is new
            continue
        last = out[-1] if out else None
        if (last is None or last.source is not tensor.source or held + size > READ_AHEAD_BYTES
                or len(last.members) >= READ_AHEAD_TENSORS):
            out.append(Batch(tensor.source, [], [], follows))
            held, follows = 0, True
        out[-1].members.append(i)
        out[-1].ranges.append(plan)
        held += size
    return out


def read_ahead(tensors: list[Tensor], budget: int | None) -> Iterator[list[bytes] | None]:
    """For each tensor in turn, the bytes of its planned reads (measure_steps' `datas`), or None
    where it reads for itself or reads nothing. A batch is read when its first tensor is asked
    for, and the next one is announced then."""
    planned = batches(tensors, budget)
    batch_of = {i: b for b, batch in enumerate(planned) for i in batch.members}
    held: dict[int, list[bytes]] = {}
    for i in range(len(tensors)):
        b = batch_of.get(i)
        if b is None:
            yield None
            continue
        if i not in held:
            batch = planned[b]
            datas = iter(batch.source.read_many([r for ranges in batch.ranges for r in ranges]))
            held = {member: [next(datas) for _ in ranges] for member, ranges in zip(batch.members, batch.ranges)}
            if b + 1 < len(planned) and planned[b + 1].follows:
                after = planned[b + 1]
                after.source.prefetch([r for ranges in after.ranges for r in ranges])
        yield held.pop(i)
