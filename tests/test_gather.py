"""gather's fast path (ascending positions of one-element blocks: a heatmap lattice) returns the
same values, from the same reads, as the general path; windows read together equal windows read
one by one."""

import random
import struct

import numpy as np
import pytest

from tensorloupe.sampler import gather as g
from tensorloupe.model import Tensor
from tensorloupe.source.base import MemorySource

NUMPY = {"F16": "<f2", "F32": "<f4", "I32": "<i4", "U8": "u1", "BOOL": "?", "F64": "<f8"}


def tensor_of(dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "BOOL":
        data = rng.integers(0, 2, n).astype("?").tobytes()
    elif dtype.startswith(("I", "U")):
        data = rng.integers(-100 if dtype[0] == "I" else 0, 100, n).astype(NUMPY[dtype]).tobytes()
    else:
        data = rng.standard_normal(n).astype(NUMPY[dtype]).tobytes()
    source = MemorySource(b"\0" * 13 + data)
    return Tensor("t", dtype, (n,), 13, len(data), source=source), np.frombuffer(data, NUMPY[dtype])


def general(tensor, positions):
    """The general path: positions out of order never take the fast one."""
    order = list(range(len(positions)))
    random.Random(1).shuffle(order)
    shuffled = [positions[i] for i in order]
    if shuffled == positions:
        return g.gather(tensor, positions)
    values = g.gather(tensor, shuffled)
    out = [None] * len(positions)
    for i, v in zip(order, values):
        out[i] = v
    return out


PATTERNS = {
    "lattice rows": lambda n: [r * 4096 + 8 + 16 * c for r in range(0, n // 4096, 16) for c in range(256)],
    "every element": lambda n: list(range(1000, 3000)),
    "duplicates and gaps": lambda n: sorted(random.Random(3).choices(range(n), k=3000)),
    "far apart": lambda n: list(range(5, n, 70_001)),
    "one": lambda n: [n - 1],
}


@pytest.mark.parametrize("dtype", sorted(NUMPY))
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_fast_path_equals_general_path_and_numpy(dtype, pattern):
    n = 4096 * 64
    tensor, ref = tensor_of(dtype, n)
    positions = PATTERNS[pattern](n)
    before = tensor.source.reads, tensor.source.bytes_read
    fast = g.gather(tensor, positions)
    fast_reads = tensor.source.reads - before[0], tensor.source.bytes_read - before[1]
    before = tensor.source.reads, tensor.source.bytes_read
    slow = general(tensor, positions)
    slow_reads = tensor.source.reads - before[0], tensor.source.bytes_read - before[1]
    assert fast == slow == ref[positions].tolist()
    assert fast_reads == slow_reads  # the same runs


def test_runs_longer_than_the_read_limit_are_split(monkeypatch):
    monkeypatch.setattr(g, "MAX_READ_BYTES", 4096)
    tensor, ref = tensor_of("F32", 10_000)
    positions = list(range(0, 10_000, 3))
    assert g.gather(tensor, positions) == ref[positions].tolist()
    assert g.gather(tensor, positions) == general(tensor, positions)


def test_windows_read_together_equal_windows_read_one_by_one():
    tensor, ref = tensor_of("F16", 100_000, seed=2)
    windows = [(0, 10), (50, 0), (99_990, 10), (300, 5000), (7, 1)]
    together = list(g.gather_windows([(tensor, a, n) for a, n in windows], batch_bytes=4000))
    assert together == [ref[a:a + n].tolist() for a, n in windows]
    assert together == [g.gather_range(tensor, a, n) for a, n in windows]


def test_histogram_with_a_range_matches_numpy():
    from tensorloupe.sampler.stats import histogram
    values = np.random.default_rng(4).standard_normal(20_000)
    for value_range in [(-1.0, 1.0), (0.0, 5.0), (-10.0, 10.0)]:
        expected, _ = np.histogram(values, bins=32, range=value_range)
        assert histogram(values.tolist(), 32, value_range=value_range).counts == expected.tolist()
    ints = list(range(-50, 50))
    assert histogram(ints, 10).counts == np.histogram(ints, bins=10)[0].tolist()
