"""gram.cosine_rows (fixed-point integer similarities) against numpy's float cosine."""

import numpy as np
import pytest

from tensorloupe.gram import cosine_rows


def numpy_cosine(vectors):
    m = np.array(vectors, dtype=np.float64)
    norms = np.linalg.norm(m, axis=1)
    norms[norms == 0] = 1
    u = m / norms[:, None]
    out = np.clip(u @ u.T, -1, 1)
    np.fill_diagonal(out, 1.0)
    return out


@pytest.mark.parametrize("length", [1, 7, 8192, 70_000])
def test_similarities_match_numpy(length):
    rng = np.random.default_rng(length)
    base = rng.standard_normal((6, length)) * rng.uniform(1e-3, 1e3, (6, 1))
    base[1] = base[0] * 3.5                     # parallel: exactly 1
    base[2] = -base[0]                          # opposite: exactly -1
    base[3] = base[4] + rng.standard_normal(length) * 0.01 * np.abs(base[4]).mean()
    vectors = base.tolist()
    rows = list(cosine_rows(vectors))
    assert len(rows) == 6
    got = np.array(rows[-1])
    assert np.abs(got - numpy_cosine(vectors)).max() < 1e-6
    assert got[0, 1] == 1.0 and got[0, 2] == -1.0 and got[1, 0] == 1.0
    assert (got == got.T).all() and (np.diag(got) == 1.0).all()


def test_zero_vectors_unequal_lengths_and_outliers():
    vectors = [[0.0] * 5, [1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 0.0, 0.0], [1e6, 1e-6, -1e-6, 0.0, 0.0]]
    got = list(cosine_rows(vectors))[-1]
    assert got[0][1] == 0.0 and got[1][2] == 1.0
    padded = [v + [0.0] * (5 - len(v)) for v in vectors]
    assert np.abs(np.array(got) - numpy_cosine(padded)).max() < 1e-6
    assert list(cosine_rows([])) == []
