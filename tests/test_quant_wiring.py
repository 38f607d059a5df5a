"""Quantised checkpoints as real values, end to end (issue 24): a safetensors file with a
config.json `quantization_config` beside it opens with one float32 tensor per quantised weight,
and the CLI's values, stats (sampled and exact), inspect, health, diff and the .npy export give
the values compressed-tensors' own decompression gives (or, for the odd shapes its decompressor
refuses, its unpack_from_int32 and the reference arithmetic, test_quant_values._reference)."""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from compressed_tensors.compressors import BaseCompressor
from compressed_tensors.quantization import QuantizationConfig
from safetensors.torch import load_file, save_file

import tensorloupe
from tensorloupe import npy
from tensorloupe.cli import main
from tensorloupe.sampler.sampling import sample, values

import quant_files
from test_quant_values import _reference

CASES = sorted(quant_files.CASES)
PRESETS = sorted(quant_files.MODEL_PRESETS)
SAID = "config.json quantization_config"


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("quant-wiring")
    quant_files.write_all(folder)
    return folder / "quant"


def run_json(capsys, *argv):
    code = main([*map(str, argv), "--json"])
    printed, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(printed)


def the_weight(ckpt):
    (t,) = [t for t in ckpt.tensors if t.parts]
    return t


def test_gpt_oss_mxfp4_counts_as_the_unquantised_experts(out, capsys):
    """blocks [E, R, G, 16] + scales [E, R, G] are the parameter [E, G*32, R] (gpt-oss'
    gate_up_proj), counted as such: E*R*G*32 parameters, not the packed bytes."""
    doc = run_json(capsys, "inspect", out / "mxfp4_experts" / "model.safetensors")
    (t,) = [r for r in doc["tensors"] if r.get("parts")]
    assert t["name"] == "model.layers.0.mlp.experts.gate_up_proj" and t["shape"] == [3, 160, 7]
    assert doc["parameters"] == 3 * 160 * 7 + 3 * 7     # the weight and its bias
    assert t["info"]["dequantised from"].startswith("MXFP4")


def case_reference(out, case) -> tuple[str, torch.Tensor]:
    """The logical weight's name and its values by the reference arithmetic."""
    with tensorloupe.open(out / case / "model.safetensors") as ckpt:
        t = the_weight(ckpt)
        logical = t.source.logical
    sd = load_file(str(out / case / "model.safetensors"))
    return t.name, _reference(case, logical, sd)


def decompressed(folder: Path) -> dict[str, torch.Tensor]:
    """Every weight of a compressed-tensors checkpoint as its own compressor decompresses it."""
    sd = load_file(str(folder / "model.safetensors"))
    qc = QuantizationConfig.model_validate(json.loads((folder / "config.json").read_text())["quantization_config"])
    scheme = next(iter(qc.config_groups.values()))
    compressor = BaseCompressor.load_from_registry(qc.format)
    stems = sorted({k[: -len(".weight_scale")] for k in sd if k.endswith(".weight_scale")})
    out = {}
    for stem in stems:
        local = {k[len(stem) + 1:]: v for k, v in sd.items() if k.startswith(stem + ".")}
        out[stem + ".weight"] = compressor.decompress(local, scheme)["weight"].to(torch.float32)
    return out


@pytest.mark.parametrize("case", CASES)
def test_the_weight_is_one_tensor_under_its_own_name_with_its_parts(out, case):
    with tensorloupe.open(out / case / "model.safetensors") as ckpt:
        t = the_weight(ckpt)
        assert t.dtype == "F32" and t.info["dequantised from"]
        assert t.info["scheme"]["from"]
        stored = {p.name for p in t.parts}
        others = {x.name for x in ckpt.tensors if x is not t}
        assert stored.isdisjoint(others)
        # every stored tensor is the weight, one of its parts, or a tensor of its own (a bias)
        assert others <= {n for n in others if n.endswith(("_bias", ".bias"))}
        blob = (out / case / "model.safetensors").read_bytes()
        header = json.loads(blob[8:8 + int.from_bytes(blob[:8], "little")])
        header.pop("__metadata__", None)
        assert stored | others == set(header)
        assert t.stored_nbytes == sum(header[n]["data_offsets"][1] - header[n]["data_offsets"][0] for n in stored)
        assert ckpt.extras["quantisation"]["source"] == SAID


@pytest.mark.parametrize("case", CASES)
def test_cli_values_and_stats_are_the_reference_values(out, case, capsys, tmp_path):
    name, want = case_reference(out, case)
    path = out / case / "model.safetensors"
    flat = want.flatten().tolist()
    got = run_json(capsys, "values", path, name, "--count", len(flat))
    assert got["dtype"] == "F32" and got["shape"] == list(want.shape)
    assert list(map(float, got["values"])) == flat     # JSON says "inf" for MXFP4's overflow
    middle = len(flat) // 3
    got = run_json(capsys, "values", path, name, "--start", middle, "--count", 7)
    assert list(map(float, got["values"])) == flat[middle:middle + 7]
    (entry,) = run_json(capsys, "stats", path, name, "--exact")
    s = entry["stats"]
    assert entry["dequantised_from"] and entry["exact"] and entry["numel"] == len(flat)
    finite = [v for v in flat if math.isfinite(v)]
    assert s["min"] == min(finite) and s["max"] == max(finite)
    assert s["posinf"] + s["neginf"] == len(flat) - len(finite)
    assert s["mean"] == pytest.approx(math.fsum(finite) / len(finite), rel=1e-12, abs=1e-15)
    # Sampled: the same windows as of a float32 file holding the reference values, the same figures.
    save_file({name: want.contiguous()}, str(tmp_path / "reference.safetensors"))
    (entry,) = run_json(capsys, "stats", path, name)
    (plain,) = run_json(capsys, "stats", tmp_path / "reference.safetensors", name)
    assert entry["stats"] == plain["stats"] and entry["histogram"] == plain["histogram"]
    assert entry["exact"] == (len(flat) <= 1 << 16)


def test_a_small_window_reads_only_the_rows_it_needs(out):
    """A 256 x 1024 int4 weight (128 KiB packed): 10 values of one row, and a 2,048-value
    sample, read a small part of it; the values are the reference's."""
    name, want = case_reference(out, "ct_int4_group_wide")
    flat = want.flatten().tolist()
    with tensorloupe.open(out / "ct_int4_group_wide" / "model.safetensors") as ckpt:
        t = ckpt.tensor(name)
        before = ckpt.bytes_read()
        start = 200 * 1024 + 17
        assert values(t, start, 10) == flat[start:start + 10]
        one_row = ckpt.bytes_read() - before
        assert 0 < one_row <= 1024 // 2 + 1024, one_row   # a packed row + a scale row (+ g_idx: none)
        assert one_row * 100 < t.stored_nbytes
        before = ckpt.bytes_read()
        s = sample(t, 2048)
        assert not s.exhaustive
        assert ckpt.bytes_read() - before < t.stored_nbytes / 8
        for (first, count), part in zip(s.windows, _split(s.values, s.windows)):
            assert part == flat[first:first + count]


def _split(values_, windows):
    at = 0
    for _, count in windows:
        yield values_[at:at + count]
        at += count


@pytest.mark.parametrize("preset", PRESETS)
def test_model_weights_equal_the_compressors_own_decompression(out, preset):
    folder = out / f"model_{preset}"
    want = decompressed(folder)
    with tensorloupe.open(folder / "model.safetensors") as ckpt:
        for name, w in want.items():
            t = ckpt.tensor(name)
            assert t.parts, name
            got = torch.tensor(values(t, 0, t.numel), dtype=torch.float32).view(t.shape)
            assert torch.equal(got, w), name


@pytest.mark.parametrize("preset", PRESETS)
def test_inspect_counts_parameters_logically_and_bytes_as_stored(out, preset, capsys):
    model, _ = quant_files.tiny_model()
    live = sum(p.numel() for p in model.parameters())
    path = out / f"model_{preset}" / "model.safetensors"
    doc = run_json(capsys, "inspect", path)
    assert doc["parameters"] == live
    stored = doc["memory"]["weights"][0]
    blob = path.read_bytes()
    header_bytes = 8 + int.from_bytes(blob[:8], "little")
    assert stored["precision"] == "stored" and stored["bytes"] == len(blob) - header_bytes
    q = doc["extras"]["quantisation"]
    assert q["source"] == SAID and q["dequantised"] == 14 and q["packed"] == 0
    main(["inspect", str(path)])
    text = capsys.readouterr().out
    assert f"from {SAID}" in text and q["schemes"][0] in text
    assert f"Parameters  {live:,}" in text


def test_health_measures_the_real_values(out, capsys):
    folder = out / "model_w4a16"
    want = decompressed(folder)
    doc = run_json(capsys, "health", folder / "model.safetensors", "--exact")
    measured = {m["name"]: m for m in doc["tensors"]}
    for name, w in want.items():
        m = measured[name]
        assert m["dtype"] == "F32" and m["nan"] == 0 and not m["flags"], m
        assert m["rms"] == pytest.approx(float(w.double().pow(2).mean().sqrt()), rel=1e-9)
    # the untrained norms of a freshly built model are the only flags; no packed word is measured
    assert {f["kind"] for f in doc["flags"]} == {"norm_untrained"}
    assert not any(n.endswith(("weight_packed", "weight_scale")) for n in measured)


def _snr_db(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return 10 * math.log10(float(a.pow(2).sum()) / float((a - b).pow(2).sum()))


def gptq_awq_reference(folder: Path) -> dict[str, torch.Tensor]:
    """Every linear of a GPTQ/AWQ tiny model as GPTQModel's dequantize_weight or AutoAWQ's
    dequantize_gemm (transcribed in test_quant_values) computes it, [out, in]."""
    from test_quant_values import awq_dequantize_gemm, gptq_dequantize_weight
    sd = load_file(str(folder / "model.safetensors"))
    qc = json.loads((folder / "config.json").read_text())["quantization_config"]
    out = {}
    for key in sd:
        if key.endswith(".qweight"):
            stem = key[: -len("qweight")]
            if qc["quant_method"] == "gptq":
                w = gptq_dequantize_weight(sd[key], sd[stem + "qzeros"], sd[stem + "scales"], sd[stem + "g_idx"],
                                           qc["bits"], v1=qc["checkpoint_format"] == "gptq")
            else:
                w = awq_dequantize_gemm(sd[key], sd[stem + "qzeros"], sd[stem + "scales"], 4, qc["group_size"])
            out[stem + "weight"] = w.t().float()
    return out


@pytest.mark.parametrize("preset", sorted(quant_files.MODEL_PACKED))
def test_diff_fp32_against_gptq_and_awq_models(out, preset, capsys):
    base = load_file(str(out / "model_fp32" / "model.safetensors"))
    folder = out / f"model_{preset}"
    want = gptq_awq_reference(folder)
    assert len(want) == 14
    doc = run_json(capsys, "diff", out / "model_fp32" / "model.safetensors", folder, "--exact")
    summary = doc["summary"]
    assert summary["counts"]["only_in_a"] == summary["counts"]["only_in_b"] == 0
    rows = {r["name"]: r for r in doc["tensors"]}
    for name, w in want.items():
        assert rows[name]["snr_db"] == pytest.approx(_snr_db(base[name], w), abs=1e-6), name
    low, high = (10, 30) if "w3" in preset else (15, 35)
    assert low < summary["median_snr_db"] < high, summary["median_snr_db"]
    model, _ = quant_files.tiny_model()
    doc = run_json(capsys, "inspect", folder / "model.safetensors")
    assert doc["parameters"] == sum(p.numel() for p in model.parameters())


def test_diff_against_the_fp32_model_gives_the_snr_of_the_dequantised_values(out, capsys):
    base = load_file(str(out / "model_fp32" / "model.safetensors"))
    medians = {}
    for preset in ("w8a16", "w4a16"):
        folder = out / f"model_{preset}"
        want = decompressed(folder)
        doc = run_json(capsys, "diff", out / "model_fp32" / "model.safetensors", folder, "--exact")
        summary = doc["summary"]
        assert summary["counts"]["only_in_a"] == summary["counts"]["only_in_b"] == 0
        rows = {r["name"]: r for r in doc["tensors"]}
        for name, w in want.items():
            assert rows[name]["snr_db"] == pytest.approx(_snr_db(base[name], w), abs=1e-6), name
        medians[preset] = summary["median_snr_db"]
    assert medians["w8a16"] > 35 and 15 < medians["w4a16"] < medians["w8a16"] - 15, medians


@pytest.mark.parametrize("case", ["ct_int4_group_sym_actorder", "fp8_block", "ct_int3_channel_asym", "mxfp4_experts_odd"])
def test_npy_export_is_the_dequantised_values(out, case):
    name, want = case_reference(out, case)
    with tensorloupe.open(out / case / "model.safetensors") as ckpt:
        exported = npy.export_tensor(ckpt.tensor(name))
    got = np.load(io.BytesIO(exported.data))
    assert got.dtype == np.float32 and np.array_equal(got, want.numpy())


def test_an_unsupported_layout_stays_packed_and_says_why(out, tmp_path, capsys):
    folder = tmp_path / "block"
    shutil.copytree(out / "ct_int4_group_asym", folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "block"
    (folder / "config.json").write_text(json.dumps(config))
    with tensorloupe.open(folder / "model.safetensors") as ckpt:
        packed = ckpt.tensor("model.layers.0.mlp.down_proj.weight_packed")
        assert packed.dtype == "I32" and not any(t.parts for t in ckpt.tensors)
        assert packed.info["quantisation"].startswith("packed, not dequantised: strategy 'block'")
        assert any("packed, not dequantised" in w for w in ckpt.warnings)
    doc = run_json(capsys, "inspect", folder / "model.safetensors")
    (record,) = [r for r in doc["tensors"] if r["name"].endswith("weight_packed")]
    assert record["dtype"] == "I32" and "packed, not dequantised" in record["info"]["quantisation"]


def test_without_a_quantization_config_nothing_changes(out, tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    shutil.copy(out / "ct_int4_group_asym" / "model.safetensors", folder)
    with tensorloupe.open(folder / "model.safetensors") as ckpt:
        assert not any(t.parts for t in ckpt.tensors) and "quantisation" not in ckpt.extras
        assert {t.dtype for t in ckpt.tensors} == {"I32", "I64", "F32"}


def test_a_scale_of_the_wrong_shape_is_said_and_the_weight_stays_packed(out, tmp_path):
    """The config says groups of 16 over 100 columns (7 per row); the file's scale holds 4."""
    folder = tmp_path / "wrong-scale"
    shutil.copytree(out / "ct_int4_group_asym", folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 16
    (folder / "config.json").write_text(json.dumps(config))
    with tensorloupe.open(folder / "model.safetensors") as ckpt:
        assert not any(t.parts for t in ckpt.tensors)
        (warning,) = [w for w in ckpt.warnings if "packed, not dequantised" in w]
        assert warning == ("tensor 'model.layers.0.mlp.down_proj.weight_packed': packed, not dequantised: "
                           "weight_scale shape (19, 4) is not (19, 7) (group of 100 columns)")


def test_a_group_index_outside_the_scales_is_a_format_error_naming_file_and_tensor(out, tmp_path, capsys):
    folder = tmp_path / "bad-gidx"
    shutil.copytree(out / "ct_int4_group_sym_actorder", folder)
    sd = load_file(str(folder / "model.safetensors"))
    name = "model.layers.0.mlp.down_proj.weight_g_idx"
    sd[name] = sd[name].clone()
    sd[name][5] = 9        # 70 columns in groups of 16: 5 groups per row, 0..4
    save_file(sd, str(folder / "model.safetensors"))
    code = main(["values", str(folder / "model.safetensors"), "model.layers.0.mlp.down_proj.weight"])
    err = capsys.readouterr().err
    assert code == 3
    assert err == ("tensorloupe: model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight_g_idx' "
                   "names group 9, but 'model.layers.0.mlp.down_proj.weight_scale' holds 5 groups per row "
                   "(expected 0..4; found 9)\n")


@pytest.mark.parametrize("case", ["gptq_v1_4bit_g32", "gptq_v1_3bit_actorder", "awq_gemm_g32"])
def test_a_gptq_or_awq_row_reads_only_its_columns_of_the_packed_parts(out, case, monkeypatch):
    """Read part by part (as parts larger than WHOLE_PART_BYTES are), one output row of the weight
    reads its column of qweight, its zeros' words and its scales, and g_idx: a small part."""
    from tensorloupe.quant import logical
    monkeypatch.setattr(logical, "WHOLE_PART_BYTES", 0)
    name, want = case_reference(out, case)
    with tensorloupe.open(out / case / "model.safetensors") as ckpt:
        t = ckpt.tensor(name)
        outs, ins = t.shape
        before = ckpt.bytes_asked()
        row = 5
        assert values(t, row * ins, ins) == want[row].tolist()
        asked = ckpt.bytes_asked() - before
        parts = {p.name.rsplit(".", 1)[1]: p for p in t.parts}
        bits = t.source.logical.scheme.bits
        if case.startswith("awq"):
            zero_words = 1                                              # 8 columns a word
        else:
            zero_words = -(-(row + 1) * bits // 32) - row * bits // 32  # the word(s) its bits lie in
        expected = (parts["qweight"].shape[0] * 4 * zero_words if case.startswith("awq")
                    else parts["qweight"].shape[0] * 4)                 # its column of qweight
        expected += (parts["qzeros"].shape[0] * 4 * zero_words          # its zero point's words
                     + parts["scales"].shape[0] * 2                     # its fp16 scale per group
                     + (parts["g_idx"].nbytes if "g_idx" in parts else 0))
        assert asked == expected, (asked, expected)
        assert asked * 4 < t.stored_nbytes


@pytest.mark.parametrize("preset", PRESETS)
def test_diff_gives_each_tensor_the_snr_of_the_compressors_decompression(out, preset, capsys):
    base = load_file(str(out / "model_fp32" / "model.safetensors"))
    folder = out / f"model_{preset}"
    want = decompressed(folder)
    doc = run_json(capsys, "diff", out / "model_fp32" / "model.safetensors", folder, "--exact")
    rows = {r["name"]: r for r in doc["tensors"]}
    assert doc["summary"]["counts"]["only_in_b"] == 0
    for name, w in want.items():
        assert rows[name]["snr_db"] == pytest.approx(_snr_db(base[name], w), abs=1e-6), name
    assert doc["summary"]["median_snr_db"] > 15


def test_diff_fp32_experts_against_mxfp4_gives_the_snr_of_transformers_dequantisation(out, capsys):
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    base = load_file(str(out / "moe_fp32" / "model.safetensors"))
    packed = load_file(str(out / "moe_mxfp4" / "model.safetensors"))
    doc = run_json(capsys, "diff", out / "moe_fp32" / "model.safetensors", out / "moe_mxfp4", "--exact")
    rows = {r["name"]: r for r in doc["tensors"]}
    assert doc["summary"]["counts"]["only_in_a"] == doc["summary"]["counts"]["only_in_b"] == 0
    for name in ("model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"):
        want = convert_moe_packed_tensors(packed[name + "_blocks"], packed[name + "_scales"], dtype=torch.float32)
        assert want.shape == base[name].shape
        assert rows[name]["snr_db"] == pytest.approx(_snr_db(base[name], want), abs=1e-6), name
        assert 10 < rows[name]["snr_db"] < 30
