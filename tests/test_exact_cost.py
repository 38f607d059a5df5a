"""Exact passes are bounded by what the file's bytes hold (issue 25): a stride-0 tensor of 2**40
elements in a 2 KB file took hours under `stats --exact` / `health --exact`. Its exact figures
are its stored elements' with every count multiplied, checked here against numpy on the
materialised tensor; any other view that rereads its bytes past the limit is refused first,
naming the cost, unless --max-elements allows it."""

import json
import pickle
import time
from collections import OrderedDict

import numpy as np
import pytest
import torch

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.errors import LimitError
from tensorloupe.healthscan import health
from tensorloupe.sampler.repeats import MIN_LIMIT, exact_cost
from tensorloupe.sampler.sampling import exact_histogram, exact_stats

import torch_files as tf  # noqa: E402

BIG = 1 << 40


def expanded():
    """Stride-0 views as torch writes them: the storage once, size and stride as given."""
    return {
        "big": torch.zeros(1).expand(BIG),                                        # stride (0,)
        "rows": torch.tensor([[0.5], [-1.0], [3.0], [0.0]]).expand(4, 1000),      # (1, 0)
        "cols": torch.tensor([1.5, -2.0, float("nan"), float("inf")]).expand(7, 4),  # (0, 1)
        "middle": torch.arange(6.0).reshape(2, 1, 3).expand(2, 5, 3),             # (3, 0, 1)
        "half": torch.tensor([0.1, -7.25], dtype=torch.float16).reshape(2, 1).expand(2, 9),
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("expand")
    tensors = expanded()
    path = tf.save(tensors, out / "expand.pt")
    torch_view = torch.load(path, weights_only=True)
    assert torch_view["big"].stride() == (0,) and torch_view["rows"].stride() == (1, 0)
    small = {k: v.contiguous() for k, v in tensors.items() if k != "big"}   # materialised
    return {"expand": path, "materialised": tf.save(small, out / "materialised.pt"), "tensors": tensors}


def test_the_file_is_small_and_torch_reads_it_back(files):
    assert files["expand"].stat().st_size < 4096
    back = torch.load(files["expand"], weights_only=True)
    assert back["big"].shape == (BIG,) and back["big"].untyped_storage().nbytes() == 4


@pytest.mark.parametrize("name", ["rows", "cols", "middle", "half"])
def test_exact_stats_of_a_stride0_view_equal_numpy_on_the_materialised_tensor(files, name):
    t = tensorloupe.open(files["expand"]).tensor(name)
    assert t.strides is not None and 0 in t.strides
    cost = exact_cost(t)
    assert cost.elements * cost.repeats == t.numel and cost.repeats > 1
    stats = exact_stats(t)
    want = files["tensors"][name].contiguous().double().numpy().ravel()
    finite = want[np.isfinite(want)]
    assert stats.count == want.size and stats.finite == finite.size
    assert stats.nan == np.isnan(want).sum() and stats.posinf == np.isposinf(want).sum()
    assert stats.min == finite.min() and stats.max == finite.max()
    assert stats.mean == pytest.approx(finite.mean(), rel=1e-12, abs=1e-15)
    assert stats.std == pytest.approx(finite.std(), rel=1e-12, abs=1e-15)
    assert stats.exact_zeros == (want == 0).sum()
    assert stats.zeros == pytest.approx((np.abs(finite) < 1e-6).sum() / want.size)
    hist = exact_histogram(t, stats, 16)
    counts, _ = np.histogram(finite, bins=16, range=(finite.min(), finite.max()))
    assert hist.counts == counts.tolist()
    # and the same numbers as the element-by-element pass over the materialised copy
    plain = tensorloupe.open(files["materialised"]).tensor(name)
    assert exact_cost(plain).repeats == 1
    plain_stats = exact_stats(plain)
    assert (stats.count, stats.min, stats.max, stats.nan) == \
        (plain_stats.count, plain_stats.min, plain_stats.max, plain_stats.nan)
    assert exact_histogram(plain, plain_stats, 16).counts == hist.counts


def test_health_exact_of_stride0_views_equals_the_materialised_tensors(files):
    expand = {m.name: m for m in health(tensorloupe.open(files["expand"]), budget=None).measures}
    plain = {m.name: m for m in health(tensorloupe.open(files["materialised"]), budget=None).measures}
    for name, m in plain.items():
        e = expand[name]
        assert e.exact and e.samples == m.samples == m.numel
        assert (e.nan, e.posinf, e.neginf, e.zeros, e.constant) == (m.nan, m.posinf, m.neginf, m.zeros, m.constant)
        for field in ("mean", "std", "rms", "max_abs", "mean_abs"):
            assert getattr(e, field) == pytest.approx(getattr(m, field), rel=1e-12, nan_ok=True), (name, field)


@pytest.mark.parametrize("command", [["stats", "--exact"], ["health", "--exact"]])
def test_a_2_to_the_40_stride0_tensor_is_exact_in_under_a_second(files, capsys, command):
    start = time.monotonic()
    assert main([*command, "--json", str(files["expand"]), *(["big"] if command[0] == "stats" else [])]) == 0
    assert time.monotonic() - start < 1.0
    out = json.loads(capsys.readouterr().out)
    if command[0] == "stats":
        (entry,) = out
        assert entry["exact"] and entry["numel"] == BIG and entry["stats"]["count"] == BIG
        assert entry["stats"]["min"] == entry["stats"]["max"] == 0.0 and entry["stats"]["exact_zeros"] == BIG
        assert entry["histogram"]["counts"] == [BIG]
        assert entry["exact_cost"] == {"numel": BIG, "elements": 1, "repeats": BIG,
                                       "limit": MIN_LIMIT}
    else:
        big = next(m for m in out["tensors"] if m["name"] == "big")
        assert big["exact"] and big["samples"] == BIG and big["zeros"] == BIG


def test_the_text_output_states_the_repeats(files, capsys):
    assert main(["stats", "--exact", str(files["expand"]), "big"]) == 0
    assert "all 1,099,511,627,776 elements, exact: 1 stored × 1,099,511,627,776 repeats" in \
        capsys.readouterr().out
    assert main(["health", "--exact", str(files["expand"])]) == 0
    # the stored elements once each: 1 + 4 + 4 + 6 + 2, stated before the scan
    assert "expand.pt: reading about 64 B, every byte (17 values decoded) of 5 tensors" in \
        capsys.readouterr().out


class _Storage:
    """A storage marker: pickled as torch's persistent id for data/0."""


class _HandPickler(pickle.Pickler):
    def persistent_id(self, obj):
        return ("storage", torch.FloatStorage, "0", "cpu", 2) if isinstance(obj, _Storage) else None


class _Rebuilt:
    """torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())."""

    def __init__(self, size, stride):
        self.size, self.stride = size, stride

    def __reduce__(self):
        return torch._utils._rebuild_tensor_v2, (_Storage(), 0, self.size, self.stride, False, OrderedDict())


def hand_built(path, tensors: dict):
    """A torch ZIP whose data.pkl is written here (torch's writer for the container): storage 0
    holds [2.0, -3.0]; each tensor is (size, stride) over it."""
    import io
    buffer = io.BytesIO()
    _HandPickler(buffer, protocol=2).dump({k: _Rebuilt(*v) for k, v in tensors.items()})
    return tf.write_torch_zip(path, buffer.getvalue(), {"byteorder": b"little",
                                                         "data/0": np.array([2.0, -3.0], "<f4").tobytes()})


def test_a_hand_built_stride0_file(tmp_path, capsys):
    path = hand_built(tmp_path / "hand.pt", {"huge": ((1 << 31, 1 << 31), (0, 0)),
                                             "wide": ((3, 2, 1 << 30), (0, 1, 0))})
    back = torch.load(path, weights_only=True)
    assert back["wide"].stride() == (0, 1, 0) and back["wide"][2, 1, 12345].item() == -3.0
    start = time.monotonic()
    assert main(["stats", "--exact", "--json", str(path)]) == 0
    assert time.monotonic() - start < 1.0
    huge, wide = json.loads(capsys.readouterr().out)
    assert huge["stats"]["count"] == 1 << 62 and huge["stats"]["min"] == huge["stats"]["max"] == 2.0
    assert wide["stats"]["count"] == 6 << 30 and wide["stats"]["mean"] == -0.5
    assert wide["stats"]["std"] == 2.5 and wide["histogram"]["counts"][0] == 3 << 30
    assert wide["exact_cost"]["elements"] == 2 and wide["exact_cost"]["repeats"] == 3 << 30


def test_a_view_that_rereads_its_bytes_past_the_limit_is_refused_first(tmp_path, capsys):
    # Overlapping windows (stride (1, 1)) are no repetition: 99,000,000 elements over 100,000
    # stored ones. Refused before any tensor byte is read, with the cost and the way to ask.
    storage = torch.arange(100_000.0)
    path = tf.save({"windows": storage.as_strided((99_000, 1000), (1, 1))}, tmp_path / "w.pt")
    for command in (["stats", "--exact"], ["health", "--exact"]):
        start = time.monotonic()
        assert main([*command, str(path)]) == 3
        err = capsys.readouterr().err
        assert time.monotonic() - start < 1.0
        assert "an exact pass over tensor 'windows' would decode 99,000,000 elements" in err
        assert "--max-elements 99000000" in err and f"at most {MIN_LIMIT:,} elements" in err
    ckpt = tensorloupe.open(path)
    before = ckpt.bytes_read()
    with pytest.raises(LimitError):
        exact_stats(ckpt.tensor("windows"))
    assert ckpt.bytes_read() == before      # nothing of the storage was read


def test_max_elements_asks_for_more_or_less(tmp_path, capsys):
    x = torch.arange(300.0).as_strided((200, 100), (1, 1))
    path = tf.save({"x": x}, tmp_path / "x.pt")
    assert main(["stats", "--exact", "--max-elements", "19999", str(path)]) == 3
    assert "would decode 20,000 elements" in capsys.readouterr().err
    assert main(["stats", "--exact", "--max-elements", "20000", "--json", str(path)]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    want = x.contiguous().double().numpy()
    assert entry["stats"]["count"] == 20000 and entry["stats"]["max"] == want.max()
    assert entry["stats"]["mean"] == pytest.approx(want.mean(), rel=1e-12)
    assert entry["stats"]["std"] == pytest.approx(want.std(), rel=1e-12)


def test_diff_exact_of_a_2_to_the_40_view_is_refused_first_and_small_views_compare(files, tmp_path, capsys):
    other = {**files["tensors"], "big": torch.ones(1).expand(BIG)}
    b = tf.save(other, tmp_path / "other.pt")
    start = time.monotonic()
    assert main(["diff", str(files["expand"]), str(b), "--exact"]) == 3
    assert time.monotonic() - start < 1.0
    err = capsys.readouterr().err
    assert "an exact comparison of tensor 'big' would decode 1,099,511,627,776 elements" in err
    assert "--max-elements 1099511627776" in err
    # the stride-0 views of a few thousand elements compare exactly, position by position
    assert main(["diff", str(files["expand"]), str(files["materialised"]), "--exact", "--tensor",
                 "rows", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["tensors"]
    assert row["category"] == "same_values" and row["exact"]
