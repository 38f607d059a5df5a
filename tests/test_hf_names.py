"""`convert --hf-names`: llama.cpp's conversions of tiny HF models (fixtures/converted_llama.py:
the HF side in fixtures/out/converted-src, the GGUF side committed in fixtures/converted) come
back under transformers' names with the converter's Q/K permutation undone and the stacked
experts split: f16 tensors equal the HF tensors rounded to f16, and q8_0 ones gguf-py's
dequantised values with the permutation undone in numpy (the converter's own reshape, reversed)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from tensorloupe.cli import EXIT_OK, EXIT_USAGE, main
from tensorloupe.namemap import to_gguf
from tensorloupe.namemap.reverse import to_hf

ROOT = Path(__file__).resolve().parent.parent
GGUF = ROOT / "fixtures" / "converted"
HF = ROOT / "fixtures" / "out" / "converted-src"


def loaded(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def unpermuted(w: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute is w.reshape(heads, 2, half, *rest).swapaxes(1, 2);
    its inverse reads the GGUF rows as (heads, half, 2) and swaps back."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("model", ["llama", "mixtral"])
@pytest.mark.parametrize("outtype", ["f16", "q8_0"])
def test_a_converted_gguf_comes_back_as_the_hf_tensors(tmp_path, model, outtype):
    import gguf
    src = GGUF / f"tiny-{model}.{outtype}.gguf"
    out = tmp_path / "hf.safetensors"
    assert main(["convert", str(src), str(out), "--hf-names"]) == EXIT_OK
    got, hf = loaded(out), loaded(HF / model / "model.safetensors")
    assert sorted(got) == sorted(hf)
    reader = gguf.GGUFReader(src)
    heads = int(reader.fields["llama.attention.head_count"].parts[-1][0])
    kv_heads = int(reader.fields["llama.attention.head_count_kv"].parts[-1][0])
    by_gguf = {t.name: t for t in reader.tensors}
    for name, want in hf.items():
        if outtype == "f16":   # the converter's f16: matrices rounded to f16, 1-D tensors kept f32
            assert torch.equal(got[name], want.to(got[name].dtype)), name
            continue
        target = to_gguf(name, "llama")
        t = by_gguf[target.gguf]
        shape = tuple(int(n) for n in reversed(t.shape))
        values = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type)).reshape(shape)
        if target.expert is not None:
            values = values[target.expert]
        if name.endswith("q_proj.weight"):
            values = unpermuted(values, heads)
        elif name.endswith("k_proj.weight"):
            values = unpermuted(values, kv_heads)
        assert np.array_equal(got[name].numpy(), values.astype(np.float32)), name
        scale = float(want.abs().max()) / 127 if want.ndim > 1 else 0.0
        assert float((got[name] - want).abs().max()) <= scale + 1e-7, name   # q8_0 of the HF values


def test_every_hf_name_of_the_converted_models_maps_there_and_back():
    for model in ("llama", "mixtral"):
        for name in loaded(HF / model / "model.safetensors"):
            target = to_gguf(name, "llama")
            back = to_hf(target.gguf, "llama")
            expect = name if target.expert is None else name.replace(f".experts.{target.expert}.", ".experts.{xid}.")
            assert back.name == expect and back.stacked == (target.expert is not None), name


def test_hf_names_of_a_file_that_is_not_gguf_is_refused(tmp_path, capsys):
    out = tmp_path / "x.safetensors"
    assert main(["convert", str(HF / "llama" / "model.safetensors"), str(out), "--hf-names"]) == EXIT_USAGE
    assert "--hf-names maps GGUF names back to Hugging Face ones" in capsys.readouterr().err
    assert not out.exists()


def test_from_pretrained_of_the_mapped_gguf_gives_the_hf_model_at_f16(tmp_path):
    import shutil
    from transformers import AutoModelForCausalLM
    out = tmp_path / "model"
    out.mkdir()
    assert main(["convert", str(GGUF / "tiny-llama.f16.gguf"), str(out / "model.safetensors"),
                 "--hf-names"]) == EXIT_OK
    shutil.copy(HF / "llama" / "config.json", out / "config.json")
    mapped = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    original = AutoModelForCausalLM.from_pretrained(HF / "llama", dtype=torch.float32).eval()
    with torch.no_grad():   # the original's matrices as the converter's f16 holds them
        for p in original.parameters():
            if p.ndim > 1:
                p.copy_(p.half().float())
        ids = torch.tensor([[1, 5, 9, 33, 2, 70]])
        assert torch.equal(mapped(ids).logits, original(ids).logits)
