"""Strided tensors (torch views, a Fortran-order .npy) are read where their bytes lie.

Every strided case, in the zip and the legacy .pt written by torch.save and in numpy's .npy:
the values equal torch's (numpy's) element for element, whole tensors compared; a sample, a
health scan and a heatmap lattice ask of the file exactly the bytes they state before reading
(sample_cost, health_cost, grid_cost: the plan gather reads), never more than the file; and the
CLI shows the strides of a non-contiguous tensor."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.healthscan import health, health_cost
from tensorloupe.sampler.layout import storage_view
from tensorloupe.sampler.sampling import grid, grid_cost, plan_grid, sample, sample_cost

import strided_files

VIEWS = ("transposed", "stepped", "expanded", "permuted")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return strided_files.write_all(tmp_path_factory.mktemp("strided"))


def storage_order(t: torch.Tensor) -> torch.Tensor:
    """torch's view of the elements in the order sampler/layout.py reads them (stride 0
    outermost, then the largest stride first), flattened."""
    order = sorted(range(t.dim()), key=lambda d: (t.stride(d) != 0, -t.stride(d)))
    return t.permute(order).reshape(-1)


@pytest.mark.parametrize("kind", ["strided_zip", "strided_legacy"])
def test_every_strided_view_reads_torch_s_values(files, kind):
    want = torch.load(files[kind], weights_only=True)
    with tensorloupe.open(files[kind]) as ckpt:
        for name in VIEWS:
            t, w = ckpt.tensor(name), want[name]
            assert t.shape == tuple(w.shape) and t.strides == w.stride(), name
            assert np.array_equal(t.numpy(), w.numpy()), name          # the whole tensor
            s = sample(t, 4096)
            flat = storage_order(w)
            assert s.values == [v for a, n in s.windows for v in flat[a:a + n].tolist()], name
            g = grid(t, 64, 64)
            assert g.values == [w[r, c].item() for r in g.row_index for c in g.col_index] if w.dim() == 2 \
                else g.values == [w.reshape(w.shape[0], -1)[r, c].item() for r in g.row_index for c in g.col_index]
            whole = tensorloupe.exact_stats(t)
            assert (whole.min, whole.max, whole.count) == (w.min().item(), w.max().item(), w.numel()), name
    # the stepped view shares the storage of the tensor it was cut from
    assert ckpt.tensor("stepped").info["storage"] == ckpt.tensor("wide").info["storage"]


def test_a_transposed_or_fortran_tensor_is_contiguous_in_storage_order(files):
    with tensorloupe.open(files["strided_zip"]) as ckpt:
        assert storage_view(ckpt.tensor("transposed")).contiguous
        assert storage_view(ckpt.tensor("permuted")).contiguous
        assert not storage_view(ckpt.tensor("stepped")).contiguous     # every other element
    with tensorloupe.open(files["fortran_npy"]) as ckpt:
        (t,) = ckpt.tensors
        want = np.load(files["fortran_npy"])
        assert t.strides == (1, 300) and storage_view(t).contiguous
        assert np.array_equal(t.numpy(), want)
        s = sample(t, 4096)
        flat = want.ravel(order="F")
        assert s.values == [float(v) for a, n in s.windows for v in flat[a:a + n]]


def asked(ckpt, work) -> tuple[int, int]:
    """(bytes asked of the checkpoint's sources, bytes read from the file) by `work()`."""
    before = ckpt.bytes_asked(), ckpt.bytes_read()
    work()
    return ckpt.bytes_asked() - before[0], ckpt.bytes_read() - before[1]


@pytest.mark.parametrize("kind", ["strided_zip", "strided_legacy", "fortran_npy"])
def test_sample_health_and_heatmap_read_at_most_what_they_state(files, kind):
    names = VIEWS if kind != "fortran_npy" else None
    with tensorloupe.open(files[kind]) as ckpt:
        ckpt.locate_all()       # a zip's storages positioned: what follows asks only for values
        tensors = [ckpt.tensor(n) for n in names] if names else ckpt.tensors
        for t in tensors:
            stated = sample_cost(t, 4096)
            got, read = asked(ckpt, lambda: sample(t, 4096))
            assert got == stated and read <= stated, (t.name, got, stated)
            assert stated <= 2 * 4096 * 4 + 4096, t.name    # a gap of one element at most (stepped)
            plan = plan_grid(t, 64, 64)
            stated = grid_cost(t, plan)
            got, read = asked(ckpt, lambda: grid(t, 64, 64))
            assert got == stated and read <= stated <= t.nbytes, (t.name, got, stated)
    with tensorloupe.open(files[kind]) as ckpt:
        ckpt.locate_all()
        cost = health_cost(ckpt)
        assert cost.exact
        got, read = asked(ckpt, lambda: health(ckpt, confirm_bytes=0))
        assert got == cost.scan_bytes and read <= cost.scan_bytes < ckpt.size
        # the budget per tensor (twice it for the stepped view, whose windows hold every other
        # element); before, each strided window read every element between its first and last
        assert cost.scan_bytes <= (len(ckpt.tensors) + 1) * (32 << 10)


def test_an_exact_health_pass_states_an_upper_bound_for_long_strided_windows(files):
    with tensorloupe.open(files["strided_zip"]) as ckpt:
        ckpt.locate_all()
        cost = health_cost(ckpt, budget=None)
        assert not cost.exact           # the stepped view's window is costed by its span
        got, read = asked(ckpt, lambda: health(ckpt, budget=None, confirm_bytes=0))
        assert got <= cost.scan_bytes and read <= cost.scan_bytes   # "wide" and "stepped" share bytes


def test_the_cli_shows_a_view_s_strides(files, capsys):
    assert main(["inspect", str(files["strided_zip"])]) == 0
    table = capsys.readouterr().out.split("\nTensors\n", 1)[1]
    header, *rows = table.splitlines()
    assert header.split() == ["name", "dtype", "shape", "size", "bits", "offset", "strides"]
    row = {r.split()[0]: r.split() for r in rows if r.strip()}
    assert row["transposed"][-1] == "1,512" and row["expanded"][-1] == "0,1"
    assert row["wide"][-1].isdigit()     # contiguous: its offset ends the row, no strides
    assert main(["stats", str(files["strided_zip"]), "transposed", "--samples", "4096"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "  strides 1, 512 (non-contiguous): read in its storage's order, 16.0 KiB"
    assert main(["stats", str(files["strided_zip"]), "transposed", "--json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["strides"] == [1, 512] and entry["sample_bytes"] == 65536 * 4
