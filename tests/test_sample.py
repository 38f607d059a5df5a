"""The sampler: statistics against numpy on the same elements, grid cells against the elements they
claim to be, strided views, exact streaming stats, and bytes-read bounds on a 4 GiB sparse file."""

import json
import math
import struct

import numpy as np
import pytest
from safetensors.numpy import save as np_save

import tensorloupe
from tensorloupe.errors import Cancelled, UsageError
from tensorloupe.model import Tensor
from tensorloupe.sampler.sampling import (MAX_WINDOWS, exact_stats, grid, histogram, lattice,
                                          plan_windows, sample, values)
from tensorloupe.source.base import MemorySource
from tensorloupe.sampler.stats import compute

RNG = np.random.default_rng(42)
MATRIX = (RNG.standard_normal((640, 480)) * 0.02).astype(np.float32)
CUBE = RNG.standard_normal((6, 40, 50)).astype(np.float16)


@pytest.fixture(scope="module")
def ckpt():
    return tensorloupe.open(np_save({"m": MATRIX, "c": CUBE}))


def numpy_stats(x: np.ndarray) -> dict:
    x = x.astype(np.float64)
    return {"min": x.min(), "max": x.max(), "mean": x.mean(), "std": x.std()}


def test_sample_stats_match_numpy_on_the_same_elements(ckpt):
    s = sample(ckpt.tensor("m"), 10_000)
    flat = MATRIX.ravel()
    chosen = np.concatenate([flat[a:a + n] for a, n in s.windows])
    ref = numpy_stats(chosen)
    assert s.stats.count == len(chosen) <= 10_000
    assert s.stats.min == ref["min"] and s.stats.max == ref["max"]
    assert s.stats.mean == pytest.approx(ref["mean"], rel=1e-12, abs=1e-15)
    assert s.stats.std == pytest.approx(ref["std"], rel=1e-12)
    for p in (1, 25, 50, 99):
        assert s.stats.percentiles[f"p{p}"] == pytest.approx(np.percentile(chosen.astype(np.float64), p), rel=1e-12)


def test_windows_are_spread_over_the_whole_tensor_in_few_reads(ckpt):
    t = ckpt.tensor("m")
    windows = plan_windows(t.numel, 4096)
    assert len(windows) == MAX_WINDOWS
    assert windows[0][0] == 0 and windows[-1][0] + windows[-1][1] == t.numel
    root = t.source.root()
    before = root.reads
    sample(t, 4096)
    assert root.reads - before <= MAX_WINDOWS


def test_small_tensor_is_sampled_exhaustively(ckpt):
    s = sample(ckpt.tensor("c"), 1_000_000)
    assert s.exhaustive and s.values == CUBE.astype(np.float64).ravel().tolist()


def test_non_finite_values_are_counted_apart():
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -3.0, 5e-7], dtype=np.float32)
    s = sample(tensorloupe.open(np_save({"x": x})).tensor("x"))
    st = s.stats
    assert (st.count, st.finite, st.nan, st.posinf, st.neginf) == (7, 4, 1, 1, 1)
    assert st.min == -3.0 and st.max == 1.0 and st.exact_zeros == 1
    assert st.zeros == pytest.approx(2 / 7)  # 0.0 and 5e-7 are near zero
    assert json.dumps(st.to_json(), allow_nan=False)


def test_std_is_stable_for_large_offsets():
    # the sum-of-squares identity returns garbage here; two-pass fsum does not
    x = (1e8 + np.arange(1000) % 7).astype(np.float64)
    s = compute(x.tolist())
    assert s.std == pytest.approx(x.std(), rel=1e-12)


def test_grid_cells_are_the_elements_they_claim(ckpt):
    g = grid(ckpt.tensor("m"), 37, 29)
    assert (g.rows, g.cols) == (37, 29) and g.view_shape == (640, 480) and not g.exact
    for i, r in enumerate(g.row_index):
        for j, c in enumerate(g.col_index):
            assert g.at(i, j) == float(MATRIX[r, c])
    assert g.row_index == sorted(set(g.row_index)) and 0 <= g.row_index[0] and g.row_index[-1] < 640


def test_grid_region_zoomed_to_elements_is_exact(ckpt):
    g = grid(ckpt.tensor("m"), 64, 64, region=(100, 110, 200, 216))
    assert g.exact and (g.rows, g.cols) == (10, 16)
    assert g.values == MATRIX[100:110, 200:216].astype(np.float64).ravel().tolist()


def test_grid_of_3d_default_view_and_planes(ckpt):
    t = ckpt.tensor("c")
    g = grid(t, 6, 2000)
    assert g.view_shape == (6, 2000) and g.exact
    assert g.values == CUBE.reshape(6, -1).astype(np.float64).ravel().tolist()
    g = grid(t, 100, 100, plane=(0, 2), index={1: 7})
    assert g.view_shape == (6, 50) and g.values == CUBE[:, 7, :].astype(np.float64).ravel().tolist()
    g = grid(t, 100, 100, plane=(2, 1), index={0: 3})
    assert g.values == CUBE[3].T.astype(np.float64).ravel().tolist()


def test_grid_rejects_bad_requests(ckpt):
    with pytest.raises(UsageError):
        grid(ckpt.tensor("m"), 10, 10, region=(0, 700, 0, 10))
    with pytest.raises(UsageError):
        grid(ckpt.tensor("c"), 10, 10, plane=(1, 1))
    with pytest.raises(UsageError):
        grid(ckpt.tensor("c"), 10, 10, plane=(1, 2), index={0: 6})


def test_lattice_centres():
    assert lattice(0, 10, 10) == list(range(10))
    assert lattice(0, 100, 4) == [12, 37, 62, 87]
    assert lattice(5, 7, 50) == [5, 6]


def test_strided_view_samples_the_right_elements():
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    source = MemorySource(base.tobytes())
    # a transposed, narrowed view: base[1:5, 2:9].T, as torch would describe it (offset 12, strides (1, 10))
    view = base[1:5, 2:9].T
    t = Tensor("v", "F32", (7, 4), offset=12 * 4, nbytes=source.size - 48, source=source, strides=(1, 10))
    assert values(t, 0, 28) == view.ravel().tolist()
    assert grid(t, 7, 4).values == view.ravel().tolist()
    # a sample reads windows in the storage's order (sampler/layout.py): of base[1:5, 2:9]
    stored = base[1:5, 2:9].ravel()
    assert sample(t, 10).values == [float(v) for a, n in plan_windows(28, 10) for v in stored[a:a + n]]
    assert exact_stats(t, chunk_elems=5).mean == pytest.approx(view.mean())


def test_exact_stats_streams_every_element_with_progress(ckpt):
    seen = []
    st = exact_stats(ckpt.tensor("m"), progress=lambda done, total: seen.append((done, total)),
                     chunk_elems=50_000)
    ref = numpy_stats(MATRIX)
    assert st.count == MATRIX.size and st.min == ref["min"] and st.max == ref["max"]
    assert st.mean == pytest.approx(ref["mean"], rel=1e-9, abs=1e-15)
    assert st.std == pytest.approx(ref["std"], rel=1e-9)
    assert seen[-1] == (MATRIX.size, MATRIX.size) and len(seen) == math.ceil(MATRIX.size / 50_000)


def test_exact_stats_can_be_cancelled(ckpt):
    with pytest.raises(Cancelled):
        exact_stats(ckpt.tensor("m"), progress=lambda done, total: False, chunk_elems=1000)


def test_values_and_bounds(ckpt):
    assert values(ckpt.tensor("m"), 479, 3) == MATRIX.ravel()[479:482].astype(np.float64).tolist()
    assert values(ckpt.tensor("m"), MATRIX.size - 1, 10) == [float(MATRIX.ravel()[-1])]


def test_histogram_counts_and_log_heights():
    h = histogram([0.0, 0.1, 0.2, 0.9, 1.0, math.nan], bins=10)
    assert sum(h.counts) == 5 and h.counts[0] == 1 and h.counts[-1] == 2
    assert h.edges[0] == 0.0 and h.edges[-1] == 1.0 and len(h.edges) == 11
    assert histogram([1, 1, 1], bins=4, log=True).heights[0] == pytest.approx(math.log10(4))
    ref_counts, _ = np.histogram(MATRIX.ravel()[:5000], bins=20)
    assert histogram(MATRIX.ravel()[:5000].tolist(), bins=20).counts == ref_counts.tolist()


def test_4gib_sparse_file_lists_and_samples_reading_under_1mib(tmp_path):
    # A 4 GiB+ checkpoint made of holes: listing reads only the header, sampling only its windows.
    rows, cols = 65536, 16384            # F32: 4 GiB in one tensor, plus a small one
    header = {"__metadata__": {"note": "sparse"},
              "small": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "huge": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [16, 16 + rows * cols * 4]}}
    text = json.dumps(header).encode()
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + struct.pack("<4f", 1, 2, 3, 4))
        f.truncate(8 + len(text) + 16 + rows * cols * 4)
    assert path.stat().st_size > 4 * 2 ** 30
    ckpt = tensorloupe.open(path)
    assert [t.name for t in ckpt.tensors] == ["small", "huge"]
    assert ckpt.bytes_read() < 1 << 17
    s = sample(ckpt.tensor("huge"), 65536)
    assert s.stats.count == 65536 and s.stats.max == 0.0
    assert ckpt.bytes_read() < 1 << 20, ckpt.bytes_read()
    assert ckpt.reads() <= 2 + MAX_WINDOWS
    # A heatmap lattice reads whole row spans (one read per lattice row): 128 rows of 64 KiB.
    before = ckpt.bytes_read(), ckpt.reads()
    g = grid(ckpt.tensor("huge"), 128, 128)
    assert g.rows == 128 and g.cols == 128
    assert ckpt.reads() - before[1] == 128
    assert ckpt.bytes_read() - before[0] <= 128 * cols * 4


def test_a_range_wider_than_the_largest_float_is_binned(tmp_path):
    # -1.7e308 .. 1.7e308: max - min overflows to inf, and the bin index of every value was NaN
    # (a ValueError escaped from the page's and the CLI's histogram). Binned at half scale, every
    # value lands in the bin of the exact arithmetic; the sampled and exact histograms agree.
    data = np.array([-1.7e308, -3e307, 0.0, 5.0, 1e308, 1.7e308, 1.7e308, 2.0], dtype=np.float64)
    path = tmp_path / "wide.safetensors"
    path.write_bytes(np_save({"wide": data}))
    t = tensorloupe.open(path).tensor("wide")
    s = sample(t)
    width = (1.7e308 / 2 + 1.7e308 / 2) / 8      # half of max - min, per bin, without overflow
    expected = [0] * 8
    for v in data:
        expected[min(7, int((v / 2 + 1.7e308 / 2) / width))] += 1
    assert expected == [1, 0, 0, 1, 3, 0, 1, 2]
    assert histogram(s.values, 8).counts == expected
    assert tensorloupe.exact_histogram(t, exact_stats(t), bins=8).counts == expected
    edges = histogram(s.values, 8).edges
    assert edges[0] == -1.7e308 and edges[-1] == 1.7e308 and all(map(math.isfinite, edges))
