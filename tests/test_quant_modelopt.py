"""ModelOpt exports (issue 24): FP8 and NVFP4 checkpoints written by ModelOpt's own
export_hf_checkpoint (fixtures/quant_modelopt_files.py) are dequantised equal, element for
element, to ModelOpt's own dequantisation (FP8QTensor / NVFP4QTensor.dequantize), whether the
scheme is in config.json's quantization_config or only in hf_quant_config.json beside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from modelopt.torch.quantization.qtensor.fp8_tensor import FP8QTensor
from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor
from safetensors.torch import load_file

import tensorloupe

from test_quant_wiring import _snr_db, run_json

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "out" / "quant"
CASES = [f"modelopt_export_{algo}{only}" for algo in ("fp8", "nvfp4") for only in ("", "_hf_only")]


def reference(folder: Path) -> dict[str, torch.Tensor]:
    """Every quantised weight as ModelOpt dequantises it, float32."""
    sd = load_file(str(folder / "model.safetensors"))
    out = {}
    for name, scale in sd.items():
        if not name.endswith(".weight_scale"):
            continue
        weight = name[: -len("_scale")]
        data = sd[weight]
        if data.dtype == torch.float8_e4m3fn:
            out[weight] = FP8QTensor(data.shape, torch.float32, data).dequantize(dtype=torch.float32, scale=scale)
        else:
            shape = torch.Size((data.shape[0], 2 * data.shape[1]))
            out[weight] = NVFP4QTensor(shape, torch.float32, data).dequantize(
                dtype=torch.float32, scale=scale, double_scale=sd[name + "_2"], block_sizes={-1: 16})
    return out


@pytest.mark.parametrize("case", CASES)
def test_every_element_equals_modelopts_dequantisation(case):
    folder = OUT / case
    assert (folder / "hf_quant_config.json").exists(), "run fixtures/make.py first"
    assert ("quantization_config" in json.loads((folder / "config.json").read_text())) == ("hf_only" not in case)
    want = reference(folder)
    assert len(want) == 14            # 7 linears in each of 2 layers; lm_head is excluded
    with tensorloupe.open(folder / "model.safetensors") as ckpt:
        q = ckpt.extras["quantisation"]
        assert (q["dequantised"], q["packed"]) == (14, 0)
        assert q["source"] == ("hf_quant_config.json quantization" if "hf_only" in case
                               else "config.json quantization_config")
        for name, w in want.items():
            t = ckpt.tensor(name)
            assert t.parts and t.dtype == "F32" and t.shape == tuple(w.shape), name
            got = np.frombuffer(t.source.read(0, t.source.size), "<f4").reshape(t.shape)
            assert np.array_equal(got, w.numpy()), name


@pytest.mark.parametrize("algo", ["fp8", "nvfp4"])
def test_the_cli_says_the_same_with_either_file(algo, capsys):
    both = run_json(capsys, "inspect", OUT / f"modelopt_export_{algo}" / "model.safetensors")
    only = run_json(capsys, "inspect", OUT / f"modelopt_export_{algo}_hf_only" / "model.safetensors")
    assert only["extras"]["quantisation"]["schemes"] == both["extras"]["quantisation"]["schemes"] != []
    assert only["parameters"] == both["parameters"]
    name = "model.layers.1.mlp.down_proj.weight"
    a = run_json(capsys, "stats", OUT / f"modelopt_export_{algo}" / "model.safetensors", name)
    b = run_json(capsys, "stats", OUT / f"modelopt_export_{algo}_hf_only" / "model.safetensors", name)
    assert a == b and a[0]["dequantised_from"]


def test_a_broken_hf_quant_config_is_said_and_nothing_is_dequantised(tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(OUT / "modelopt_export_nvfp4_hf_only", folder)
    (folder / "hf_quant_config.json").write_text('{"quantization": ')
    with tensorloupe.open(folder / "model.safetensors") as ckpt:
        assert "quantisation" not in ckpt.extras
        assert any("hf_quant_config.json" in w and "not valid JSON" in w for w in ckpt.warnings), ckpt.warnings
        assert ckpt.tensor("model.layers.0.mlp.down_proj.weight").dtype == "U8"    # shown as stored


@pytest.mark.parametrize("kind", ["padded", "swizzled"])
def test_padded_and_swizzled_block_scales_give_the_exports_values(kind):
    """ModelOpt's own pad_nvfp4_weights("row_col") and swizzle_nvfp4_scales (the cuBLAS 128x4
    block layout its single-file export writes) change only where the scales lie: every weight
    equals ModelOpt's dequantisation of the export before them."""
    want = reference(OUT / "modelopt_export_nvfp4")
    with tensorloupe.open(OUT / f"modelopt_export_nvfp4_{kind}" / "model.safetensors") as ckpt:
        assert (ckpt.extras["quantisation"]["dequantised"], ckpt.extras["quantisation"]["packed"]) == (14, 0)
        for name, w in want.items():
            t = ckpt.tensor(name)
            scale = next(p for p in t.parts if p.name.endswith("weight_scale"))
            assert scale.shape != (w.shape[0], w.shape[1] // 16)        # the layout did change
            assert ("cuBLAS" in t.info["dequantised from"]) == (kind == "swizzled")
            # a row reads its packed row and the 128-row tile of scales that holds its own
            before = ckpt.bytes_read()
            t.source.read(4 * t.shape[1] * 3, 4 * t.shape[1])
            assert 0 < ckpt.bytes_read() - before <= t.shape[1] // 2 + 128 * scale.shape[1] + 4
            got = np.frombuffer(t.source.read(0, t.source.size), "<f4").reshape(t.shape)
            assert np.array_equal(got, w.numpy()), name


@pytest.mark.parametrize("case", ["modelopt_export_fp8_hf_only", "modelopt_export_nvfp4_hf_only"])
def test_diff_fp32_against_the_export_gives_the_snr_of_modelopts_values(case, capsys):
    """The export quantised quant_files' tiny Llama, whose fp32 weights llama64_fp32 holds."""
    base_path = OUT / "llama64_fp32" / "model.safetensors"
    base = load_file(str(base_path))
    want = reference(OUT / case)
    doc = run_json(capsys, "diff", base_path, OUT / case, "--exact")
    rows = {r["name"]: r for r in doc["tensors"]}
    for name, w in want.items():
        assert rows[name]["snr_db"] == pytest.approx(_snr_db(base[name], w), abs=1e-6), name
    assert doc["summary"]["median_snr_db"] > (20 if "fp8" in case else 5)
