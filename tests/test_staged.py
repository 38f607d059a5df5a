"""First looks (staged.py): the first stage is part of the view, the second gives exactly what
`sample` / `grid` give, and the two stages together read exactly their bytes, in as many reads.
Also the sorted-values shortcuts they rely on (stats.summarize, sorted_histogram)."""

from __future__ import annotations

import json
import math
import random
import struct

import numpy as np
import pytest

import tensorloupe
from tensorloupe.sampler.sampling import grid, sample
from tensorloupe.sampler.staged import EVERY, MIN_ROWS, StagedGrid, StagedSample
from tensorloupe.sampler.stats import compute, histogram, sorted_histogram, summarize


def checkpoint_bytes(tensors: dict[str, np.ndarray], dtypes: dict[str, str] | None = None) -> bytes:
    header, blobs, offset = {}, [], 0
    for name, values in tensors.items():
        blob = values.tobytes()
        dtype = (dtypes or {}).get(name) or {"float16": "F16", "float32": "F32"}[values.dtype.name]
        header[name] = {"dtype": dtype, "shape": list(values.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    return checkpoint_bytes({
        "big": (rng.standard_normal((2048, 2048)) * 0.02).astype(np.float16),   # rows 4 KiB: lattice rows 32 KiB apart
        "wide": rng.standard_normal((512, 34_000)).astype(np.float16),         # lattice rows 136 KB apart
        "bf16": (rng.standard_normal((512, 34_000)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16),
        "small": rng.standard_normal((40, 30)).astype(np.float32),
    }, {"bf16": "BF16"})


def counted(data, fn):
    with tensorloupe.open(data, name="m.safetensors") as ckpt:
        before = (ckpt.bytes_read(), ckpt.reads())
        out = fn(ckpt)
        return out, (ckpt.bytes_read() - before[0], ckpt.reads() - before[1])


# --- the sorted-values shortcuts --------------------------------------------------------------

def value_sets():
    rng = random.Random(4)
    yield [rng.gauss(0, 0.02) for _ in range(5000)]
    yield [rng.choice([0.0, -0.0, 1e-7, -1e-7, 5e-7, 3.0, -2.0]) for _ in range(999)]
    yield [-0.0, 0.0, -1.0] * 50                       # maxima of both signs of zero
    yield [0.0, -0.0, 1.0] * 50
    yield [rng.gauss(0, 1) for _ in range(3000)] + [math.nan, math.inf, -math.inf]
    yield [2.5] * 100
    yield [float(rng.randrange(-5, 5)) for _ in range(777)]
    yield [1.0]


@pytest.mark.parametrize("values", list(value_sets()))
def test_sorted_shortcuts_give_the_per_value_numbers(values):
    stats, ordered = summarize(values)
    finite = [v for v in values if math.isfinite(v)]
    assert repr(stats) == repr(compute(values))
    # the same objects as min() and max() (0.0 and -0.0 are told apart by repr)
    assert (repr(stats.min), repr(stats.max)) == (repr(min(finite)), repr(max(finite)))
    assert stats.zeros == sum(1 for v in finite if -1e-6 < v < 1e-6) / len(values)
    for bins in (1, 7, 64):
        assert repr(sorted_histogram(ordered, bins)) == repr(histogram(values, bins))


# --- the sample in two stages ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["big", "wide", "bf16"])
def test_staged_sample_is_the_sample_and_reads_its_bytes_once(data, name):
    whole, whole_io = counted(data, lambda c: sample(c.tensor(name)))

    def staged(ckpt):
        s = StagedSample(ckpt.tensor(name))
        return s.first_look(), s.sample()
    (look, full), staged_io = counted(data, staged)
    assert staged_io == whole_io
    assert full.values == whole.values and full.windows == whole.windows
    assert full.to_json() == whole.to_json() and "first_look" not in full.to_json()
    assert look.first_look and look.to_json()["first_look"] is True and not look.exhaustive
    assert look.windows == whole.windows[EVERY // 2::EVERY]
    assert len(look.values) == len(whole.values) // EVERY
    assert repr(look.stats) == repr(compute(look.values))
    assert repr(full.histogram(64)) == repr(histogram(whole.values, 64))


def test_a_one_window_sample_has_no_first_look(data):
    (look, full), io = counted(data, lambda c: (lambda s: (s.first_look(), s.sample()))(StagedSample(c.tensor("small"))))
    assert look is None and full.exhaustive
    assert io == counted(data, lambda c: sample(c.tensor("small")))[1]


# --- the lattice in two stages --------------------------------------------------------------

@pytest.mark.parametrize("name, args", [("wide", {}), ("bf16", {}), ("wide", {"region": (0, 512, 300, 33_000)}),
                                        ("wide", {"rows": 100, "cols": 3})])
def test_staged_grid_is_the_grid_and_reads_its_bytes_once(data, name, args):
    rows, cols = args.get("rows", 256), args.get("cols", 256)
    region = args.get("region")
    whole, whole_io = counted(data, lambda c: grid(c.tensor(name), rows, cols, region))

    def staged(ckpt):
        g = StagedGrid(ckpt.tensor(name), rows, cols, region)
        return g.first_look(), g.grid()
    (look, full), staged_io = counted(data, staged)
    assert staged_io == whole_io
    assert full == whole and not full.first_look
    step = EVERY if cols >= EVERY else 1
    assert look.first_look and not look.exact
    assert look.row_index == whole.row_index[EVERY // 2::EVERY]
    assert look.col_index == whole.col_index[step // 2::step] if step > 1 else look.col_index == whole.col_index
    for i, r in enumerate(look.row_index):
        for j, c in enumerate(look.col_index):
            want = whole.at(whole.row_index.index(r), whole.col_index.index(c))
            assert look.at(i, j) == want or (math.isnan(want) and math.isnan(look.at(i, j)))


@pytest.mark.parametrize("name, rows, why", [
    ("big", 256, "lattice rows 32 KiB apart are read together: two stages would read more often"),
    ("wide", MIN_ROWS - 1, "too few rows to be worth two stages"),
    ("small", 256, "a 40-row tensor"),
])
def test_no_first_look_where_it_would_not_pay(data, name, rows, why):
    (look, full), io = counted(data, lambda c: (lambda g: (g.first_look(), g.grid()))(StagedGrid(c.tensor(name), rows, 256)))
    assert look is None, why
    whole, whole_io = counted(data, lambda c: grid(c.tensor(name), rows, 256))
    assert full == whole and io == whole_io
