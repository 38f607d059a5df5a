"""rawstats (the exact pass's F32, BF16, F16, Q8_0 and Q4_K chunks summarised from their bytes) gives the
element path's numbers to the last bit: stdlib only, so that it also runs inside Pyodide (tests/pyodide),
where the page computes them. numpy's numbers on real files: test_rawstats.py."""

import functools
import math
import operator
import random
import struct

import pytest

from tensorloupe.dtypes import lookup
from tensorloupe.sampler import rawstats
from tensorloupe.sampler.rawstats_q8_0 import MIN_Q8_0_BLOCKS

Q8_0_BLOCKS = 1 << 11    # an exact pass's chunk holds 32768 blocks; the cases hold this many
from tensorloupe.sampler.gather import WindowBytes, decode_window
from tensorloupe.sampler.stats import Binner, compute


def f32_bytes(seed: int, n: int, specials=()) -> bytes:
    rng = random.Random(seed)
    values = [rng.gauss(0, 0.02) for _ in range(n)]
    for at, v in specials:
        values[at] = v
    return struct.pack(f"<{n}f", *values)


def bf16_bytes(f32: bytes) -> bytes:
    """The bfloat16 codes of float32 values cut to their top halves."""
    out = bytearray(len(f32) // 2)
    out[0::2], out[1::2] = f32[2::4], f32[3::4]
    return bytes(out)


def f16_bytes(seed: int, n: int, specials=(), zeros: float = 0.0) -> bytes:
    """Normal float16 values, a share `zeros` of them zeros, with (position, value) specials."""
    rng = random.Random(seed)
    values = [0.0 if rng.random() < zeros else rng.gauss(0, 0.02) for _ in range(n)]
    for at, v in specials:
        values[at] = v
    return struct.pack(f"<{n}e", *values)


# Every float16 but the infinities and NaNs, in code order: all 2,046 subnormals, both zeros.
F16_EVERY_FINITE = b"".join(struct.pack("<H", c) for c in range(1 << 16) if c >> 10 & 0x1F != 0x1F)
SUBNORMAL = 2.0 ** -24            # the smallest float16; below 2**-14 they are subnormal


def rand_bytes(seed: int, n: int, choices=range(256)) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.choice(choices) for _ in range(n))


def q8_0_bytes(seed: int, blocks: int, scales=()) -> bytes:
    rng = random.Random(seed)
    ds = [rng.choice((0.00031, 0.00035, 0.0004, -0.0002, 6e-8)) for _ in range(blocks)]
    for at, d in scales:
        ds[at] = d
    return b"".join(struct.pack("<e", d) + bytes(rng.randrange(256) for _ in range(32)) for d in ds)


def q4_k_bytes(seed: int, blocks: int, scales=(), zero_subs=()) -> bytes:
    """block_q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit codes.
    `scales`: (block, d, dmin) overrides; `zero_subs`: (block, also_zero_scale) makes sub-block 0's
    min 0 (x = dsc * q, a zero at code 0), and its scale 0 too if asked (32 zeros)."""
    rng = random.Random(seed)
    ds = [(rng.choice((0.0031, 0.0035, -0.004, 0.002)), rng.choice((0.011, 0.02, -0.015))) for _ in range(blocks)]
    for at, d, dmin in scales:
        ds[at] = (d, dmin)
    out = []
    for b, (d, dmin) in enumerate(ds):
        sc = bytearray(rng.randrange(256) for _ in range(12))
        for at, also_scale in zero_subs:
            if at == b:
                sc[4] = 0                 # min 0 (and the top bits of min 4)
                if also_scale:
                    sc[0] = 0             # scale 0 (and the top bits of scale 4)
        out.append(struct.pack("<ee", d, dmin) + bytes(sc) + bytes(rng.randrange(256) for _ in range(128)))
    return b"".join(out)


CASES = {
    "f32": ("F32", f32_bytes(1, 4099, [(0, -0.0), (1, 0.0), (2, 1e-40), (3, 9.999e-7), (4, -1e-6), (5, 2e-6)])),
    "f32-inf": ("F32", f32_bytes(2, 1001, [(10, math.inf)])),
    "f32-nan": ("F32", f32_bytes(3, 1001, [(10, math.nan)])),
    "f32-equal": ("F32", struct.pack("<777f", *([0.125] * 777))),
    "f32-zeros": ("F32", struct.pack("<5f", -0.0, 0.0, 0.0, -0.0, 0.0)),
    # BF16 through the F32 path: its values widened exactly (a bf16 subnormal, -0.0, the near line)
    "bf16": ("BF16", bf16_bytes(f32_bytes(21, 4099, [(0, -0.0), (1, 0.0), (2, 1e-40), (3, 9.999e-7), (4, -1e-6)]))),
    "bf16-inf": ("BF16", bf16_bytes(f32_bytes(22, 1001, [(10, -math.inf)]))),
    "bf16-nan": ("BF16", bf16_bytes(f32_bytes(23, 1001, [(10, math.nan)]))),
    "bf16-zeros": ("BF16", bf16_bytes(struct.pack("<5f", 0.0, -0.0, 0.0, -0.0, 0.0))),
    # F16 through the F32 path: widened exactly by tables, its subnormals by struct (|v| < 6.1e-5;
    # 16 and 17 * 2**-24 either side of the 1e-6 line), then its own bytes binned
    "f16": ("F16", f16_bytes(31, 4099, [(0, -0.0), (1, 0.0), (2, SUBNORMAL), (3, -3 * SUBNORMAL),
                                        (4, 16 * SUBNORMAL), (5, -17 * SUBNORMAL), (6, 1023 * SUBNORMAL)])),
    "f16-inf": ("F16", f16_bytes(32, 1001, [(10, math.inf)])),
    "f16-nan": ("F16", f16_bytes(33, 1001, [(10, math.nan)])),
    "f16-zeros": ("F16", struct.pack("<5e", 0.0, -0.0, 0.0, -0.0, 0.0)),
    # most of it zeros (a pruned matrix): the subnormals are told from them by a byte-lane sum
    "f16-pruned": ("F16", f16_bytes(34, 4099, [(at, (-1) ** at * at * SUBNORMAL) for at in range(7, 4099, 97)], zeros=0.8)),
    # too many subnormals to patch one by one: all converted by struct
    "f16-subnormal": ("F16", struct.pack("<3001e", *(random.Random(35).randrange(-1023, 1024) * SUBNORMAL
                                                     for _ in range(3001)))),
    "f16-every-code": ("F16", F16_EVERY_FINITE),
    # values of 2**13 and more: a double's plain sum rounds (each 2**-24 lost after the large ones),
    # so fsum is taken; below 2**13 (the f16, pruned and subnormal cases) builtin sum is exact (_exact_plain_sum)
    "f16-large": ("F16", struct.pack("<31000e", *([60000.0] * 30000 + [SUBNORMAL] * 1000))),
    "q8_0": ("Q8_0", q8_0_bytes(4, Q8_0_BLOCKS + 1)),
    "q8_0-zero-scale": ("Q8_0", q8_0_bytes(5, Q8_0_BLOCKS, [(3, 0.0), (9, -0.0)])),
    "q8_0-inf-scale": ("Q8_0", q8_0_bytes(6, Q8_0_BLOCKS, [(7, math.inf)])),
    "q8_0-equal": ("Q8_0", b"".join(struct.pack("<e", 0.5) + bytes([2] * 32) for _ in range(Q8_0_BLOCKS))),
    "q8_0-few-blocks": ("Q8_0", q8_0_bytes(7, MIN_Q8_0_BLOCKS - 1)),
    "q8_0-small": ("Q8_0", q8_0_bytes(7, 120, [(5, 0.0)])),    # a health-scan window
    # every value negative: the best maximum of the largest scales has the wrong sign, every
    # block is looked at
    "q8_0-negative": ("Q8_0", b"".join(struct.pack("<e", 0.001 * (1 + b % 7)) + rand_bytes(b, 32, range(128, 255))
                                       for b in range(Q8_0_BLOCKS))),
    # the largest scales hold only small codes; a block of a 10x smaller scale holds the maximum
    # (127) and another the minimum (-128): found past the blocks of the largest |d|
    "q8_0-outlier": ("Q8_0", b"".join(struct.pack("<e", 0.01 if b % 3 else 0.001)
                                      + (bytes([127] * 32) if b == 999 else bytes([128] * 32) if b == 1500
                                         else rand_bytes(b, 32, (0, 1, 2, 3, 253, 254, 255)))
                                      for b in range(Q8_0_BLOCKS))),
    # codes -64 .. 64 at d = 2**-6: width 4 * d, every fourth code exactly on a bin edge
    "q8_0-edges": ("Q8_0", b"".join(struct.pack("<e", 2 ** -6) + rand_bytes(b, 32, [q & 0xFF for q in range(-64, 65)])
                                    for b in range(Q8_0_BLOCKS))),
    # every block's float32 rounding exact (dmin's exponent 1..3 above d's)
    "q4_k": ("Q4_K", q4_k_bytes(8, 67)),
    # blocks whose float32 rounding is not exact (d far above dmin, or far below), decoded among the rest
    "q4_k-mixed": ("Q4_K", q4_k_bytes(9, 40, [(3, 0.05, 1e-4), (4, 0.03, -3e-6), (7, 1e-5, 0.04), (9, 0.0, 0.02),
                                              (11, 0.02, 0.0), (12, -0.0, 0.01)])),
    # exact zeros: sub-blocks with min 0 (a zero at code 0) and with scale and min 0 (32 zeros)
    "q4_k-zeros": ("Q4_K", q4_k_bytes(10, 30, zero_subs=[(1, False), (2, True), (5, False), (6, True)])),
    # subnormal scales: steps below the near-zero line, many values within 1e-6 of 0
    "q4_k-tiny": ("Q4_K", q4_k_bytes(11, 30, [(b, 6e-8 * (b % 3 + 1), -3e-8 * (b % 2 + 1)) for b in range(0, 30, 2)])),
    # steps just above TINY_STEP whose nearest code to dm / dsc is within 1e-6 of 0
    "q4_k-near": ("Q4_K", q4_k_bytes(12, 30, [(b, 1.2e-6 * (b % 5 + 1), 5.96e-8 * (b % 7 + 1)) for b in range(30)])),
    # the edges of EXACT_SPREAD: dmin's exponent 7, 6, -4 and -3 above d's, all scales and mins 63,
    # d and dmin of opposite signs: the first and third blocks round (|x| reaches past 2**24 units)
    "q4_k-spread": ("Q4_K", b"".join(struct.pack("<ee", d, dmin) + b"\xff" * 12 + bytes(random.Random(16).randrange(256)
                                                                                    for _ in range(128))
                                     for d, dmin in ((1025 * 2 ** -22, -2047 * 2 ** -15), (1025 * 2 ** -21, -2047 * 2 ** -15),
                                                     (2047 * 2 ** -18, -1025 * 2 ** -22), (2047 * 2 ** -19, -1025 * 2 ** -22)))),
    # the sub-blocks of the highest code-15 value (block 0) and of the lowest code-0 value (block 2)
    # hold neither extreme: blocks 1 (all q = 15) and 3 (all q = 0) do, found past them
    "q4_k-outlier": ("Q4_K", b"".join(struct.pack("<ee", d, dmin) + b"\xff" * 12 + codes for d, dmin, codes in
                                      [(0.05, 0.01, bytes(128)), (0.02, 0.01, b"\xff" * 128), (0.01, 0.08, b"\xff" * 128),
                                       (0.01, 0.05, bytes(128))]
                                      + [(0.001, 0.001, rand_bytes(b, 128))
                                         for b in range(8)])),
    # every scale and min 1 (no step below TINY_STEP): d = 2**-12 and dmin = 5 * 2**-12 give exact
    # zeros at code 5, dmin 2**-20 above that values within 1e-6 of 0 there (and d < 0: none)
    "q4_k-near-wide": ("Q4_K", b"".join(struct.pack("<ee", d, dmin) + bytes([1] * 8 + [0x11] * 4)
                                        + rand_bytes(40 + b, 128)
                                        for b, (d, dmin) in enumerate([(2 ** -12, 5 * 2 ** -12), (2 ** -12, 5 * 2 ** -12 + 2 ** -20),
                                                                       (-2 ** -12, 5 * 2 ** -12)] * 4))),
    # scale 0 with min 5 (sub-block 0 of each block) and a tiny dmin: all 32 values of those sub-blocks
    # are -5 * dmin, within 1e-6 of 0 but not 0 (every code the same x: _near's zero steps)
    "q4_k-zero-step": ("Q4_K", b"".join(struct.pack("<ee", 0.003 * (1 + b % 3), 1e-7 * (1 + b % 2))
                                        + bytes([0, 7, 9, 11, 5, 6, 7, 8, 5, 6, 7, 8]) + rand_bytes(60 + b, 128)
                                        for b in range(9))),
    "q4_k-huge": ("Q4_K", q4_k_bytes(13, 20, [(b, 60000.0 * (-1) ** b, 30000.0) for b in range(20)])),
    "q4_k-inf-scale": ("Q4_K", q4_k_bytes(14, 20, [(5, math.inf, 0.01)])),
    "q4_k-nan-scale": ("Q4_K", q4_k_bytes(15, 20, [(5, 0.01, math.nan)])),
    # one value repeated: sum(x*x) - n*mean**2 cancels, the element path sums deviations
    "q4_k-equal": ("Q4_K", b"".join(struct.pack("<ee", 0.25, 0.0) + bytes([1] * 12) + bytes([0x33] * 128)
                                    for _ in range(9))),
    # min 0 with positive scales: +0.0 at code 0 (which zero min() keeps depends on the order)
    "q4_k-positive": ("Q4_K", b"".join(struct.pack("<ee", 0.25, 0.5) + bytes([7, 9, 11, 13, 0, 0, 0, 0, 5, 6, 7, 8])
                                       + bytes(range(128)) for _ in range(9))),
}
# The cases the fast path must take (a test that it still does: None would pass the equality test).
FAST_CASES = ("f32", "f32-equal", "bf16", "f16", "f16-pruned", "f16-subnormal", "f16-every-code", "f16-large", "q8_0",
              "q8_0-zero-scale", "q8_0-small", "q8_0-negative", "q8_0-outlier", "q8_0-edges", "q4_k", "q4_k-mixed", "q4_k-zeros", "q4_k-tiny", "q4_k-near", "q4_k-huge", "q4_k-spread",
              "q4_k-outlier", "q4_k-near-wide", "q4_k-zero-step")


def window(dtype: str, data: bytes) -> WindowBytes:
    info = lookup(dtype)
    return WindowBytes(dtype, False, 0, len(data) // info.block_bytes * info.block_elems, data)


@pytest.mark.parametrize("case", sorted(CASES))
def test_chunk_stats_are_the_element_paths(case):
    w = window(*CASES[case])
    fast = rawstats.chunk_stats(w)
    # the element path: F32, BF16 and F16 sum their squares by hypot (as their fast path), the others by fsum
    slow = compute(decode_window(*w), percentiles=False, hypot_squares=w.dtype in ("F32", "BF16", "F16"))
    assert repr(rawstats.element_stats(w)) == repr(slow)
    if fast is not None:
        assert repr(fast) == repr(slow)
    else:   # left to the element path: non-finite values or scales, zero extremes, few Q8_0 blocks, a mean
        # far from 0 (Q8_0 then needs the squared deviations: all-equal values are that case)
        assert case in ("f32-inf", "f32-nan", "f32-zeros", "bf16-inf", "bf16-nan", "bf16-zeros", "f16-inf", "f16-nan",
                        "f16-zeros", "q8_0-inf-scale", "q8_0-equal", "q8_0-few-blocks",
                        "q4_k-inf-scale", "q4_k-nan-scale", "q4_k-equal") or 0.0 in (slow.min, slow.max)


@pytest.mark.parametrize("case", FAST_CASES)
def test_the_chunks_the_fast_path_can_promise_take_it(case):
    assert rawstats.chunk_stats(window(*CASES[case])) is not None


def test_q4_k_cases_hold_what_they_are_named_for():
    # the edge each case was built for is really in it (else the equality above proves less)
    from tensorloupe.sampler import rawstats_q4_k
    stats = {c: compute(decode_window(*window(*CASES[c])), percentiles=False) for c in CASES if c.startswith("q4_k")}
    assert stats["q4_k-zeros"].exact_zeros >= 64
    assert stats["q4_k-tiny"].zeros * stats["q4_k-tiny"].count > 50
    assert 0 < stats["q4_k-near"].zeros * stats["q4_k-near"].count
    assert stats["q4_k-huge"].max > 1e7
    step = stats["q4_k-zero-step"]
    assert step.zeros * step.count - step.exact_zeros >= 9 * 32
    wide = stats["q4_k-near-wide"]
    assert wide.exact_zeros > 0 and wide.zeros * wide.count > wide.exact_zeros
    f16 = [struct.unpack("<e", struct.pack("<e", v))[0] for v in (0.02, 0.01, 0.05)]
    assert (stats["q4_k-outlier"].min, stats["q4_k-outlier"].max) == (-f16[2] * 63, f16[0] * 63 * 15 - f16[1] * 63)
    assert stats["q4_k-positive"].min == 0.0 and stats["q4_k-equal"].min == stats["q4_k-equal"].max
    assert stats["q4_k-inf-scale"].posinf + stats["q4_k-inf-scale"].neginf + stats["q4_k-inf-scale"].nan > 0

    def exact(case):
        data = CASES[case][1]
        col = [data[o:o + 4] for o in range(0, len(data), 144)]
        return rawstats_q4_k._exact_blocks(b"".join(c[:2] for c in col), b"".join(c[2:] for c in col))
    assert all(exact("q4_k")) and all(exact("q4_k-huge"))
    assert [i for i, e in enumerate(exact("q4_k-mixed")) if not e] == [3, 4, 7]
    assert exact("q4_k-nan-scale") is None
    assert exact("q4_k-spread") == [False, True, False, True]
    from tensorloupe.dtypes.ggml.columns import nibbles
    from tensorloupe.dtypes.ggml.kquants import Q4_K, _k4_scales
    data = CASES["q4_k-spread"][1]
    dsc, dm = _k4_scales(Q4_K, data)
    codes = nibbles(Q4_K.col(data, "qs"), 32)
    rounded = [v != dsc[i // 32] * codes[i] - dm[i // 32] for i, v in enumerate(decode_window(*window("Q4_K", data)))]
    assert [any(rounded[b * 256:(b + 1) * 256]) for b in range(4)] == [True, False, True, False]


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
        assert case in ("q8_0-inf-scale", "q8_0-few-blocks", "q4_k-inf-scale", "q4_k-nan-scale")


def test_a_chunk_that_is_not_whole_blocks_is_left_alone():
    dtype, data = CASES["q8_0"]
    n = len(data) // 34 * 32
    assert rawstats.chunk_stats(WindowBytes(dtype, False, 0, n, data)) is not None
    assert rawstats.chunk_stats(WindowBytes(dtype, False, 5, n - 5, data)) is None
    assert rawstats.chunk_stats(WindowBytes(dtype, True, 0, n, data)) is None     # big-endian
    assert rawstats.chunk_stats(WindowBytes("F32", False, 0, 10, data[:40])) is not None
    dtype, data = CASES["q4_k"]
    n = len(data) // 144 * 256
    assert rawstats.chunk_stats(WindowBytes(dtype, False, 0, n, data)) is not None
    assert rawstats.chunk_stats(WindowBytes(dtype, False, 0, n - 256, data)) is None   # a block too many
    assert rawstats.chunk_stats(WindowBytes(dtype, False, 7, n - 7, data)) is None     # not from a block start
    assert not rawstats.add_chunk(Binner(-1.0, 1.0, 32), WindowBytes(dtype, False, 7, n - 7, data), True)


def test_q4_k_blocks_the_decoder_rounds_are_summarised_as_decoded():
    # One block whose float32 rounding is not exact (d far above dmin), chosen so that its minimum
    # is the double d*sc*q - dmin*m rounded up: taken unrounded, the minimum would differ, and
    # binned unrounded that value would lie below the range (its neighbours could change bins).
    from tensorloupe.dtypes.ggml.columns import nibbles
    from tensorloupe.dtypes.ggml.kquants import Q4_K, _k4_scales
    for seed in range(100):
        data = q4_k_bytes(100 + seed, 1, [(0, -0.05, 1.1e-4)])
        values = decode_window(*window("Q4_K", data))
        dsc, dm = _k4_scales(Q4_K, data)
        codes = nibbles(Q4_K.col(data, "qs"), 32)
        doubles = [dsc[i // 32] * codes[i] - dm[i // 32] for i in range(256)]
        low = values.index(min(values))
        if doubles[low] < values[low]:
            break
    else:
        raise AssertionError("no block with its minimum rounded up")
    assert repr(rawstats.chunk_stats(window("Q4_K", data))) == repr(compute(values, percentiles=False))
    fast, slow = Binner(min(values), max(values), 32), Binner(min(values), max(values), 32)
    assert rawstats.add_chunk(fast, window("Q4_K", data), True)
    slow.add(values, within=True)
    assert fast.counts == slow.counts


def test_q8_0_cases_hold_what_they_are_named_for():
    stats = {c: compute(decode_window(*window(*CASES[c])), percentiles=False) for c in CASES if c.startswith("q8_0")}
    assert stats["q8_0-negative"].max < 0
    small, large = struct.unpack("<ee", struct.pack("<ee", 0.001, 0.01))
    assert (stats["q8_0-outlier"].min, stats["q8_0-outlier"].max) == (small * -128, small * 127)
    assert large * 3 < small * 127     # what the blocks of the largest |d| hold is less
    assert stats["q8_0-zero-scale"].exact_zeros >= 64
    assert stats["q8_0"].zeros * stats["q8_0"].count > stats["q8_0"].exact_zeros   # tiny scales: near, not zero
    values = decode_window(*window(*CASES["q8_0-edges"]))
    assert (min(values), max(values)) == (-1.0, 1.0) and values.count(0.5) > 0   # 0.5: an edge of 32 bins


def test_q4_k_histogram_takes_what_the_stats_pass_decoded_of_the_same_bytes_only(monkeypatch):
    from tensorloupe.sampler import rawstats_q4_k
    first, other = window(*CASES["q4_k-mixed"]), window(*CASES["q4_k"])
    kept = {}
    assert repr(rawstats.chunk_stats(first, kept)) == repr(compute(decode_window(*first), percentiles=False))
    assert kept[rawstats_q4_k.KEPT_KEY].data is first.data

    def binned(w, kept):
        values = decode_window(*w)
        fast, slow = Binner(min(values), max(values), 32), Binner(min(values), max(values), 32)
        slow.add(values, within=True)
        assert rawstats.add_chunk(fast, w, True, kept)
        return fast.counts == slow.counts
    # other bytes: what is kept is not theirs (and is let go); they are decoded
    assert binned(other, dict(kept)) and binned(other, {})
    # the same bytes: nothing decoded again, and what was kept is let go once binned
    monkeypatch.setattr(rawstats_q4_k, "_sub_blocks", lambda data: pytest.fail("decoded again"))
    assert binned(first, kept) and kept == {}


@pytest.mark.parametrize("case", ["q8_0", "q4_k", "q4_k-mixed"])
def test_a_value_outside_the_range_leaves_the_histogram_to_the_element_path(case):
    # the range of the second pass narrower than the values (the file changed between passes):
    # the fast path must not bin them into the edge bins
    w = window(*CASES[case])
    values = decode_window(*w)
    assert not rawstats.add_chunk(Binner(min(values) / 2, max(values) / 2, 32), w, True)
    assert rawstats.add_chunk(Binner(min(values), max(values), 32), w, True)


def test_q4_k_lane_tables_are_binner_indices_entry_for_entry(monkeypatch):
    # _lane_tables (fixed-point bin positions) against Binner's formula for every (sub-block, code):
    # scales and minimums that are whole multiples of an inexact bin width put most entries within
    # a few ulps of a bin edge (on either side), where the fixed point cannot tell and each is
    # computed again; the first and last sub-blocks reach outside [lo, hi] (computed one by one)
    import math as m
    from tensorloupe.sampler import rawstats_q4_k
    rng = random.Random(30)
    lo, hi, bins = -0.7, 2.5, 32
    width = (hi - lo) / bins
    dsc = [width * rng.choice((1, 2, 3, -1, -2)) for _ in range(200)] + [0.0, width / 7]
    dm = [-lo - width * rng.randrange(0, 4) - (15 * d if d < 0 else 0) for d in dsc[:200]] + [0.3, -lo]
    dsc[0], dm[0], dsc[1], dm[1] = 1.0, 0.0, -0.5, -2.0      # codes beyond hi, and below lo
    subs = rawstats_q4_k.sub_blocks(dsc, dm, b"")
    assert rawstats_q4_k._lane_tables(subs, lo, hi, width, bins) is None   # so many: left to the formula
    monkeypatch.setattr(rawstats_q4_k, "NEAR_EDGE_SHARE", 1)
    tables = rawstats_q4_k._lane_tables(subs, lo, hi, width, bins)
    want = [m.floor((x - lo) / width) if lo <= x <= hi else 255 for a, b in zip(dsc, dm) for q in range(16)
            for x in (a * q - b,)]
    assert tables is not None and list(tables) == want
    assert 255 in want[:32] and want.count(bins) > 0           # the outside entries, the top edge
    near = sum(1 for a, b in zip(dsc, dm) for q in range(16) if lo <= a * q - b <= hi
               and abs((a * q - b - lo) / width - round((a * q - b - lo) / width)) < 1e-12)
    assert near > 1000


@pytest.mark.parametrize("case", ["q8_0", "q4_k"])
def test_more_bins_than_a_byte_holds_are_left_to_the_element_path(case):
    w = window(*CASES[case])
    values = decode_window(*w)
    for bins in (200, 255, 256, 300):
        fast, slow = Binner(min(values), max(values), bins), Binner(min(values), max(values), bins)
        if rawstats.add_chunk(fast, w, True):
            slow.add(values, within=True)
            assert fast.counts == slow.counts and bins < 256

# --- F32 histograms from the bytes (rawstats_float_bins) ------------------------------------------

def f32_values(values) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def f32_next(x: float, up: bool) -> float:
    """The float32 next to x (x a float32, not a zero)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits += 1 if (x > 0) == up else -1
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bin_cases() -> dict[str, list[float]]:
    rng = random.Random(77)
    gauss = f32_values([rng.gauss(0, 0.02) for _ in range(20_001)])
    edges = [k / 16 - 1 for k in range(33)]     # -1 .. 1 in 32 bins: every edge a float32
    on_edges = edges + [f32_next(e, up) for e in edges if e for up in (False, True) if -1 < f32_next(e, up) < 1]
    return {
        "gauss": gauss,
        "odd-length": gauss[:7],
        "on-edges": f32_values(on_edges * 3 + [rng.uniform(-1, 1) for _ in range(999)]),
        "subnormal": f32_values([rng.choice((-1, 1)) * rng.randrange(1 << 23) * 2.0 ** -149 for _ in range(3001)]),
        # 260 octaves: most top bytes hold no threshold, the ones near zero all of them
        "magnitudes": f32_values([rng.gauss(0, 1) * 2.0 ** rng.randrange(-140, 120) for _ in range(5001)]),
        # near float32's limit (hi - lo never overflows a double: Binner's half scale is for float64s)
        "huge": f32_values([rng.uniform(-3.4e38, 3.4e38) for _ in range(3001)] + [3.4028234663852886e38]),
        "zero-min": f32_values([-0.0, 0.0] + [abs(v) for v in gauss[:3000]]),      # the minimum a zero
        "zero-max": f32_values([0.0, -0.0] + [-abs(v) for v in gauss[:3000]]),     # the maximum a zero
        "one-sign": f32_values([abs(v) + 1.0 for v in gauss[:3000]]),
        "two-values": f32_values([0.5, -0.25] * 500),
    }


BIN_CASES = bin_cases()


@pytest.mark.parametrize("bins", [1, 2, 7, 32, 64, 254])
@pytest.mark.parametrize("case", sorted(BIN_CASES))
def test_f32_histograms_from_the_bytes_are_binner_adds(case, bins):
    from tensorloupe.sampler import rawstats_float_bins
    values = BIN_CASES[case]
    data = struct.pack(f"<{len(values)}f", *values)
    lo, hi = min(values), max(values)
    fast, slow = Binner(lo, hi, bins), Binner(lo, hi, bins)
    found = rawstats_float_bins.plan(fast)
    assert found is not None                         # the bytes path is taken, not the fallback
    counts = rawstats_float_bins.bin_counts(fast, found, data)
    slow.add(values, within=True)
    assert counts == slow.counts
    assert rawstats.add_chunk(fast, window("F32", data), True)
    assert fast.counts == slow.counts


def test_f32_histograms_hold_what_they_are_named_for():
    lo, hi = -1.0, 1.0
    binner = Binner(lo, hi, 32)
    on = BIN_CASES["on-edges"]
    assert sum(1 for v in on if (v - lo) / binner.width == math.floor((v - lo) / binner.width)) >= 90
    assert max(BIN_CASES["huge"]) == 3.4028234663852886e38                   # float32's largest
    assert max(BIN_CASES["subnormal"]) < 2.0 ** -126
    assert repr(min(BIN_CASES["zero-min"])) == "-0.0" and max(BIN_CASES["zero-max"]) == 0.0
    from tensorloupe.sampler import rawstats_float_bins
    found = rawstats_float_bins.plan(Binner(min(BIN_CASES["gauss"]), max(BIN_CASES["gauss"]), 32))
    # top bytes holding thresholds, decided by the second byte, several to a group
    assert sum(group.members for group in found.groups) >= 4 and len(found.groups) < 4
    assert any(group.final is None for group in rawstats_float_bins.plan(Binner(-1.0, 1.0, 254)).groups)

    def plan_of(case, bins=32):
        values = BIN_CASES[case]
        return rawstats_float_bins.plan(Binner(min(values), max(values), bins))
    assert found.top is None                     # the top byte's own codes folded into a group
    assert plan_of("on-edges").top is not None   # no room for them there: one pass more
    assert plan_of("one-sign").groups == ()      # every top byte decides alone


def test_f32_histograms_fall_back_where_the_bytes_cannot_promise_binner_add():
    from tensorloupe.sampler import rawstats_float_bins
    values = BIN_CASES["gauss"]
    data = struct.pack(f"<{len(values)}f", *values)
    assert rawstats_float_bins.plan(Binner(0.125, 0.125, 32)) is None     # a constant: one bin
    assert rawstats_float_bins.plan(Binner(0.1, 0.7, 32)) is None         # 0.1 is no float32
    assert rawstats_float_bins.plan(Binner(-1.0, 1.0, 255)) is None       # more bins than the codes hold
    assert rawstats_float_bins.plan(Binner(-1e300, 1.0, 32)) is None      # beyond float32's range
    # a value outside the range (the file changed between the passes): refused, binned as before
    narrow = Binner(f32_values([-0.01])[0], f32_values([0.01])[0], 32)
    assert rawstats_float_bins.bin_counts(narrow, rawstats_float_bins.plan(narrow), data) is None
    slow = Binner(narrow.lo, narrow.hi, 32)
    slow.add(values, within=True)
    assert rawstats.add_chunk(narrow, window("F32", data), True) and narrow.counts == slow.counts
    # NaN or Inf among the values: the finite ones binned element by element, as before
    w = window(*CASES["f32-nan"])
    finite = [v for v in decode_window(*w) if math.isfinite(v)]
    fast, slow = Binner(min(finite), max(finite), 32), Binner(min(finite), max(finite), 32)
    assert rawstats.add_chunk(fast, w, False)
    slow.add(finite, within=True)
    assert fast.counts == slow.counts


@pytest.mark.parametrize("case", sorted(BIN_CASES))
def test_f32_extremes_from_the_bytes_are_min_and_maxs(case):
    values = BIN_CASES[case]
    data = struct.pack(f"<{len(values)}f", *values)
    got = rawstats._extremes_f32(data[3::4], data[2::4], values)
    assert repr(got) == repr((min(values), max(values)))


def test_f32_extremes_take_the_one_pass_where_they_can():
    # a negative minimum and a positive maximum, few values near them: the bytes single them out
    values = BIN_CASES["gauss"]
    data = struct.pack(f"<{len(values)}f", *values)
    calls = []
    original = rawstats._extreme_f32
    try:
        rawstats._extreme_f32 = lambda *a: calls.append(a) or original(*a)
        assert rawstats._extremes_f32(data[3::4], data[2::4], values) == (min(values), max(values))
        assert not calls
        one_sign = BIN_CASES["one-sign"]      # all positive: the minimum is found the other way
        one_data = struct.pack(f"<{len(one_sign)}f", *one_sign)
        assert rawstats._extremes_f32(one_data[3::4], one_data[2::4], one_sign) == (min(one_sign), max(one_sign))
        assert len(calls) == 2
    finally:
        rawstats._extreme_f32 = original


def test_bin_counts_of_frequent_codes_by_bit_count_and_rare_ones_squeezed_are_bytes_counts():
    from tensorloupe.sampler import bytecounts
    rng = random.Random(5)
    # eight of eleven codes hot; six hot and the rest rare; too few hot (bytes.count for all)
    seen = []
    for weights in ([1] * 12, [50, 1, 1, 30, 1, 20, 9, 9, 9, 1], [1, 1, 0, 0, 1], [900] + [1] * 30):
        # the last case's string spans three pieces of counts_in_pieces
        codes = bytes(rng.choices(range(len(weights)), weights)[0] for _ in range(30_000 if len(seen) < 3 else 150_000))
        wanted = [k for k in range(len(weights)) if k != 1]
        expected = [codes.count(k) if k != 1 else 0 for k in range(len(weights))]
        hot = bytecounts.hot_codes(codes, wanted)
        assert len(hot.codes) == (8, 6, 0, 0)[len(seen)]
        seen.append(weights)
        assert bytecounts.code_counts(codes, wanted, len(weights), hot) == expected
        assert bytecounts.counts_in_pieces(codes, wanted, len(weights)) == expected


def test_f32_histograms_from_the_bytes_are_binner_adds_across_pieces():
    # pieces of 500 values: the values binned one by one are found in every piece, at their
    # place in the whole chunk
    from tensorloupe.sampler import rawstats_float_bins
    saved = rawstats_float_bins.PIECE_ELEMS
    try:
        rawstats_float_bins.PIECE_ELEMS = 500
        for case in ("gauss", "on-edges", "magnitudes"):
            values = BIN_CASES[case]
            data = struct.pack(f"<{len(values)}f", *values)
            fast, slow = Binner(min(values), max(values), 32), Binner(min(values), max(values), 32)
            slow.add(values, within=True)
            assert rawstats_float_bins.bin_counts(fast, rawstats_float_bins.plan(fast), data) == slow.counts
            assert len(values) > 2 * rawstats_float_bins.PIECE_ELEMS
    finally:
        rawstats_float_bins.PIECE_ELEMS = saved


# --- F16: widened to the float32s it stands for; binned from its own bytes ------------------------

def test_f16_widening_is_exact_for_every_finite_code():
    data = F16_EVERY_FINITE
    n = len(data) // 2
    assert rawstats._widen_f16(data)[0] == struct.pack(f"<{n}f", *struct.unpack(f"<{n}e", data))
    # the top bytes and the next ones it makes on the way are the widened values' own
    for case in ("f16", "f16-pruned", "f16-subnormal", "f16-every-code"):
        wide, top, second = rawstats._widen_f16(CASES[case][1])
        assert (top, second) == (wide[3::4], wide[2::4])
    assert rawstats._widen_f16(struct.pack("<3e", 1.0, math.inf, 2.0)) is None
    assert rawstats._widen_f16(struct.pack("<3e", 1.0, math.nan, 2.0)) is None


def test_f16_cases_hold_what_they_are_named_for():
    # the widening's three ways are each taken: few zero exponents (each looked at); many, but few
    # subnormals among them (flagged by the lane sum); many subnormals (struct converts them all)
    def shares(case):
        data = CASES[case][1]
        values = struct.unpack(f"<{len(data) // 2}e", data)
        subnormal = sum(1 for v in values if v and abs(v) < 2.0 ** -14)
        return sum(1 for v in values if abs(v) < 2.0 ** -14) / len(values), subnormal / len(values)
    assert shares("f16")[0] < 1 / rawstats.FEW and shares("f16")[1] > 0
    zero_exponent, subnormal = shares("f16-pruned")
    assert zero_exponent > 1 / rawstats.FEW > subnormal > 0
    assert shares("f16-subnormal")[1] > 1 / rawstats.FEW
    near = compute(decode_window(*window(*CASES["f16"])), percentiles=False)
    assert near.exact_zeros == 2 and near.zeros * near.count >= 4      # 16 * 2**-24 < 1e-6 < 17 * 2**-24
    # the sum: a double's plain left-to-right sum rounds the large case's (fsum must be taken: 3.11's
    # builtin sum() is that plain sum; 3.12's compensates, which the guard need not rely on), not
    # the others' (builtin sum may be taken)
    def sums(case):
        data = CASES[case][1]
        values = struct.unpack(f"<{len(data) // 2}e", data)
        plain = functools.reduce(operator.add, values)
        return plain, math.fsum(values), rawstats._exact_plain_sum(len(values), min(values), max(values))
    plain, exact, promised = sums("f16-large")
    assert plain != exact and not promised
    for case in ("f16", "f16-pruned", "f16-subnormal"):
        plain, exact, promised = sums(case)
        assert plain == exact and promised
    assert not rawstats._exact_plain_sum(rawstats._PLAIN_SUM_ELEMS + 1, -1.0, 1.0)   # more values: more bits


F16_BIN_CASES = {
    "gauss": f16_bytes(41, 20_001),
    "on-edges": struct.pack("<3003e", *([k / 16 - 1 for k in range(33)] * 91)),   # every edge a float16
    "pruned": CASES["f16-pruned"][1],
    "every-code": F16_EVERY_FINITE,
    "zero-min": struct.pack("<3002e", -0.0, 0.0, *(abs(v) for v in struct.unpack("<3000e", f16_bytes(42, 3000)))),
}


def test_f16_histograms_fall_back_where_the_bytes_cannot_promise_binner_add():
    from tensorloupe.sampler import rawstats_float_bins
    F16 = rawstats_float_bins.F16
    assert rawstats_float_bins.plan(Binner(0.1, 0.7, 32), F16) is None        # 0.1 is no float16
    assert rawstats_float_bins.plan(Binner(-1e5, 1.0, 32), F16) is None       # beyond float16's range
    assert_values_outside_the_range_fall_back("F16", F16_BIN_CASES["gauss"])


# --- BF16: binned from its own bytes, as F16 (the two-byte histograms of both) --------------------

# Every bfloat16 but the infinities and NaNs (exponent 0xFF), in code order: subnormals, both zeros.
BF16_EVERY_FINITE = b"".join(struct.pack("<H", c) for c in range(1 << 16) if c >> 7 & 0xFF != 0xFF)


def bf16_values(data: bytes) -> list[float]:
    n = len(data) // 2
    return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *(c << 16 for c in struct.unpack(f"<{n}H", data)))))


BF16_BIN_CASES = {
    "gauss": bf16_bytes(f32_bytes(43, 20_001)),
    "on-edges": bf16_bytes(struct.pack("<3003f", *([k / 16 - 1 for k in range(33)] * 91))),
    "every-code": BF16_EVERY_FINITE,
    "zero-min": bf16_bytes(struct.pack("<3002f", -0.0, 0.0, *(abs(v) for v in struct.unpack("<3000f", f32_bytes(44, 3000))))),
}


TWO_BYTE_VALUES = {"F16": lambda data: list(struct.unpack(f"<{len(data) // 2}e", data)), "BF16": bf16_values}
TWO_BYTE_BIN_CASES = {**{("F16", name): data for name, data in F16_BIN_CASES.items()},
                      **{("BF16", name): data for name, data in BF16_BIN_CASES.items()}}


@pytest.mark.parametrize("bins", [1, 2, 7, 32, 64, 254])
@pytest.mark.parametrize("dtype, case", sorted(TWO_BYTE_BIN_CASES))
def test_two_byte_histograms_from_the_bytes_are_binner_adds_with_none_binned_one_by_one(dtype, case, bins):
    from tensorloupe.sampler import rawstats_float_bins
    data = TWO_BYTE_BIN_CASES[dtype, case]
    values = TWO_BYTE_VALUES[dtype](data)
    lo, hi = min(values), max(values)
    fast, slow = Binner(lo, hi, bins), Binner(lo, hi, bins)
    found = rawstats_float_bins.plan(fast, getattr(rawstats_float_bins, dtype))
    assert found is not None
    # a float16 or a bfloat16 is its top 16 bits: the tables decide every value's bin, no code of a
    # value in the range is ONE_BY_ONE
    codes = rawstats_float_bins._codes(found, data[1::2], data[0::2])
    assert codes.find(rawstats_float_bins.ONE_BY_ONE) < 0
    slow.add(values, within=True)
    assert rawstats_float_bins.bin_counts(fast, found, data) == slow.counts
    assert rawstats.add_chunk(fast, window(dtype, data), True)
    assert fast.counts == slow.counts


def assert_values_outside_the_range_fall_back(dtype: str, data: bytes) -> None:
    """A range the values leave: no counts from the bytes, and add_chunk gives the element path's."""
    from tensorloupe.sampler import rawstats_float_bins
    narrow = Binner(-2.0 ** -7, 2.0 ** -7, 32)
    found = rawstats_float_bins.plan(narrow, getattr(rawstats_float_bins, dtype))
    assert rawstats_float_bins.bin_counts(narrow, found, data) is None
    slow = Binner(narrow.lo, narrow.hi, 32)
    slow.add(TWO_BYTE_VALUES[dtype](data), within=True)
    assert rawstats.add_chunk(narrow, window(dtype, data), True) and narrow.counts == slow.counts


def test_bf16_histograms_fall_back_where_the_bytes_cannot_promise_binner_add():
    from tensorloupe.sampler import rawstats_float_bins
    BF16 = rawstats_float_bins.BF16
    assert rawstats_float_bins.plan(Binner(0.1, 0.75, 32), BF16) is None       # 0.1 is no bfloat16
    assert rawstats_float_bins.plan(Binner(1.0 + 2 ** -10, 2.0, 32), BF16) is None   # a float32, no bfloat16
    assert rawstats_float_bins.plan(Binner(-1e39, 1.0, 32), BF16) is None     # beyond its range
    assert_values_outside_the_range_fall_back("BF16", BF16_BIN_CASES["gauss"])
