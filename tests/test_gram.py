"""gram.cosine_steps (fixed-point integer similarities) against numpy's float64 cosine: within the
bound its docstring proves, on random and on adversarial vectors."""

import math

import numpy as np
import pytest

from tensorloupe.moe.gram import BLOCK_ROWS, cosine_matrix, cosine_steps, max_error, value_bits


def numpy_cosine(vectors):
    m = np.array(vectors, dtype=np.float64)
    # each row scaled by an exact power of two to a peak near 1 (no overflow or underflow in norms)
    peaks = np.abs(m).max(axis=1) if m.size else np.zeros(len(m))
    exponents = np.frexp(np.where(peaks > 0, peaks, 1.0))[1]
    m = np.ldexp(np.ldexp(m, -(exponents // 2)[:, None]), -(exponents - exponents // 2)[:, None])
    norms = np.linalg.norm(m, axis=1)
    norms[norms == 0] = 1
    u = m / norms[:, None]
    out = np.clip(u @ u.T, -1, 1)
    np.fill_diagonal(out, 1.0)
    return out


def error(vectors) -> float:
    return float(np.abs(np.array(cosine_matrix(vectors)) - numpy_cosine(vectors)).max())


def test_the_bound_is_what_the_docstring_says():
    assert value_bits(8192) == 25 and value_bits(12288) == 25 and value_bits(70_000) == 23
    assert 1.0e-5 < max_error(8192) < 1.1e-5
    assert max_error(12288) < 1.35e-5
    # a field holds `length` products of values below 2**bits without reaching 2**64
    for length in (1, 2, 3, 4096, 8192, 8193, 12288, 70_000, 1 << 20):
        assert length * (1 << value_bits(length)) ** 2 <= 1 << 64


@pytest.mark.parametrize("length", [1, 7, 8192, 70_000])
def test_similarities_match_numpy(length):
    rng = np.random.default_rng(length)
    base = rng.standard_normal((6, length)) * rng.uniform(1e-3, 1e3, (6, 1))
    base[1] = base[0] * 4                       # a power-of-two multiple: exactly 1
    base[2] = -base[0]                          # opposite: exactly -1
    base[5] = base[0] * 3.5                     # parallel: 1 to second order in the rounding
    base[3] = base[4] + rng.standard_normal(length) * 0.01 * np.abs(base[4]).mean()
    vectors = base.tolist()
    got = np.array(cosine_matrix(vectors))
    assert np.abs(got - numpy_cosine(vectors)).max() < min(max_error(length), 1e-7)
    assert got[0, 1] == 1.0 and got[0, 2] == -1.0 and got[1, 0] == 1.0
    assert 1 - max_error(length) ** 2 / 2 - 1e-15 <= got[0, 5] <= 1.0
    assert (got == got.T).all() and (np.diag(got) == 1.0).all()


def test_a_layer_of_64_experts_in_blocks_of_rows():
    rng = np.random.default_rng(64)
    m = rng.standard_normal((64, 8192)) * rng.uniform(0.01, 3, (64, 1))
    m[40] = m[3] * 0.5                          # a pair across blocks of rows
    m[63] = m[62] + rng.standard_normal(8192) * 1e-3
    vectors = m.tolist()
    steps = list(cosine_steps(vectors))
    assert steps[:-1] == [None] * (64 // BLOCK_ROWS)
    got = np.array(steps[-1])
    assert np.abs(got - numpy_cosine(vectors)).max() < 1e-7
    assert got[3, 40] == got[40, 3] == 1.0


def test_adversarial_vectors_stay_within_the_bound():
    length = 8192
    half = 1 << (value_bits(length) - 1)
    bound = max_error(length)
    # One outlier scaled to h/2 (the smallest norm a scaled vector has) and every other value
    # on a tie, 1.5 grid steps (rounded to even: 2): every rounding moves the same way, the worst
    # case the bound is proven for. One vector of the pair is moved: half the bound.
    step = 2.0 / half
    spike = [1.0] + [1.5 * step] * (length - 1)
    flat = [0.0] + [1.0] * (length - 1)
    worst = error([spike, flat])
    assert bound / 4 < worst <= bound
    # One huge outlier among tiny noise: the noise falls below the grid (cosine ~0 either way).
    rng = np.random.default_rng(1)
    noise = rng.standard_normal(length) * 1e-9
    outlier = noise.copy()
    outlier[17] = 1e6
    assert error([outlier.tolist(), noise.tolist(), (noise + 1e-12).tolist()]) <= bound
    # Near-parallel vectors: differences far below the grid still rank below exactly 1.
    base = rng.standard_normal(length)
    near = [base.tolist(), (base * (1 + 1e-12)).tolist(), (base + rng.standard_normal(length) * 1e-4).tolist()]
    got = cosine_matrix(near)
    assert got[0][1] == 1.0 and got[0][2] < 1.0
    assert error(near) <= bound


def test_zero_vectors_unequal_lengths_and_extremes():
    vectors = [[0.0] * 5, [1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 0.0, 0.0], [1e6, 1e-6, -1e-6, 0.0, 0.0]]
    got = cosine_matrix(vectors)
    assert got[0][1] == 0.0 and got[1][2] == 1.0 and got[0][0] == 1.0
    padded = [v + [0.0] * (5 - len(v)) for v in vectors]
    assert np.abs(np.array(got) - numpy_cosine(padded)).max() < 1e-7
    assert cosine_matrix([]) == []
    assert cosine_matrix([[], []]) == [[1.0, 0.0], [0.0, 1.0]]
    # magnitudes at both ends of the doubles (subnormal, near the largest) are rescaled exactly
    extremes = [[5e-324, 0.0, 1e-320], [1.7e308, -1e308, 0.0], [1e-300, 2e-301, 3e-300], [3.0, 2.0, 1.0]]
    assert error(extremes) < 1e-7
    with pytest.raises(ValueError, match="finite"):
        cosine_matrix([[1.0, math.inf], [1.0, 2.0]])


@pytest.mark.parametrize("scale", [1.0, 1e-300, 1e300, 3e-320])
def test_norms_and_sums_are_within_the_bound(scale):
    """Gram.norms and Gram.sums, from the same fixed-point integers: each within max_error / 2
    of numpy's, relative to the norm (the sum: to the norm times sqrt(length)), at every scale a
    double reaches (extreme vectors are scaled to ~1 first, and back after)."""
    from tensorloupe.moe.gram import gram_steps
    rng = np.random.default_rng(int(-math.log10(scale)) + 400)
    length = 8192
    m = rng.standard_normal((5, length)) * rng.uniform(1e-3, 1e3, (5, 1))
    m[2] = 0.0
    m[3, :] = 0.0
    m[3, 17] = -5.0                               # one value
    m[4] = np.abs(m[4])                           # a sum far from 0
    vectors = (m * scale).tolist()
    *_, gram = gram_steps(vectors)
    bound = max_error(length) / 2
    norms = [math.hypot(*v) for v in vectors]          # within ~1 ulp
    sums = [math.fsum(v) for v in vectors]
    for got, want, norm in zip(gram.norms, norms, norms):
        assert abs(got - want) <= bound * norm + 1e-15 * abs(want) + 5e-324
    for got, want, norm in zip(gram.sums, sums, norms):
        assert abs(got - want) <= bound * norm * math.sqrt(length) + 1e-15 * abs(want) + 5e-324
    assert gram.norms[2] == gram.sums[2] == 0.0
    if scale == 1.0:                              # 5 lies on the fixed-point grid: exact
        assert gram.norms[3] == 5.0 and gram.sums[3] == -5.0
    assert gram.cosines == cosine_matrix(vectors)


def test_norms_beyond_the_largest_double_are_infinite():
    from tensorloupe.moe.gram import gram_steps
    *_, gram = gram_steps([[1.5e308] * 4, [1.0, 2.0, 3.0, 4.0]])
    assert gram.norms[0] == math.inf and gram.sums[0] == math.inf
    assert gram.norms[1] == math.sqrt(30.0) and gram.sums[1] == 10.0


def test_both_dot_products_are_exact_and_equal():
    """math.sumprod (Pyodide's 3.12+) and sum(map(mul)) (CPython 3.11) give the same integers."""
    import random
    from tensorloupe.moe import gram
    rng = random.Random(8)
    a = [rng.getrandbits(25) for _ in range(3000)]
    b = [rng.getrandbits(64 * 65) for _ in range(3000)]
    exact = sum(x * y for x, y in zip(a, b))
    assert gram._map_dot(a, b) == exact
    if hasattr(math, "sumprod"):
        assert gram._dot(a, b) == exact
