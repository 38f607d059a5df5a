"""compressed-tensors 2:4 sparsity over quantised codes (the "2of4 FP8/INT8" models), written by
compressed-tensors 0.12.2's own ModelCompressor (fixtures/quant_sparse24q_files.py, in a child
process: the pinned 0.20.1 has no sparse compressors). Every element of every quantised weight
equals the library's decompression (sparse24_bitmask_decompress, then dequantize; saved by the
child as sparse24q_reference/<preset>.safetensors); the scheme names both facts and where each
came from; counts, values, stats, health, heatmap lattices and diff read the real values; a row
reads its own rows of the parts."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.sampler.sampling import grid, plan_grid, values

import quant_sparse24q_files
from test_quant_wiring import _snr_db, run_json

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "out"
PRESETS = sorted(quant_sparse24q_files.PRESETS)
SPARSE = [p for p in PRESETS if p != "int4_pack"]
TARGETS = quant_sparse24q_files.TARGETS
Q = "model.layers.0.self_attn.q_proj."
UP = "model.layers.0.mlp.up_proj."
DESCRIBED = {
    "fp8_tensor": "compressed-tensors FP8 e4m3, per tensor (float-quantized) + 2:4 sparse (bitmask)",
    "fp8_channel": "compressed-tensors FP8 e4m3, per channel (float-quantized) + 2:4 sparse (bitmask)",
    "fp8_channel_bf16": "compressed-tensors FP8 e4m3, per channel (float-quantized) + 2:4 sparse (bitmask)",
    "int8_channel_sym": "compressed-tensors int8, per channel, symmetric (int-quantized) + 2:4 sparse (bitmask)",
    "int8_channel_asym": "compressed-tensors int8, per channel, asymmetric (int-quantized) + 2:4 sparse (bitmask)",
}


@pytest.fixture(scope="module")
def out() -> Path:
    if not (OUT / "quant" / "sparse24q_int4_marlin24" / "config.json").exists():
        quant_sparse24q_files.write_all(OUT)
    return OUT / "quant"


def reference(out: Path, preset: str) -> dict[str, torch.Tensor]:
    return load_file(str(out / "sparse24q_reference" / f"{preset}.safetensors"))


def floats(t) -> torch.Tensor:
    return torch.tensor(values(t, 0, t.numel), dtype=torch.float32).view(t.shape)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_element_equals_the_librarys_decompression(out, preset):
    want = reference(out, preset)
    assert len(want) == 7      # the six 2:4 targets and down_proj (in the sparsity ignore list)
    with tensorloupe.open(out / f"sparse24q_{preset}" / "model.safetensors") as ckpt:
        assert ckpt.extras["quantisation"]["dequantised"] == 7 and ckpt.extras["quantisation"]["packed"] == 0
        assert not ckpt.warnings
        for name, w in want.items():
            t = ckpt.tensor(name)
            assert t.dtype == "F32" and t.parts, name
            assert torch.equal(floats(t), w.float()), name
        sparse = [t for t in ckpt.tensors if t.info.get("scheme", {}).get("layout") == "sparse-24"]
        assert len(sparse) == (0 if preset == "int4_pack" else 6)
        for t in sparse:
            assert t.info["dequantised from"] == DESCRIBED[preset]


def test_the_scheme_says_both_facts_and_where_each_came_from(out):
    with tensorloupe.open(out / "sparse24q_int8_channel_asym" / "model.safetensors") as ckpt:
        t = ckpt.tensor(UP + "weight")
        assert t.shape == (99, 76)
        assert sorted(p.name for p in t.parts) == [UP + s for s in ("bitmask", "compressed", "shape",
                                                                    "weight_scale", "weight_zero_point")]
        scheme = t.info["scheme"]
        assert (scheme["layout"], scheme["bits"], scheme["strategy"], scheme["symmetric"]) == \
            ("sparse-24", 8, "channel", False)
        said = "config.json quantization_config"
        assert scheme["from"]["sparsity"] == f"{said} sparsity_config.format"
        assert scheme["from"]["format"] == f"{said} config_groups.group_0.format"
        assert scheme["from"]["codes"] == f"{UP}compressed dtype I8"
        assert scheme["from"]["strategy"] == "weight_scale shape" and scheme["from"]["shape"] == UP + "shape"
        down = ckpt.tensor("model.layers.0.mlp.down_proj.weight")     # ignored by the sparsity: dense codes
        assert down.info["scheme"]["layout"] == "fp8-scaled"
        assert "stored dense" in down.info["scheme"]["from"]["sparsity"]
        assert sorted(ckpt.extras["quantisation"]["schemes"]) == [
            "compressed-tensors int-quantized int8, per channel, asymmetric", DESCRIBED["int8_channel_asym"]]


def test_a_pruned_element_of_asymmetric_int8_is_minus_zero_point_times_scale(out):
    """The library scatters the codes (code 0 where pruned), then dequantises every element:
    (0 - z) * s. So the 2:4 zeros of the pruned model come back as -z * s, not 0."""
    stored = load_file(str(out / "sparse24q_int8_channel_asym" / "model.safetensors"))
    want = reference(out, "int8_channel_asym")[UP + "weight"]
    mask = torch.from_numpy(np.unpackbits(stored[UP + "bitmask"].numpy(), axis=-1, count=76,
                                          bitorder="little").astype(bool))
    z, s = stored[UP + "weight_zero_point"].float(), stored[UP + "weight_scale"]
    pruned = (-z * s).expand(99, 76)[~mask]
    with tensorloupe.open(out / "sparse24q_int8_channel_asym" / "model.safetensors") as ckpt:
        got = floats(ckpt.tensor(UP + "weight"))
    assert torch.equal(got[~mask], pruned) and torch.equal(got, want)
    assert (pruned != 0).any()


def test_pack_quantized_beside_a_24_sparsity_config_is_stored_dense_and_read_so(out):
    """ModelCompressor's sparse step takes only names ending in `.weight`; weight_packed is not,
    so the file holds plain pack-quantized codes whose pruned zeros are coded as any value."""
    folder = out / "sparse24q_int4_pack"
    config = json.loads((folder / "config.json").read_text())["quantization_config"]
    assert config["format"] == "pack-quantized" and config["sparsity_config"]["format"] == "sparse-24-bitmask"
    with tensorloupe.open(folder / "model.safetensors") as ckpt:
        assert not any(t.name.endswith((".compressed", ".bitmask")) for t in ckpt.tensors)
        for target in TARGETS:
            t = next(t for t in ckpt.tensors if t.name.endswith(f"{target}.weight"))
            assert t.info["scheme"]["layout"] == "ct-pack"
            assert t.info["scheme"]["from"]["sparsity"].startswith("stored dense (not 2:4-compressed")
            assert int((floats(t).reshape(-1, 4) == 0).sum(1).min()) >= 2     # the pruned model's 2:4


def test_counts_are_the_dense_models(out, capsys):
    base = load_file(str(out / "sparse24q_fp32" / "model.safetensors"))
    for preset in PRESETS:
        doc = run_json(capsys, "inspect", out / f"sparse24q_{preset}" / "model.safetensors")
        assert doc["parameters"] == sum(v.numel() for v in base.values()), preset


def test_diff_against_the_dense_and_the_pruned_fp32_model(out, capsys):
    """SNR of the 2:4 FP8 weights against the dense fp32 model measures the pruning and the
    quantisation together (the pruned half is all error there); against the pruned fp32 model it
    is the FP8 quantisation alone: tens of dB."""
    path = out / "sparse24q_fp8_channel"
    want = reference(out, "fp8_channel")
    dense = load_file(str(out / "sparse24q_fp32" / "model.safetensors"))
    pruned = load_file(str(out / "sparse24q_pruned_fp32" / "model.safetensors"))
    rows = {r["name"]: r for r in run_json(capsys, "diff", out / "sparse24q_fp32", path, "--exact")["tensors"]}
    kept = {r["name"]: r for r in run_json(capsys, "diff", out / "sparse24q_pruned_fp32", path, "--exact")["tensors"]}
    for name, w in want.items():
        assert rows[name]["snr_db"] == pytest.approx(_snr_db(dense[name], w), abs=1e-6)
        assert kept[name]["snr_db"] == pytest.approx(_snr_db(pruned[name], w), abs=1e-6)
        if name.endswith(tuple(f"{t}.weight" for t in TARGETS)):
            assert kept[name]["snr_db"] > 20 and rows[name]["snr_db"] < kept[name]["snr_db"] - 5, name
        else:
            assert rows[name]["snr_db"] == kept[name]["snr_db"] > 20, name      # down_proj: not pruned


@pytest.mark.parametrize("preset", ["fp8_tensor", "int8_channel_asym"])
def test_values_stats_health_and_a_heatmap_read_the_real_values(out, preset, capsys):
    path = out / f"sparse24q_{preset}" / "model.safetensors"
    w = reference(out, preset)[UP + "weight"]
    flat = w.flatten().tolist()
    got = run_json(capsys, "values", path, UP + "weight", "--start", 700, "--count", 9)
    assert list(map(float, got["values"])) == flat[700:709]
    (entry,) = run_json(capsys, "stats", path, UP + "weight", "--exact")
    assert entry["exact"] and entry["numel"] == len(flat) and entry["dequantised_from"] == DESCRIBED[preset]
    assert entry["stats"]["min"] == min(flat) and entry["stats"]["max"] == max(flat)
    assert entry["stats"]["mean"] == pytest.approx(math.fsum(flat) / len(flat), rel=1e-12, abs=1e-15)
    assert sum(entry["histogram"]["counts"]) == len(flat)
    doc = run_json(capsys, "health", path, "--exact")
    m = next(m for m in doc["tensors"] if m["name"] == UP + "weight")
    assert m["rms"] == pytest.approx(float(w.double().pow(2).mean().sqrt()), rel=1e-9)
    with tensorloupe.open(path) as ckpt:
        t = ckpt.tensor(UP + "weight")
        plan = plan_grid(t, 9, 7)
        g = grid(t, 9, 7)
        assert g.floats() == [flat[p] for p in plan.positions]


def test_a_row_reads_only_its_own_rows_of_the_parts(out):
    with tensorloupe.open(out / "sparse24q_fp8_channel" / "model.safetensors") as ckpt:
        t = ckpt.tensor(UP + "weight")
        want = reference(out, "fp8_channel")[UP + "weight"].flatten().tolist()
        asked = set()
        reader = t.source._reader
        rows, pick = reader.rows, t.source._pick_many
        # a small read goes through the cell decoders (their stored-row requests), a larger one
        # through the row decoder (reader.rows): either way, what each part gives is watched
        reader.rows = lambda name, r0, n: asked.update((name, r) for r in range(r0, r0 + n)) or rows(name, r0, n)

        def watched(requests, gap=None):
            asked.update((name, r) for name, stored, *_ in requests for r in stored or ())
            return pick(requests, gap)
        t.source._pick_many = watched
        assert values(t, 50 * 76 + 3, 20) == want[50 * 76 + 3:50 * 76 + 23]
        # row 50 of compressed (38 F8), of bitmask (10 U8) and of weight_scale (one F32), nothing else
        assert sorted(asked) == [(UP + "bitmask", 50), (UP + "compressed", 50), (UP + "weight_scale", 50)]


def _rewritten(out: Path, tmp_path: Path, preset: str, config_change) -> Path:
    folder = tmp_path / preset
    shutil.copytree(out / f"sparse24q_{preset}", folder)
    config = json.loads((folder / "config.json").read_text())
    config_change(config["quantization_config"])
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "model.safetensors"


def test_codes_of_another_width_stay_packed_and_say_why(out, tmp_path):
    def four_bits(qc):
        qc["config_groups"]["group_0"]["weights"]["num_bits"] = 4
    with tensorloupe.open(_rewritten(out, tmp_path, "fp8_channel", four_bits)) as ckpt:
        t = ckpt.tensor(Q + "compressed")
        assert t.info["quantisation"] == (
            "packed, not dequantised: sparse-24-bitmask over 4-bit 'float' codes stored as F8_E4M3 "
            "('float-quantized'): compressed-tensors writes 2:4 over 8-bit codes only (F8_E4M3 float, I8 int)")


def test_codes_without_their_scale_stay_packed_and_say_why(out, tmp_path):
    from safetensors.torch import save_file
    path = _rewritten(out, tmp_path, "int8_channel_sym", lambda qc: None)
    sd = load_file(str(path))
    del sd[Q + "weight_scale"]
    save_file(sd, str(path))
    with tensorloupe.open(path) as ckpt:
        assert "no model.layers.0.self_attn.q_proj.weight_scale is stored beside the codes" in \
            ckpt.tensor(Q + "compressed").info["quantisation"]


def test_a_scale_of_the_wrong_shape_stays_packed(out, tmp_path):
    from safetensors.torch import save_file
    path = _rewritten(out, tmp_path, "fp8_channel", lambda qc: None)
    sd = load_file(str(path))
    sd[Q + "weight_scale"] = sd[Q + "weight_scale"][:5].contiguous()
    save_file(sd, str(path))
    with tensorloupe.open(path) as ckpt:
        assert ckpt.tensor(Q + "compressed").info["quantisation"] == (
            "packed, not dequantised: weight_scale shape (5, 1) is not per tensor, row or group")


def test_a_bitmask_row_that_is_not_two_of_four_is_a_format_error(out, tmp_path, capsys):
    from safetensors.torch import save_file
    path = _rewritten(out, tmp_path, "fp8_tensor", lambda qc: None)
    sd = load_file(str(path))
    sd[UP + "bitmask"] = sd[UP + "bitmask"].clone()
    sd[UP + "bitmask"][4, 1] = 0
    save_file(sd, str(path))
    code = main(["values", str(path), UP + "weight", "--start", str(4 * 76), "--count", "5"])
    err = capsys.readouterr().err
    assert code == 3 and f"row 4 of tensor '{UP}bitmask' marks " in err and "not 38 (two of each four)" in err


def _dense_codes(stored: dict, stem: str) -> torch.Tensor:
    """0.12.2's sparse24_bitmask_decompress, transcribed as test_quant_bnb.sparse24_decompress,
    over the codes' bytes: zeros where pruned, the kept codes in row-major order at the set bits."""
    codes, shape = stored[stem + "compressed"], stored[stem + "shape"].flatten().tolist()
    mask = torch.from_numpy(np.unpackbits(stored[stem + "bitmask"].numpy(), axis=-1, count=shape[-1],
                                          bitorder="little").reshape(shape).astype(bool))
    dense = torch.zeros(shape, dtype=torch.int8)
    dense[mask] = codes.view(torch.int8).flatten()
    return dense.view(codes.dtype)


@pytest.mark.parametrize("strategy", ["group", "block"])
def test_group_and_block_scales_over_24_codes(out, tmp_path, strategy):
    """The library writes only tensor and channel scales over these tiny weights (its observer
    strategies here); group and block scales over the same 2:4 FP8 codes are written in beside
    them and checked against the pinned compressed-tensors' own dequantize with those args."""
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize
    from safetensors.torch import save_file
    args = {"group": {"strategy": "group", "group_size": 38},
            "block": {"strategy": "block", "block_structure": [32, 38]}}[strategy]
    shape = {"group": (76, 2), "block": (3, 2)}[strategy]

    def change(qc):
        qc["config_groups"]["group_0"]["weights"].update(args)
    path = _rewritten(out, tmp_path, "fp8_channel", change)
    sd = load_file(str(path))
    gen = torch.Generator().manual_seed(24)
    sd[Q + "weight_scale"] = (torch.rand(shape, generator=gen) * 1e-3 + 1e-4).contiguous()
    save_file(sd, str(path))
    want = dequantize(_dense_codes(sd, Q), sd[Q + "weight_scale"],
                      args=QuantizationArgs(num_bits=8, type="float", symmetric=True, **args))
    with tensorloupe.open(path) as ckpt:
        t = ckpt.tensor(Q + "weight")
        assert t.info["scheme"]["strategy"] == strategy
        got = floats(t)
        assert torch.equal(got, want.float())
        plan = plan_grid(t, 9, 7)
        cells = t.source.cells(plan.positions)
        assert cells == [float(got.flatten()[p]) for p in plan.positions]


@pytest.mark.parametrize("preset", SPARSE)
def test_every_heatmap_cell_is_the_row_decoders_value(out, preset):
    """The cell decoder (sparse24.cells: running popcounts of the mask, only the lattice's cells
    decoded) gives each cell the value the row decoder gives it, bit for bit."""
    with tensorloupe.open(out / f"sparse24q_{preset}" / "model.safetensors") as ckpt:
        sparse = [t for t in ckpt.tensors if t.info.get("scheme", {}).get("layout") == "sparse-24"]
        assert len(sparse) == 6
        for t in sparse:
            flat = values(t, 0, t.numel)
            for rows, cols in ((9, 7), (30, 60), (t.shape[0], t.shape[1])):
                plan = plan_grid(t, rows, cols)
                cells = t.source.cells(plan.positions)
                assert cells is not None, t.name      # the cell path answers
                assert [repr(v) for v in cells] == [repr(flat[p]) for p in plan.positions], t.name


def test_marlin24_the_librarys_own_24_int4_is_refused_by_name(out):
    """W4A16 with 2:4 is written as marlin-24 (the format the library infers for it), which the
    library itself cannot decompress: every weight stays packed, as stored, and says why."""
    folder = out / "sparse24q_int4_marlin24"
    assert json.loads((folder / "config.json").read_text())["quantization_config"]["format"] == "marlin-24"
    with tensorloupe.open(folder / "model.safetensors") as ckpt:
        q = ckpt.extras["quantisation"]
        assert (q["dequantised"], q["packed"]) == (0, 7) and not any(t.parts for t in ckpt.tensors)
        t = ckpt.tensor(Q + "weight_packed")
        assert t.dtype == "I32" and t.info["quantisation"] == (
            "packed, not dequantised: marlin-24 (2:4 int4 in the Marlin kernel's permuted tiles, with "
            "scale_packed and CUTLASS meta) is not read: compressed-tensors itself has no decompression "
            "for it (Marlin24Compressor.decompress raises NotImplementedError)")
        assert {Q + s for s in ("scale_packed", "meta")} <= {t.name for t in ckpt.tensors}
