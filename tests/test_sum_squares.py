"""stats.hypot_sum_squares (the square of math.hypot, the F32 exact pass's sum of squares) gives CPython 3.11's numbers to the last bit: stdlib only,
so that it also runs inside Pyodide's 3.14 (tests/pyodide PURE_MODULES), where the page computes the same
statistics. The expected values are constants computed on CPython 3.11.7: this fails there if hypot's
algorithm (vector_norm) ever rounds differently between the two."""

import math
import random
import struct
from functools import lru_cache

import pytest

from tensorloupe.sampler.stats import hypot_sum_squares as _sum_squares


def f32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def vectors() -> dict[str, list[float]]:
    rng = random.Random(2027)
    return {
        "gauss": f32([rng.gauss(0, 0.02) for _ in range(100_003)]),     # weights, an odd length
        "subnormal": f32([rng.choice((-1, 1)) * rng.randrange(1, 1 << 23) * 2.0 ** -149 for _ in range(5001)]),
        "mixed": f32([rng.gauss(0, 1) * 2.0 ** rng.randrange(-140, 120) for _ in range(20011)]),   # 260 octaves
        "huge": f32([rng.uniform(-3.4e38, 3.4e38) for _ in range(1 << 15)]),
        "one-big": f32([3e38] + [rng.gauss(0, 1e-30) for _ in range(4999)]),
        "large-n": f32([rng.uniform(-1, 1) for _ in range(1 << 18)]),
    }


# float.hex of hypot_sum_squares on CPython 3.11.7
EXPECTED = {
    "gauss": "0x1.3e3306ed02c9ap+5",
    "subnormal": "0x1.a2fdf9d78dde3p-242",
    "mixed": "0x1.f06928bb60667p+244",
    "huge": "0x1.566286d35b357p+269",
    "one-big": "0x1.8df463d7b5480p+255",
    "large-n": "0x1.54bf2cd56b035p+16",
}


@lru_cache(maxsize=1)
def cases() -> dict[str, list[float]]:
    # not a pytest fixture: tests/pyodide/minipytest.py skips tests that need one
    return vectors()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sum_squares_is_cpython_311s_to_the_last_bit(name):
    assert _sum_squares(cases()[name]).hex() == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sum_squares_is_within_2_ulp_of_the_exact_sum(name):
    exact = math.fsum(v * v for v in cases()[name])     # each float32 square is exact in a double
    assert abs(_sum_squares(cases()[name]) - exact) <= 2 * math.ulp(exact)


def test_sum_squares_edges():
    assert _sum_squares([]) == 0.0
    assert _sum_squares([-3.0]) == 9.0
    assert _sum_squares([0.0, -0.0]) == 0.0
    assert _sum_squares([1e200, 1e200]) == math.inf      # overflows as the sum itself would
