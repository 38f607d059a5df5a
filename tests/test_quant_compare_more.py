"""`diff` of a dense model against its quantisation, for the schemes whose compare was not yet
driven (issue 24, "Compare across quantisations"): MLX (affine, mxfp4, nvfp4, mxfp8),
optimum-quanto, torchao (its torch.save files and its safetensors flavour), and a
compressed-tensors quantisation against the GGUF that llama.cpp's converter made of the same
model. Each pair is the logical weight against the dense one, and each tensor's SNR is the one
numpy computes between the library's own dequantisation and the dense weights that were quantised."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import torch
from safetensors.numpy import save_file as save_np

import quant_files
import quant_lib_files
import torchao_files
from test_compare import CONVERTED, SOURCES, converter_permute, gguf_arrays, numpy_metrics
from test_quant_lib import mlx_reference, quanto_reference
from test_quant_wiring import run_json

ROOT = Path(__file__).resolve().parent.parent


def run_text(capsys, *argv) -> str:
    from tensorloupe.cli import main
    assert main([*map(str, argv)]) == 0
    return capsys.readouterr().out


def snr_rows(doc, only_in_b: tuple = ()) -> dict[str, dict]:
    """The rows by name, once every tensor has paired (but for names ending in `only_in_b`)."""
    counts = doc["summary"]["counts"]
    assert counts["only_in_a"] == counts["unreadable"] == 0, counts
    unpaired = [r["name"] for r in doc["tensors"] if r["category"] == "only_in_b"]
    assert len(unpaired) == counts["only_in_b"] and all(n.endswith(only_in_b) for n in unpaired), unpaired
    return {r["name"]: r for r in doc["tensors"]}


def check_snr(rows, name, dense, dequantised):
    want = numpy_metrics(dense, dequantised)["snr_db"]
    row = rows[name]
    assert row["category"] == "values_differ" and row["exact"], (name, row)
    assert row["snr_db"] == pytest.approx(want, abs=1e-6), name
    return row["snr_db"]


@pytest.fixture(scope="module")
def lib_out(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("quant-lib-diff")
    quant_lib_files.write_all(folder)
    return folder / "quant_lib"


# a floor per scheme, far above the -68 dB a compare of raw codes gave, and below what each
# scheme reaches on these Gaussian weights. 1-bit affine really is below 0 dB (-4 dB here, as
# numpy says too): each group of 32 keeps only its min and max, worse than zeros for a Gaussian.
MLX_FLOOR = {"mlx_affine_1bit_g32": -10, "mlx_affine_2bit_g32": 8, "mlx_affine_3bit_g32": 12}


@pytest.mark.parametrize("case", sorted(quant_lib_files.MLX_CASES))
def test_mlx_against_its_dense_weights(lib_out, case, capsys, tmp_path):
    dense: dict = {}
    quant_lib_files.mlx_case(case, dense)
    base = tmp_path / "dense.safetensors"
    save_np(dense, str(base))
    want = mlx_reference(lib_out / case)
    doc = run_json(capsys, "diff", base, lib_out / case / "model.safetensors", "--exact")
    rows = snr_rows(doc)
    assert set(rows) == set(dense)
    for name, ref in want.items():
        snr = check_snr(rows, name, dense[name], ref)
        assert snr > MLX_FLOOR.get(case, 15), (name, snr)
    for name in set(dense) - set(want):       # mlx-lm's mixed recipe leaves one module unquantised
        assert rows[name]["category"] == "same_values", rows[name]


@pytest.mark.parametrize("case", sorted(quant_lib_files.QUANTO_CASES))
def test_quanto_against_its_dense_weights(lib_out, case, capsys, tmp_path):
    model = quant_lib_files.quanto_float_model(case)
    dense = {k: v.detach().to(torch.float32).numpy() for k, v in model.state_dict().items()}
    base = tmp_path / "dense.safetensors"
    save_np(dense, str(base))
    want = quanto_reference(case)
    doc = run_json(capsys, "diff", base, lib_out / case / "model.safetensors", "--exact")
    # quanto's frozen modules also store their own input_scale and output_scale scalars
    rows = snr_rows(doc, only_in_b=(".input_scale", ".output_scale"))
    assert doc["summary"]["counts"]["only_in_b"] == 4
    for name, ref in want.items():
        snr = check_snr(rows, name, dense[name].ravel(), ref)
        assert snr > (8 if "qint2" in case else 15), (name, snr)
    assert rows["0.bias"]["category"] in ("byte_identical", "same_values")
    if case == "quanto_qint4_grouped":
        # quanto keeps this weight as [26, 128] and its file does not say [13, 256]: the pair says
        # so and compares the elements in row-major order (shape_changed, no SNR, before)
        assert rows["0.weight"]["b_shape"] == [26, 128] and rows["0.weight"]["a_shape"] == [13, 256]
        assert any("grouped by 128" in n for n in rows["0.weight"]["notes"])
        assert "regrouped: 0.weight" in run_text(capsys, "diff", base, lib_out / case, "--exact")


TORCHAO_CHILD = r"""
import json, sys, warnings
from pathlib import Path
warnings.simplefilter("ignore")
import torch
from safetensors.torch import save_file
sys.path.insert(0, sys.argv[3])
import torchao_files
folder = Path(sys.argv[1])
torchao_files.write_all(folder.parent)
flat = {}
for case in json.loads(sys.argv[2]):
    dense = torchao_files.float_model(case).state_dict()
    save_file({k: v.to(torch.float32).contiguous() for k, v in dense.items()}, str(folder / f"{case}.dense.safetensors"))
    for k, v in torch.load(folder / f"{case}.pt", weights_only=False).items():
        if hasattr(v, "qdata"):
            flat[f"{case}/{k}"] = v.dequantize().detach().to(torch.float32).contiguous()
save_file(flat, str(folder / "dequantised.safetensors"))
"""
TORCHAO = sorted(torchao_files.CASES)


@pytest.fixture(scope="module")
def torchao_out(tmp_path_factory):
    """torchao in a child process, as tests/test_torchao.py runs it (tensorloupe's process never
    imports it): the fixtures, each case's dense weights, and torchao's own dequantize()."""
    folder = tmp_path_factory.mktemp("torchao-diff") / "torchao"
    subprocess.run([sys.executable, "-c", TORCHAO_CHILD, str(folder), json.dumps(TORCHAO),
                    str(Path(torchao_files.__file__).parent)], capture_output=True, text=True, check=True)
    from safetensors.numpy import load_file
    return folder, load_file(str(folder / "dequantised.safetensors"))


@pytest.mark.parametrize("case", TORCHAO)
def test_torchao_against_its_dense_weights(torchao_out, case, capsys):
    from safetensors.numpy import load_file
    folder, dequantised = torchao_out
    base = folder / f"{case}.dense.safetensors"
    dense = load_file(str(base))
    files = [folder / f"{case}.pt"]
    if case in torchao_files.SAFETENSORS_CASES:
        files.append(folder / f"{case}.safetensors")
    for path in files:
        rows = snr_rows(run_json(capsys, "diff", base, path, "--exact"))
        weights = [k.split("/", 1)[1] for k in dequantised if k.startswith(case + "/")]
        assert weights, case
        for name in weights:
            snr = check_snr(rows, name, dense[name], dequantised[f"{case}/{name}"])
            assert snr > (15 if "4bit" in case else 25), (path.name, name, snr)


@pytest.mark.parametrize("preset", ["w8a8_int", "w4a16"])
def test_a_compressed_tensors_model_against_the_gguf_of_the_same_model(preset, capsys, tmp_path):
    """The HF model llama.cpp's converter turned into tiny-llama.q8_0.gguf, quantised here by
    compressed-tensors: diff pairs each logical weight with its GGUF tensor (names mapped, the
    converter's q/k row permutation undone) and compares dequantised with dequantised."""
    from safetensors.torch import load_file, save_file
    config = json.loads((SOURCES / "llama" / "config.json").read_text())
    state = load_file(str(SOURCES / "llama" / "model.safetensors"))
    fmt, weights = quant_files.MODEL_PRESETS[preset]
    tensors, qc = quant_files.quantise_state_dict(state, fmt, weights)
    folder = tmp_path / preset
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": qc}))
    ours, plain = quant_files.decompressed(folder)
    gguf_path = CONVERTED / "tiny-llama.q8_0.gguf"
    gg = gguf_arrays(gguf_path)
    doc = run_json(capsys, "diff", folder, gguf_path, "--exact")
    rows = snr_rows(doc)
    assert doc["summary"]["matched"] == len(state)
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}
    snrs = []
    for row in doc["tensors"]:
        a = ours[row["name"]].numpy() if row["name"] in ours else plain[row["name"]].numpy()
        b = gg[row["b"]]
        kind = row["name"].split(".")[-2]
        if kind in heads:
            b = b[np.argsort(converter_permute(np.arange(a.shape[0]), heads[kind]))]
        if row["category"] == "byte_identical":
            continue
        want = numpy_metrics(a, b)["snr_db"]
        assert row["snr_db"] == pytest.approx(want, abs=0.01), row["name"]
        if row["name"] in ours:
            snrs.append(row["snr_db"])
    assert len(snrs) == 14
    # both sides are quantisations of the same weights: int8 against q8_0 agrees to ~40 dB,
    # 4-bit groups of 32 to ~20 dB (a mismatched pairing gives ~0 dB)
    assert min(snrs) > (30 if preset == "w8a8_int" else 15), snrs
