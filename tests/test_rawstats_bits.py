"""rawstats (the exact pass's F32 and Q8_0 chunks summarised from their bytes) gives the element
path's numbers to the last bit: stdlib only, so that it also runs inside Pyodide (tests/pyodide),
where the page computes them. numpy's numbers on real files: test_rawstats.py."""

import math
import random
import struct

import pytest

from tensorloupe.dtypes import lookup
from tensorloupe.sampler import rawstats
from tensorloupe.sampler.gather import WindowBytes, decode_window
from tensorloupe.sampler.stats import Binner, compute


def f32_bytes(seed: int, n: int, specials=()) -> bytes:
    rng = random.Random(seed)
    values = [rng.gauss(0, 0.02) for _ in range(n)]
    for at, v in specials:
        values[at] = v
    return struct.pack(f"<{n}f", *values)


def q8_0_bytes(seed: int, blocks: int, scales=()) -> bytes:
    rng = random.Random(seed)
    ds = [rng.choice((0.00031, 0.00035, 0.0004, -0.0002, 6e-8)) for _ in range(blocks)]
    for at, d in scales:
        ds[at] = d
    return b"".join(struct.pack("<e", d) + bytes(rng.randrange(256) for _ in range(32)) for d in ds)


CASES = {
    "f32": ("F32", f32_bytes(1, 4099, [(0, -0.0), (1, 0.0), (2, 1e-40), (3, 9.999e-7), (4, -1e-6), (5, 2e-6)])),
    "f32-inf": ("F32", f32_bytes(2, 1001, [(10, math.inf)])),
    "f32-nan": ("F32", f32_bytes(3, 1001, [(10, math.nan)])),
    "f32-equal": ("F32", struct.pack("<777f", *([0.125] * 777))),
    "f32-zeros": ("F32", struct.pack("<5f", -0.0, 0.0, 0.0, -0.0, 0.0)),
    "q8_0": ("Q8_0", q8_0_bytes(4, rawstats.MIN_Q8_0_BLOCKS + 1)),
    "q8_0-zero-scale": ("Q8_0", q8_0_bytes(5, rawstats.MIN_Q8_0_BLOCKS, [(3, 0.0), (9, -0.0)])),
    "q8_0-inf-scale": ("Q8_0", q8_0_bytes(6, rawstats.MIN_Q8_0_BLOCKS, [(7, math.inf)])),
    "q8_0-equal": ("Q8_0", b"".join(struct.pack("<e", 0.5) + bytes([2] * 32) for _ in range(rawstats.MIN_Q8_0_BLOCKS))),
    "q8_0-few-blocks": ("Q8_0", q8_0_bytes(7, 301)),
}


def window(dtype: str, data: bytes) -> WindowBytes:
    info = lookup(dtype)
    return WindowBytes(dtype, False, 0, len(data) // info.block_bytes * info.block_elems, data)


@pytest.mark.parametrize("case", sorted(CASES))
def test_chunk_stats_are_the_element_paths(case):
    w = window(*CASES[case])
    fast = rawstats.chunk_stats(w)
    slow = compute(decode_window(*w), percentiles=False)
    if fast is not None:
        assert repr(fast) == repr(slow)
    else:   # left to the element path: non-finite values or scales, zero extremes, few Q8_0 blocks, a mean
        # far from 0 (Q8_0 then needs the squared deviations: all-equal values are that case)
        assert case in ("f32-inf", "f32-nan", "f32-zeros", "q8_0-inf-scale", "q8_0-equal", "q8_0-few-blocks") \
            or 0.0 in (slow.min, slow.max)


@pytest.mark.parametrize("case", sorted(CASES))
def test_chunk_histograms_are_the_element_paths(case):
    w = window(*CASES[case])
    values = decode_window(*w)
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = min(finite), max(finite)
    fast, slow = Binner(lo, hi, 32), Binner(lo, hi, 32)
    every_finite = len(finite) == len(values)
    if rawstats.add_chunk(fast, w, every_finite):
        slow.add(finite, within=True)
        assert fast.counts == slow.counts
    else:
        assert case in ("q8_0-inf-scale", "q8_0-few-blocks")


def test_a_chunk_that_is_not_whole_blocks_is_left_alone():
    dtype, data = CASES["q8_0"]
    n = len(data) // 34 * 32
    assert rawstats.chunk_stats(WindowBytes(dtype, False, 0, n, data)) is not None
    assert rawstats.chunk_stats(WindowBytes(dtype, False, 5, n - 5, data)) is None
    assert rawstats.chunk_stats(WindowBytes(dtype, True, 0, n, data)) is None     # big-endian
    assert rawstats.chunk_stats(WindowBytes("F32", False, 0, 10, data[:40])) is not None
