"""`convert --dtype F32|F16|BF16`: quantised tensors (GGUF blocks, compressed-tensors schemes)
written as plain floats with exactly the values tensorloupe shows, rounded as torch rounds.
The references: gguf-py's `gguf.quants.dequantize` and compressed-tensors' own `decompress`,
each cast by torch's `.to(dtype)`; and torch's casts for the encoders themselves."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from tensorloupe import cli
from tensorloupe.cli import EXIT_OK, main
from tensorloupe.writing import encode

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures" / "out"
TORCH = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def loaded(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def same_bits(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, name
    assert torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)), name


SPECIALS = [0.0, -0.0, 1.0, -2.5, 65504.0, 65519.0, 65520.0, 70000.0, -1e6, 1e-8, 6e-8, 3e-5,
            float("inf"), float("-inf"), float("nan"), -float("nan"), 3.4e38, 1.0000001, 2 ** -126,
            1.00390625, 1.01171875, -1.00390625]   # the last three are bf16 ties


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
def test_the_encoders_round_as_torch_does(dtype):
    assert dtype in cli.DTYPE_CHOICES and cli.DTYPE_CHOICES == encode.TARGETS
    rng = np.random.default_rng(28)
    values = np.concatenate([np.array(SPECIALS, dtype=np.float32),
                             rng.standard_normal(4096).astype(np.float32) * 10.0 ** rng.integers(-9, 6, 4096)])
    got = torch.frombuffer(bytearray(encode.ENCODERS[dtype](values.tolist())), dtype=TORCH[dtype])
    same_bits(got, torch.from_numpy(values).to(TORCH[dtype]), dtype)


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
def test_a_gguf_file_dequantises_to_gguf_py_values_in_the_dtype(tmp_path, dtype):
    import gguf
    src = OUT / "tiny-llama.gguf"
    out = tmp_path / "deq.safetensors"
    assert main(["convert", str(src), str(out), "--dtype", dtype]) == EXIT_OK
    got, meta = loaded(out)
    reader = gguf.GGUFReader(src)
    kinds = set()
    for t in reader.tensors:
        shape = tuple(int(n) for n in reversed(t.shape))
        values = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type)).reshape(shape)
        kinds.add(t.tensor_type.name)
        same_bits(got[t.name], torch.from_numpy(values.copy()).to(TORCH[dtype]), t.name)
    assert {"F32", "F16", "Q4_K", "Q6_K", "Q8_0"} <= kinds and len(got) == len(reader.tensors)
    assert f"written as their values in {dtype}" in meta["dequantised"]


@pytest.mark.parametrize("preset, dtype", [("w4a16", "BF16"), ("fp8_block", "F16"), ("nvfp4", "BF16"),
                                           ("w4a16", "F32")])
def test_a_quantised_safetensors_dequantises_to_compressed_tensors_values(tmp_path, preset, dtype):
    import quant_files
    folder = OUT / "quant" / f"model_{preset}"
    out = tmp_path / "deq.safetensors"
    assert main(["convert", str(folder / "model.safetensors"), str(out), "--dtype", dtype]) == EXIT_OK
    got, meta = loaded(out)
    weights, plain = quant_files.decompressed(folder)
    assert weights
    for name, want in weights.items():
        same_bits(got[name], want.to(TORCH[dtype]), name)
    for name, value in plain.items():
        same_bits(got[name], value.to(TORCH[dtype]) if value.is_floating_point() else value, name)
    assert sorted(got) == sorted([*weights, *plain])
    if dtype != "F32":
        assert f"F32 to {dtype}" in meta["cast"]


def test_dry_run_says_the_dtype_each_tensor_is_written_in(tmp_path, capsys):
    assert main(["convert", str(OUT / "tiny-llama.gguf"), str(tmp_path / "x.safetensors"),
                 "--dtype", "BF16", "--dry-run"]) == EXIT_OK
    text = capsys.readouterr().out
    assert "token_embd.weight  BF16[1100, 256]  563,200 bytes (its BF16 values)" in text
    assert not (tmp_path / "x.safetensors").exists()
