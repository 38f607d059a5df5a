"""CachedSource: fixed aligned blocks, LRU, bounded memory, in front of a slow source."""

from __future__ import annotations

from collections import OrderedDict

from ..errors import UsageError
from .base import ByteSource


class CachedSource(ByteSource):
    """Read-through cache of fixed-size aligned blocks with LRU eviction and a memory bound.

    Small header reads (GGUF's thousands of short strings, zip records) become a handful of block
    reads. A request spanning several missing blocks fetches them in one inner read.
    """

    def __init__(self, inner: ByteSource, block_size: int = 1 << 16, max_bytes: int = 16 << 20):
        super().__init__()
        if block_size <= 0 or max_bytes < block_size:
            raise UsageError("the cache needs block_size > 0 and max_bytes >= block_size")
        self.inner = inner
        self.name = inner.name
        self.size = inner.size
        self.block_size = block_size
        self.max_blocks = max_bytes // block_size
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def root(self) -> ByteSource:
        return self.inner.root()

    def _beside(self, name: str) -> ByteSource:
        return self.inner.beside(name)

    def file_offset(self, offset: int) -> int:
        return self.inner.file_offset(offset)

    def known_file_offset(self, offset: int) -> int | None:
        return self.inner.known_file_offset(offset)

    def read_data(self, offset: int, n: int) -> bytes:
        if n <= 0 or offset + n > self.size:
            return self.read(offset, n)  # the single read's answer or error
        return self._count(self._planned([(offset, n)])[0])

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        return self._count_each(self._planned(ranges))

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        if all(0 <= o and 0 <= n and o + n <= self.size for o, n in ranges):
            self.inner.prefetch(self._plan(ranges, touch=False)[1])

    def _planned(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Planned data reads: bytes in cached blocks come from the cache, and only the missing
        parts are fetched, all in one vectored read, exactly as asked (never rounded up to blocks,
        and never cached: the sampler's ranges would evict the header's blocks)."""
        plans, missing = self._plan(ranges)
        fetched = iter(self.inner.read_many(missing))
        return [b"".join(next(fetched) if isinstance(p, list) else p for p in plan)
                for plan in plans]

    def _plan(self, ranges: list[tuple[int, int]], touch: bool = True):
        """Per range, its parts: bytes from the cache, or [start, end) to fetch; and the ranges
        to fetch, in order. `touch` counts the hits and refreshes their blocks (not for a
        prefetch, which only asks what the read will fetch)."""
        bs, blocks = self.block_size, self._blocks
        plans: list[list] = []      # per range: bytes from the cache, or [start, end) to fetch
        missing: list[tuple[int, int]] = []
        for offset, n in ranges:
            plan: list = []
            position, end = offset, offset + n
            while blocks and position < end:
                index = position // bs
                stop = min(end, (index + 1) * bs)
                block = blocks.get(index)
                if block is not None:
                    if touch:
                        blocks.move_to_end(index)
                        self.hits += 1
                    plan.append(block[position - index * bs:stop - index * bs])
                elif plan and isinstance(plan[-1], list):
                    plan[-1][1] = stop
                else:
                    plan.append([position, stop])
                position = stop
            if not blocks and n:
                plan = [[offset, end]]
            plans.append(plan)
            missing += [(p[0], p[1] - p[0]) for p in plan if isinstance(p, list)]
        return plans, missing

    def _read(self, offset: int, n: int) -> bytes:
        bs = self.block_size
        first, last = offset // bs, (offset + n - 1) // bs
        # Reads far larger than the cache bypass it: caching them would only evict useful blocks.
        if last - first + 1 > self.max_blocks // 2:
            return self._count(self.inner.read(offset, n))
        missing_run: list[int] = []
        for index in range(first, last + 1):
            if index in self._blocks:
                self._blocks.move_to_end(index)
                self.hits += 1
                self._fetch(missing_run)
                missing_run = []
            else:
                self.misses += 1
                missing_run.append(index)
        self._fetch(missing_run)
        joined = b"".join(self._blocks[i] for i in range(first, last + 1))
        start = offset - first * bs
        return self._count(joined[start:start + n])

    def _fetch(self, run: list[int]) -> None:
        """Fetch consecutive missing blocks with one inner read."""
        if not run:
            return
        bs = self.block_size
        start = run[0] * bs
        end = min(self.size, (run[-1] + 1) * bs)
        data = self.inner.read(start, end - start)
        for i, index in enumerate(run):
            self._blocks[index] = data[i * bs:(i + 1) * bs]
            self._blocks.move_to_end(index)
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)

    def close(self) -> None:
        self.inner.close()
