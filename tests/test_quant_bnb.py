"""bitsandbytes NF4 / FP4 / int8 (saved by transformers' save_pretrained with bitsandbytes' CPU
backend) and NVIDIA ModelOpt NVFP4 (quantised by ModelOpt's NVFP4QTensor) read as real values:
every element of every quantised weight equals the library's own dequantisation
(bitsandbytes.functional.dequantize_4bit / int8_vectorwise_dequant, NVFP4QTensor.dequantize),
counts are the unquantised model's, the CLI's values and exact stats are those values, and diff
against the fp32 model gives their SNR. Unknown variants stay packed and say why."""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
import bitsandbytes.functional as bnbf
from bitsandbytes.functional import QuantState
from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor
from safetensors.torch import load_file, save_file

import tensorloupe
from tensorloupe.cli import main

import quant_bnb_files
from test_quant_wiring import _snr_db, run_json

BNB = sorted(quant_bnb_files.BNB)
CASES = BNB + ["modelopt_nvfp4"]
BASE = {case: "llama72_fp32" for case in BNB} | {"modelopt_nvfp4": "llama64_fp32"}


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("quant-bnb")
    quant_bnb_files.write_all(folder)
    return folder / "quant"


def reference(folder: Path) -> dict[str, torch.Tensor]:
    """Every quantised weight of a folder as its own library dequantises it, float32."""
    sd = load_file(str(folder / "model.safetensors"))
    out = {}
    for name in sd:
        if name.endswith(".SCB"):                                   # LLM.int8
            weight = name[: -len("SCB")] + "weight"
            out[weight] = bnbf.int8_vectorwise_dequant(sd[weight], sd[name])
        elif name.endswith(".weight.absmax"):                        # 4-bit
            weight = name[: -len(".absmax")]
            state = QuantState.from_dict({k[len(weight) + 1:]: v for k, v in sd.items()
                                          if k.startswith(weight + ".")}, "cpu")
            out[weight] = bnbf.dequantize_4bit(sd[weight], state).float()
        elif name.endswith(".weight_scale_2"):                       # ModelOpt NVFP4
            stem = name[: -len("weight_scale_2")]
            packed = sd[stem + "weight"]
            shape = torch.Size((packed.shape[0], 2 * packed.shape[1]))
            out[stem + "weight"] = NVFP4QTensor(shape, torch.float32, packed).dequantize(
                dtype=torch.float32, scale=sd[stem + "weight_scale"], double_scale=sd[name],
                block_sizes={-1: 16})
    return out


@pytest.mark.parametrize("case", CASES)
def test_every_element_equals_the_librarys_dequantisation(out, case):
    want = reference(out / case)
    assert len(want) == 7 * (2 if case == "modelopt_nvfp4" else 1)
    with tensorloupe.open(out / case / "model.safetensors") as ckpt:
        assert ckpt.extras["quantisation"]["dequantised"] == len(want)
        assert ckpt.extras["quantisation"]["packed"] == 0
        for name, w in want.items():
            t = ckpt.tensor(name)
            assert t.parts and t.dtype == "F32" and t.shape == tuple(w.shape), name
            got = np.frombuffer(t.source.read(0, t.source.size), "<f4").reshape(t.shape)
            assert np.array_equal(got, w.numpy()), name


@pytest.mark.parametrize("case", CASES)
def test_inspect_counts_the_unquantised_parameters(out, case, capsys):
    base = load_file(str(out / BASE[case] / "model.safetensors"))
    doc = run_json(capsys, "inspect", out / case / "model.safetensors")
    assert doc["parameters"] == sum(v.numel() for v in base.values())
    assert doc["extras"]["quantisation"]["schemes"]
    weights = {r["name"]: r for r in doc["tensors"] if r.get("parts")}
    assert all(tuple(weights[n]["shape"]) == tuple(base[n].shape) for n in weights)


@pytest.mark.parametrize("case", ["bnb_nf4_double", "bnb_int8", "modelopt_nvfp4"])
def test_cli_values_and_exact_stats_are_the_reference_values(out, case, capsys):
    name = "model.layers.0.mlp.down_proj.weight"     # 99 columns in the bnb model: odd
    want = reference(out / case)[name]
    flat = want.flatten().tolist()
    path = out / case / "model.safetensors"
    got = run_json(capsys, "values", path, name, "--count", len(flat))
    assert got["shape"] == list(want.shape) and list(map(float, got["values"])) == flat
    got = run_json(capsys, "values", path, name, "--start", 333, "--count", 9)
    assert list(map(float, got["values"])) == flat[333:342]
    (entry,) = run_json(capsys, "stats", path, name, "--exact")
    s = entry["stats"]
    assert entry["exact"] and entry["dequantised_from"] and entry["numel"] == len(flat)
    assert (s["min"], s["max"]) == (min(flat), max(flat))
    assert s["mean"] == pytest.approx(math.fsum(flat) / len(flat), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("case", ["bnb_fp4", "bnb_int8", "modelopt_nvfp4"])
def test_diff_fp32_against_the_quantised_model_gives_the_snr_of_the_real_values(out, case, capsys):
    base_path = out / BASE[case] / "model.safetensors"
    base = load_file(str(base_path))
    want = reference(out / case)
    doc = run_json(capsys, "diff", base_path, out / case, "--exact")
    assert doc["summary"]["counts"]["only_in_a"] == doc["summary"]["counts"]["only_in_b"] == 0
    rows = {r["name"]: r for r in doc["tensors"]}
    for name, w in want.items():
        assert rows[name]["snr_db"] == pytest.approx(_snr_db(base[name], w), abs=1e-6), name
    assert doc["summary"]["median_snr_db"] > (30 if case == "bnb_int8" else 5)


def _rewritten(out: Path, tmp: Path, case: str, change) -> Path:
    """A copy of a fixture whose stored tensors `change(state dict)` edits."""
    folder = tmp / case
    shutil.copytree(out / case, folder)
    sd = load_file(str(folder / "model.safetensors"))
    change(sd)
    save_file(sd, str(folder / "model.safetensors"))
    return folder / "model.safetensors"


def _quant_state(sd: dict, name: str, **changes) -> None:
    key = name + ".quant_state.bitsandbytes__nf4"
    state = json.loads(bytes(sd[key].tolist()))
    raw = json.dumps({**state, **changes}).encode()
    sd[key] = torch.tensor(list(raw), dtype=torch.uint8)


W = "model.layers.0.mlp.up_proj.weight"


@pytest.mark.parametrize("change, says", [
    # a quant type bitsandbytes has no table for
    (lambda sd: _quant_state(sd, W, quant_type="af4"), "quant_type 'af4'"),
    # a block size dequantize_4bit refuses
    (lambda sd: _quant_state(sd, W, blocksize=48), "blocksize 48"),
    # a shape the stored codes cannot hold: never read beside the tensor
    (lambda sd: _quant_state(sd, W, shape=[99, 80]), "does not hold 7,920 4-bit codes"),
    # the quant state is not JSON (a string from a file is data)
    (lambda sd: sd.update({W + ".quant_state.bitsandbytes__nf4": torch.tensor([0xFF, 0x7B], dtype=torch.uint8)}),
     "quant_state is not readable"),
    # JSON nested past the parser's depth: our error, not a RecursionError
    (lambda sd: sd.update({W + ".quant_state.bitsandbytes__nf4": torch.tensor(list(b"[" * 3000), dtype=torch.uint8)}),
     "quant_state is not readable"),
    # a quant state larger than any bitsandbytes writes is not read at all
    (lambda sd: sd.update({W + ".quant_state.bitsandbytes__nf4": torch.zeros(5000, dtype=torch.uint8)}),
     "of at most 4,096 bytes"),
    # two quant states beside one weight
    (lambda sd: sd.update({W + ".quant_state.bitsandbytes__fp4": sd[W + ".quant_state.bitsandbytes__nf4"].clone()}),
     "2 quant_state tensors"),
])
def test_an_unexpected_quant_state_leaves_the_weight_packed_and_says_why(out, tmp_path, capsys, change, says):
    path = _rewritten(out, tmp_path, "bnb_nf4_bf16", change)
    with tensorloupe.open(path) as ckpt:
        packed = ckpt.tensor(W)
        assert not packed.parts and packed.dtype == "U8"
        assert packed.info["quantisation"].startswith("packed, not dequantised: ")
        assert says in packed.info["quantisation"], packed.info["quantisation"]
        assert ckpt.extras["quantisation"]["packed"] == 1 and ckpt.extras["quantisation"]["dequantised"] == 6
    doc = run_json(capsys, "values", path, W, "--count", 4)
    assert doc["dtype"] == "U8" and all(float(v).is_integer() for v in doc["values"])


def test_an_int8_weight_of_another_format_stays_packed(out, tmp_path):
    """weight_format 1 (col32, a GPU tile layout) is not row-major codes: not read as such."""
    name = "model.layers.0.self_attn.q_proj."
    path = _rewritten(out, tmp_path, "bnb_int8",
                      lambda sd: sd.update({name + "weight_format": torch.tensor(1, dtype=torch.uint8)}))
    with tensorloupe.open(path) as ckpt:
        assert "weight_format [1]" in ckpt.tensor(name + "weight").info["quantisation"]


def test_a_nested_absmax_code_is_read_as_the_file_says(out, tmp_path):
    """Double quantisation: absmax bytes index the file's nested_quant_map, whatever it holds."""
    def change(sd):
        sd[W + ".nested_quant_map"] = torch.flip(sd[W + ".nested_quant_map"], (0,)).contiguous()
    path = _rewritten(out, tmp_path, "bnb_nf4_double", change)
    want = reference(path.parent)[W]
    with tensorloupe.open(path) as ckpt:
        t = ckpt.tensor(W)
        got = np.frombuffer(t.source.read(0, t.source.size), "<f4").reshape(t.shape)
    assert np.array_equal(got, want.numpy())


def test_modelopt_weight_scale_2_multiplies(out):
    """Known answer: the first stored byte's two codes times weight_scale * weight_scale_2."""
    sd = load_file(str(out / "modelopt_nvfp4" / "model.safetensors"))
    stem = "model.layers.0.self_attn.q_proj."
    byte = int(sd[stem + "weight"][0, 0])
    e2m1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]   # noqa: E731
    block = f32(float(sd[stem + "weight_scale"][0, 0].float()) * float(sd[stem + "weight_scale_2"]))
    with tensorloupe.open(out / "modelopt_nvfp4" / "model.safetensors") as ckpt:
        t = ckpt.tensor(stem + "weight")
        first = struct.unpack("<2f", t.source.read(0, 8))
    assert first == (f32(e2m1[byte & 15] * block), f32(e2m1[byte >> 4] * block))


# --- HQQ: hqq's HQQLinear.dequantize is the reference ---------------------------------------

HQQ = sorted(quant_bnb_files.HQQ)
HQQ_WEIGHT = quant_bnb_files.HQQ_LINEAR + "weight"


def hqq_reference(folder: Path) -> torch.Tensor:
    from hqq.core.quantize import BaseQuantizeConfig, HQQLinear
    sd = load_file(str(folder / "model.safetensors"))
    dtype = quant_bnb_files.HQQ[folder.name][3]
    layer = HQQLinear(None, BaseQuantizeConfig(), compute_dtype=dtype, device="cpu", initialize=False)
    layer.load_state_dict({k[len(quant_bnb_files.HQQ_LINEAR):]: v for k, v in sd.items()})
    return layer.dequantize().float()


@pytest.mark.parametrize("case", HQQ)
def test_hqq_every_element_and_every_row_window_equals_hqqs_dequantize(out, case):
    want = hqq_reference(out / case).numpy()
    with tensorloupe.open(out / case / "model.safetensors") as ckpt:
        t = ckpt.tensor(HQQ_WEIGHT)
        assert t.shape == want.shape and ckpt.extras["quantisation"]["dequantised"] == 1
        got = np.frombuffer(t.source.read(0, t.source.size), "<f4").reshape(t.shape)
        assert np.array_equal(got, want)
        # windows of 3 rows: each reads only the packed rows (of two planes, maybe) it needs
        row = 4 * t.shape[1]
        for r in range(0, t.shape[0] - 3, 7):
            window = np.frombuffer(t.source.read(r * row, 3 * row), "<f4")
            assert np.array_equal(window, want[r:r + 3].reshape(-1)), r


@pytest.mark.parametrize("case", ["hqq_4bit_g16", "hqq_3bit_g64_f16"])
def test_hqq_counts_values_and_diff(out, case, capsys):
    base_path = out / f"{case}_fp32" / "model.safetensors"
    base = load_file(str(base_path))
    want = hqq_reference(out / case)
    path = out / case / "model.safetensors"
    assert run_json(capsys, "inspect", path)["parameters"] == sum(v.numel() for v in base.values())
    got = run_json(capsys, "values", path, HQQ_WEIGHT, "--count", want.numel())
    assert list(map(float, got["values"])) == want.flatten().tolist()
    doc = run_json(capsys, "diff", base_path, path.parent, "--exact")
    (row,) = [r for r in doc["tensors"] if r["name"] == HQQ_WEIGHT]
    assert row["snr_db"] == pytest.approx(_snr_db(base[HQQ_WEIGHT], want), abs=1e-6) and row["snr_db"] > 5


@pytest.mark.parametrize("key, value, says", [
    ("packing", torch.tensor(list(b"6bit_u8"), dtype=torch.uint8), "packing '6bit_u8'"),   # no such packing
    ("view_as_float", torch.tensor(1, dtype=torch.uint8), "view_as_float [1]"),           # W_q as a float view
    ("group_size", torch.tensor(64, dtype=torch.int32), "group_size 64"),                 # 7200 % 64 != 0
    ("quant_scale", torch.tensor(1, dtype=torch.uint8), "quant_scale [1]"),               # scales quantised too
    ("axis", torch.tensor(2, dtype=torch.int32), "axis 2"),
])
def test_an_hqq_meta_we_do_not_read_leaves_w_q_packed(out, tmp_path, key, value, says):
    path = _rewritten(out, tmp_path, "hqq_4bit_g16",
                      lambda sd: sd.update({quant_bnb_files.HQQ_LINEAR + key: value}))
    with tensorloupe.open(path) as ckpt:
        w_q = ckpt.tensor(quant_bnb_files.HQQ_LINEAR + "W_q")
        assert not any(t.parts for t in ckpt.tensors) and w_q.dtype == "U8"
        assert says in w_q.info["quantisation"], w_q.info["quantisation"]


# --- compressed-tensors sparse-24-bitmask ---------------------------------------------------
# compressed-tensors 0.20.1 (pinned) no longer has the sparse compressors: the reference is
# 0.12.2's sparse24_bitmask_decompress, transcribed (numpy.unpackbits little-endian, scatter).

def sparse24_decompress(compressed: torch.Tensor, bitmask: torch.Tensor, shape: list) -> torch.Tensor:
    mask = torch.from_numpy(np.unpackbits(bitmask.numpy(), axis=-1, count=shape[-1], bitorder="little")
                            .reshape(shape).astype(bool))
    dense = torch.zeros(shape, dtype=compressed.dtype)
    dense[mask] = compressed.flatten()
    return dense


def sparse24_reference(folder: Path) -> dict[str, torch.Tensor]:
    sd = load_file(str(folder / "model.safetensors"))
    return {k[: -len("bitmask")] + "weight": sparse24_decompress(
        sd[k[: -len("bitmask")] + "compressed"], v, sd[k[: -len("bitmask")] + "shape"].flatten().tolist()).float()
        for k, v in sd.items() if k.endswith(".bitmask")}


@pytest.mark.parametrize("case", ["sparse24_model", "sparse24_bf16_odd"])
def test_sparse24_every_element_equals_the_decompression(out, case):
    want = sparse24_reference(out / case)
    assert len(want) == (14 if case == "sparse24_model" else 1)
    with tensorloupe.open(out / case / "model.safetensors") as ckpt:
        assert ckpt.extras["quantisation"]["dequantised"] == len(want)
        for name, w in want.items():
            t = ckpt.tensor(name)
            got = np.frombuffer(t.source.read(0, t.source.size), "<f4").reshape(t.shape)
            assert np.array_equal(got, w.numpy()), name
            assert (w.reshape(-1, 4) != 0).sum(1).max() <= 2      # 2:4 indeed


def test_sparse24_counts_and_diff_against_the_dense_model(out, capsys):
    base_path = out / "llama64_fp32" / "model.safetensors"
    base = load_file(str(base_path))
    path = out / "sparse24_model" / "model.safetensors"
    assert run_json(capsys, "inspect", path)["parameters"] == sum(v.numel() for v in base.values())
    want = sparse24_reference(out / "sparse24_model")
    for name, w in want.items():      # the kept values are the dense model's own, the rest zero
        assert torch.equal(w, torch.where(w != 0, base[name], torch.zeros(())))
    doc = run_json(capsys, "diff", base_path, path.parent, "--exact")
    rows = {r["name"]: r for r in doc["tensors"]}
    for name, w in want.items():
        assert rows[name]["snr_db"] == pytest.approx(_snr_db(base[name], w), abs=1e-6) and rows[name]["snr_db"] > 3


def test_a_bitmask_row_that_is_not_two_of_four_is_a_format_error(out, tmp_path, capsys):
    name = "model.layers.0.mlp.up_proj."
    def change(sd):
        sd[name + "bitmask"] = sd[name + "bitmask"].clone()
        sd[name + "bitmask"][3, 0] |= 0xFF     # row 3: more set bits than values kept
    path = _rewritten(out, tmp_path, "sparse24_bf16_odd", change)
    code = main(["values", str(path), name + "weight", "--start", "300", "--count", "5"])
    err = capsys.readouterr().err
    assert code == 3 and err.startswith(f"tensorloupe: model.safetensors: row 3 of tensor '{name}bitmask' marks ")
    assert "not 50 (two of each four)" in err


def test_float_values_beside_a_quantisation_config_are_plain_sparse(out, tmp_path):
    """A module the quantisation leaves out (float values, no weight_scale) of a 2:4 file whose
    config quantises others: read as plain 2:4 values (over codes: test_quant_sparse24q.py)."""
    folder = tmp_path / "sparse-quant"
    shutil.copytree(out / "sparse24_bf16_odd", folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["config_groups"] = {"group_0": {"weights": {"num_bits": 8, "type": "float"}}}
    (folder / "config.json").write_text(json.dumps(config))
    want = sparse24_reference(out / "sparse24_bf16_odd")["model.layers.0.mlp.up_proj.weight"]
    with tensorloupe.open(folder / "model.safetensors") as ckpt:
        t = ckpt.tensor("model.layers.0.mlp.up_proj.weight")
        assert t.info["scheme"]["from"]["quantisation"] == "none: float BF16 values, no weight_scale beside them"
        got = np.frombuffer(t.source.read(0, t.source.size), "<f4").reshape(t.shape)
        assert np.array_equal(got, want.numpy())
