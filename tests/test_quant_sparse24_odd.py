"""compressed-tensors 2:4 weights whose width is 2 mod 4 (issue 24), written by compressed-tensors
0.12.2 itself (fixtures/quant_sparse24_odd_files.py). The library groups the fours over the
flattened weight, so a four may straddle rows 2m and 2m + 1: one row need not keep cols / 2
values, a pair of rows keeps cols. Every element equals the library's own
sparse24_bitmask_decompress (then dequantize over codes); values, stats, a heatmap lattice and
the .npy export agree; a sample or a lattice reads only the row pairs it needs; a corrupted pair
and the widths the library cannot write are refused by name."""

from __future__ import annotations

import io
import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.errors import FormatError
from tensorloupe.npy import export_tensor
from tensorloupe.sampler.sampling import grid, plan_grid, values

import quant_sparse24_odd_files as odd
from test_quant_wiring import run_json

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "out"
UP = "model.layers.0.mlp.up_proj."          # 64 x 4098
Q = "model.layers.0.self_attn.q_proj."      # 6 x 10
SPARSE_24 = {"quant_method": "compressed-tensors", "sparsity_config": {"format": "sparse-24-bitmask"}}


@pytest.fixture(scope="module")
def out() -> Path:
    if not all((OUT / "quant" / f"sparse24odd_{c}" / "config.json").exists() for c in odd.CASES):
        odd.write_all(OUT)
    return OUT / "quant"


def reference(out: Path, case: str) -> dict[str, torch.Tensor]:
    return load_file(str(out / odd.REFERENCE / f"{case}.safetensors"))


def floats(t) -> torch.Tensor:
    return torch.tensor(values(t, 0, t.numel), dtype=torch.float32).view(t.shape)


def kept_per_row(out: Path, case: str, stem: str) -> np.ndarray:
    stored = load_file(str(out / f"sparse24odd_{case}" / "model.safetensors"))
    cols = int(stored[stem + "shape"][1])
    return np.unpackbits(stored[stem + "bitmask"].numpy(), axis=-1, count=cols, bitorder="little").sum(1)


@pytest.mark.parametrize("case", odd.CASES)
def test_every_element_equals_the_librarys_decompression(out, case):
    want = reference(out, case)
    assert len(want) == 3
    with tensorloupe.open(out / f"sparse24odd_{case}" / "model.safetensors") as ckpt:
        assert ckpt.extras["quantisation"]["dequantised"] == 3 and ckpt.extras["quantisation"]["packed"] == 0
        assert not ckpt.warnings
        for name, w in want.items():
            t = ckpt.tensor(name)
            assert t.info["scheme"]["layout"] == "sparse-24" and t.shape == tuple(w.shape), name
            assert torch.equal(floats(t), w.float()), name
            got = np.frombuffer(t.source.read(0, t.source.size), "<f4").reshape(t.shape)     # whole rows
            assert np.array_equal(got, w.float().numpy()), name


@pytest.mark.parametrize("case", ["f32", "int8_channel_asym"])
def test_the_fixtures_straddle_rows_as_the_library_groups_them(out, case):
    """The fixtures exercise what this is about: rows keeping more and fewer than cols / 2, every
    pair keeping cols (the library's own mask, not ours)."""
    for stem, (rows, cols) in odd.SHAPES.items():
        kept = kept_per_row(out, case, stem + ".")
        assert cols % 4 == 2 and (kept.reshape(-1, 2).sum(1) == cols).all(), stem
    kept = kept_per_row(out, case, UP)
    assert (kept != 4098 // 2).any() and kept.min() < 2049 < kept.max()


@pytest.mark.parametrize("case", ["bf16", "fp8_tensor", "int8_channel_asym"])
def test_values_stats_a_heatmap_and_npy_read_the_real_values(out, case, capsys):
    path = out / f"sparse24odd_{case}" / "model.safetensors"
    w = reference(out, case)[UP + "weight"].float()
    flat = w.flatten().tolist()
    start = 5 * 4098 + 4090        # across the end of odd row 5 into row 6 (the next pair)
    got = run_json(capsys, "values", path, UP + "weight", "--start", start, "--count", 20)
    assert list(map(float, got["values"])) == flat[start:start + 20]
    (entry,) = run_json(capsys, "stats", path, UP + "weight", "--exact")
    assert entry["exact"] and entry["numel"] == len(flat)
    assert entry["stats"]["min"] == min(flat) and entry["stats"]["max"] == max(flat)
    assert entry["stats"]["mean"] == pytest.approx(math.fsum(flat) / len(flat), rel=1e-12, abs=1e-15)
    with tensorloupe.open(path) as ckpt:
        t = ckpt.tensor(UP + "weight")
        plan = plan_grid(t, 9, 7)
        assert len(plan.positions) < t.numel
        assert grid(t, 9, 7).floats() == [flat[p] for p in plan.positions]
        loaded = np.load(io.BytesIO(export_tensor(t).data))
        assert loaded.dtype == np.float32 and np.array_equal(loaded, w.numpy())


def _watched(t) -> set:
    """(part, stored row) of every read of the tensor's parts, by the row decoder or the cell decoders."""
    asked: set = set()
    reader = t.source._reader
    rows, pick = reader.rows, t.source._pick_many
    reader.rows = lambda name, r0, n: asked.update((name, r) for r in range(r0, r0 + n)) or rows(name, r0, n)

    def watched(requests, gap=None):
        asked.update((name, r) for name, stored, *_ in requests for r in stored or ())
        return pick(requests, gap)
    t.source._pick_many = watched
    return asked


def test_a_sample_reads_only_the_row_pairs_it_needs(out):
    with tensorloupe.open(out / "sparse24odd_fp8_channel" / "model.safetensors") as ckpt:
        t = ckpt.tensor(UP + "weight")
        want = reference(out, "fp8_channel")[UP + "weight"].flatten().tolist()
        asked = _watched(t)
        at = 5 * 4098 + 3      # a few values of odd row 5: its pair is rows 4 and 5
        assert values(t, at, 20) == want[at:at + 20]
        assert sorted(asked) == [(UP + "bitmask", 4), (UP + "bitmask", 5), (UP + "compressed", 4),
                                 (UP + "compressed", 5), (UP + "weight_scale", 5)]
        asked.clear()
        at = 9 * 4098          # rows 9 to 12 whole (the row decoder): pairs (8, 9) to (12, 13)
        assert values(t, at, 4 * 4098) == want[at:at + 4 * 4098]
        assert {r for name, r in asked if name != UP + "weight_scale"} == set(range(8, 14))
        assert {name for name, _ in asked} == {UP + s for s in ("bitmask", "compressed", "weight_scale")}


def test_a_heatmap_reads_only_the_pairs_it_touches(out):
    with tensorloupe.open(out / "sparse24odd_f32" / "model.safetensors") as ckpt:
        t = ckpt.tensor(UP + "weight")
        flat = reference(out, "f32")[UP + "weight"].flatten().tolist()
        asked = _watched(t)
        plan = plan_grid(t, 9, 7)
        assert t.source.cells(plan.positions) == [flat[p] for p in plan.positions]
        rows = {p // 4098 for p in plan.positions}
        pairs = {r - r % 2 + i for r in rows for i in (0, 1)}
        assert len(pairs) < 64 and any(r % 2 for r in rows)
        assert asked == {(UP + s, r) for s in ("bitmask", "compressed") for r in pairs}


def _corrupted(out: Path, tmp_path: Path, case: str, row: int, byte: int) -> Path:
    """The fixture with one more bit set in the mask of `row` of up_proj (a clear bit of byte `byte`)."""
    folder = tmp_path / case
    folder.mkdir()
    src = out / f"sparse24odd_{case}"
    (folder / "config.json").write_text((src / "config.json").read_text())
    sd = load_file(str(src / "model.safetensors"))
    mask = sd[UP + "bitmask"].clone()
    clear = next(b for b in range(8) if not mask[row, byte] >> b & 1)
    mask[row, byte] |= 1 << clear
    sd[UP + "bitmask"] = mask
    save_file(sd, str(folder / "model.safetensors"))
    return folder / "model.safetensors"


@pytest.mark.parametrize("case", ["f16", "int8_channel_sym"])
def test_a_pair_whose_mask_does_not_mark_cols_values_is_refused(out, tmp_path, case, capsys):
    path = _corrupted(out, tmp_path, case, 7, 100)     # rows 6 and 7 then mark 4099
    said = f"rows 6 and 7 of tensor '{UP}bitmask' mark 4,099 kept values, not 4,098"
    # the row decoder (a window of whole rows) and the cell decoder (a few values of row 6)
    for start, count in ((6 * 4098, 2 * 4098), (6 * 4098 + 10, 5)):
        code = main(["values", str(path), UP + "weight", "--start", str(start), "--count", str(count)])
        err = capsys.readouterr().err
        assert code == 3 and err.startswith(f"tensorloupe: model.safetensors: {said} "), err
    with tensorloupe.open(path) as ckpt:     # a lattice touching the pair
        t = ckpt.tensor(UP + "weight")
        with pytest.raises(FormatError, match=said):
            t.source.cells(plan_grid(t, 64, 7).positions)
        with pytest.raises(FormatError, match=said):       # the row decoder over every row
            list(t.source._compute(0, 64))
        assert values(t, 0, 4098) == reference(out, case)[UP + "weight"][0].tolist()   # other pairs read


def test_a_row_may_keep_other_than_half_when_its_pair_keeps_cols(tmp_path):
    """Known answer, 2 x 6: the fours of the flattened weight are row 0's columns 0-3, then its
    4-5 with row 1's 0-1, then row 1's 2-5. Row 0 keeps four values (mask 0b110101: columns 0, 2,
    4, 5), row 1 two (0b001100: columns 2, 3); compressed [2, 3] holds the pair's six in row-major
    order, so row 0's last value is in compressed's second row."""
    path = tmp_path / "model.safetensors"
    tensors = {"m.shape": torch.tensor([2, 6]).reshape(-1, 1),
               "m.compressed": torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
               "m.bitmask": torch.tensor([[0b110101], [0b001100]], dtype=torch.uint8)}
    save_file(tensors, str(path))
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": SPARSE_24}))
    want = [1.0, 0.0, 2.0, 0.0, 3.0, 4.0,
            0.0, 0.0, 5.0, 6.0, 0.0, 0.0]
    with tensorloupe.open(path) as ckpt:
        t = ckpt.tensor("m.weight")
        assert values(t, 0, 12) == want
        assert values(t, 6, 6) == want[6:]            # row 1 alone: its pair's row 0 is read for it


@pytest.mark.parametrize("shape, why", [((4, 5), "cols even"), ((4, 7), "cols even"),
                                        ((3, 10), "rows x cols a multiple of 4")])
def test_a_shape_the_library_cannot_write_is_refused_by_name(tmp_path, shape, why):
    """compressed-tensors 0.12.2 fails on these (fixtures/quant_sparse24_odd_files.py checks it):
    an odd width (its values.reshape(rows, cols // 2) raises), 4k + 2 over odd rows (numel % 4)."""
    rows, cols = shape
    path = tmp_path / "model.safetensors"
    save_file({"m.shape": torch.tensor(shape).reshape(-1, 1),
               "m.compressed": torch.ones(rows, cols // 2),
               "m.bitmask": torch.zeros(rows, -(-cols // 8), dtype=torch.uint8)}, str(path))
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": SPARSE_24}))
    with tensorloupe.open(path) as ckpt:
        t = ckpt.tensor("m.compressed")
        assert not any(x.parts for x in ckpt.tensors)
        assert t.info["quantisation"] == (
            f"packed, not dequantised: m.shape {shape} is not a width compressed-tensors writes: it keeps "
            "two of each four of the flattened weight (rows x cols a multiple of 4) as [rows, cols / 2] (cols even)")
        assert why in t.info["quantisation"]


@pytest.mark.parametrize("case", ["f32", "int8_channel_asym"])
def test_random_mask_corruption_is_refused_or_read_as_the_library_would(out, tmp_path, case):
    """Property: flip random bits of q_proj's and k_proj's masks. Every read either raises our
    FormatError or (each pair still marking cols) equals the library's scatter of the same parts
    (0.12.2's sparse24_bitmask_decompress as test_quant_bnb transcribes it), then dequantize."""
    import random
    from test_quant_bnb import sparse24_decompress
    src = out / f"sparse24odd_{case}"
    base = load_file(str(src / "model.safetensors"))
    rnd = random.Random(2404)
    refused = read = 0
    for trial in range(30):
        sd = dict(base)
        stem = rnd.choice([Q, "model.layers.0.self_attn.k_proj."])
        mask = sd[stem + "bitmask"].clone()
        for _ in range(rnd.randint(1, 3)):
            r, j = rnd.randrange(mask.shape[0]), rnd.randrange(mask.shape[1])
            mask[r, j] ^= 1 << rnd.randrange(8)
        sd[stem + "bitmask"] = mask
        folder = tmp_path / str(trial)
        folder.mkdir()
        (folder / "config.json").write_text((src / "config.json").read_text())
        save_file(sd, str(folder / "model.safetensors"))
        rows, cols = (int(v) for v in sd[stem + "shape"].flatten())
        kept = np.unpackbits(mask.numpy(), axis=-1, count=cols, bitorder="little").sum(1)
        whole = bool((kept.reshape(-1, 2).sum(1) == cols).all())
        with tensorloupe.open(folder / "model.safetensors") as ckpt:
            t = ckpt.tensor(stem + "weight")
            try:
                by_rows = list(t.source._compute(0, rows))
                by_cells = t.source.cells(plan_grid(t, rows, cols).positions)
            except FormatError as e:
                assert not whole and "kept values, not" in str(e), e
                refused += 1
                continue
        assert whole
        codes = sparse24_decompress(sd[stem + "compressed"], mask, [rows, cols]).float()
        if stem + "weight_scale" in sd:
            s = sd[stem + "weight_scale"]
            z = sd.get(stem + "weight_zero_point")
            codes = (codes - (z.float() if z is not None else 0)) * s
        want = codes.flatten().tolist()
        assert by_rows == want and by_cells == want
        read += 1
    assert refused and read       # both outcomes met
