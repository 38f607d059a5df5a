"""LyCORIS adapters (LoHa, LoKr; peft's and kohya's names) and peft's lora_bias, shown as what
they change: every ΔW (and Δb) equals, element for element, torch's value in float64 from the
same factors with the same scale, rounded once to float32; and peft's own get_delta_weight and
merged-minus-base to float tolerance; `diff BASE MERGED --adapter` pairs base + ΔW with peft's
merge_and_unload; algorithms not computed are listed, not guessed.

Fixtures: fixtures/lycoris_files.py (peft save_pretrained / merge_and_unload; a kohya-named file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.sampler.sampling import values

import lycoris_files as fx

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "fixtures" / "out" / "lycoris"
PEFT = "base_model.model."


def run_json(capsys, *argv):
    capsys.readouterr()
    assert main([*map(str, argv), "--json"]) in (0, 1)
    return json.loads(capsys.readouterr().out)


def ours(t) -> torch.Tensor:
    return torch.tensor(values(t, 0, t.numel), dtype=torch.float32).reshape(t.shape)


def reference(parts: dict, scale: float) -> torch.Tensor:
    """ΔW by torch in float64 from the factors (peft's make_weight / make_kron), rounded once."""
    d = {k: v.double() for k, v in parts.items()}
    if "hada_w1_a" in d:
        return ((d["hada_w1_a"] @ d["hada_w1_b"]) * (d["hada_w2_a"] @ d["hada_w2_b"]) * scale).float()
    w1 = d["lokr_w1"] if "lokr_w1" in d else d["lokr_w1_a"] @ d["lokr_w1_b"]
    w2 = d["lokr_w2"] if "lokr_w2" in d else d["lokr_w2_a"] @ d["lokr_w2_b"]
    if w2.dim() == 4:
        w1 = w1[:, :, None, None]
    return (torch.kron(w1, w2) * scale).float()


@pytest.fixture(scope="module")
def peft_layers():
    """case -> {module: (peft's scaling, its parameters by role, get_delta_weight)}, read by
    peft itself (PeftModel.from_pretrained on the base)."""
    from peft import PeftModel
    from transformers import LlamaForCausalLM
    out = {}
    for case in ("loha", "lokr", "lokr-both"):
        model = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(OUT / "base"), OUT / case)
        found = {}
        for name, module in model.base_model.model.named_modules():
            if hasattr(module, "get_delta_weight") and "default" in getattr(module, "scaling", {}):
                roles = {}
                for role in ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "lokr_w1", "lokr_w1_a",
                             "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b"):
                    if "default" in getattr(module, role, {}):
                        roles[role] = getattr(module, role)["default"].detach().clone()
                with torch.no_grad():
                    found[name] = (module.scaling["default"], roles, module.get_delta_weight("default"))
        out[case] = found
    return out


@pytest.mark.parametrize("case", ["loha", "lokr", "lokr-both"])
def test_every_peft_lycoris_delta_equals_torch_and_peft(case, peft_layers):
    expected = peft_layers[case]
    base = load_file(str(OUT / "base" / "model.safetensors"))
    merged = load_file(str(OUT / f"{case}-merged" / "model.safetensors"))
    with tensorloupe.open(OUT / case / "adapter_model.safetensors") as ckpt:
        assert not ckpt.warnings
        deltas = {t.name: t for t in ckpt.tensors if "computed as" in t.info}
        assert sorted(deltas) == sorted(m + ".weight" for m in expected)
        assert {t.name for t in ckpt.tensors} == set(deltas)     # every stored factor is in one
        for module, (scaling, roles, peft_delta) in expected.items():
            t = deltas[module + ".weight"]
            assert t.info["lycoris"]["scale"] == scaling
            got = ours(t)
            assert torch.equal(got, reference(roles, scaling)), module
            tolerance = 1e-6 * max(1.0, float(peft_delta.abs().max()))
            torch.testing.assert_close(got, peft_delta, rtol=0, atol=tolerance)
            name = module + ".weight"
            torch.testing.assert_close(got, merged[name] - base[name], rtol=0, atol=tolerance)


def test_the_summary_says_the_algorithm_and_settings(capsys):
    doc = run_json(capsys, "inspect", OUT / "lokr-both")
    adapter = doc["extras"]["adapter"]
    assert adapter["layout"] == "peft-lycoris" and adapter["algorithms"] == {"lokr": 6}
    assert adapter["kind"] == "PEFT LyCORIS (LoKr ×6)"
    assert adapter["rank_pattern"] == {"o_proj": 4} and adapter["scales"] == [1.0, 2.0]
    capsys.readouterr()
    assert main(["inspect", str(OUT / "loha")]) == 0
    assert "PEFT LyCORIS (LoHa ×4) (from adapter_config.json)" in capsys.readouterr().out


def test_lora_bias_delta_equals_peft_merged_bias():
    base = load_file(str(OUT / "base" / "model.safetensors"))
    merged = load_file(str(OUT / "lora-bias-merged" / "model.safetensors"))
    stored = load_file(str(OUT / "lora-bias" / "adapter_model.safetensors"))
    config = json.loads((OUT / "lora-bias" / "adapter_config.json").read_text())
    scale = config["lora_alpha"] / config["r"]
    with tensorloupe.open(OUT / "lora-bias" / "adapter_model.safetensors") as ckpt:
        biases = {t.name: t for t in ckpt.tensors if t.info.get("lora", {}).get("bias")}
        assert len(biases) == 4 == ckpt.extras["adapter"]["biases"]
        for name, t in biases.items():
            b = stored[PEFT + name[:-len(".bias")] + ".lora_B.bias"]
            got = ours(t)
            assert torch.equal(got, (b.double() * scale).float()), name
            # peft's merge: bias + lora_B.bias * scaling in float32
            torch.testing.assert_close(base[name] + got, merged[name], rtol=0, atol=1e-6)
        weights = [t for t in ckpt.tensors if t.name.endswith(".weight")]
        assert len(weights) == 4 and all("computed as" in t.info for t in weights)


@pytest.mark.parametrize("case", ["lora-bias", "loha", "lokr"])
def test_diff_of_base_and_merged_pairs_base_plus_delta(case, capsys):
    doc = run_json(capsys, "diff", OUT / "base", OUT / f"{case}-merged", "--adapter", OUT / case, "--exact")
    adapter = doc["adapter"]
    assert adapter["problems"] == [] and len(adapter["applied"]) == (8 if case == "lora-bias" else 4)
    rows = {r["name"]: r for r in doc["tensors"]}
    for name in adapter["applied"]:   # a bias of base + Δb is often the merged bias byte for byte
        r = rows[name]
        assert r["exact"] and (r["category"] == "byte_identical" or r["max_abs"] <= 1e-5), (name, r)
    assert all(r["category"] == "byte_identical" for n, r in rows.items() if n not in adapter["applied"])


def test_kohya_lycoris_follows_the_lycoris_scale_and_lists_others():
    stored = load_file(str(OUT / "kohya.safetensors"))
    with tensorloupe.open(OUT / "kohya.safetensors") as ckpt:
        deltas = {t.name: t for t in ckpt.tensors if "computed as" in t.info}
        for key, module in fx.KOHYA.items():
            parts = {k[len(module) + 1:]: v for k, v in stored.items() if k.startswith(module + ".")}
            if key == "oft":    # not computed: its tensors as stored, and said
                assert module + ".weight" not in deltas
                assert any(module in w and "LyCORIS OFT is not computed" in w for w in ckpt.warnings)
                assert {module + ".oft_blocks", module + ".alpha"} <= {t.name for t in ckpt.tensors}
                continue
            alpha = float(parts.pop("alpha")) if "alpha" in parts else 0.0
            dim = (parts["hada_w1_b"].shape[0] if "hada_w1_b" in parts else
                   parts["lokr_w1_b"].shape[0] if "lokr_w1_b" in parts else
                   parts["lokr_w2_b"].shape[0] if "lokr_w2_b" in parts else None)
            scale = alpha / dim if alpha and dim else 1.0
            t = deltas[module + ".weight"]
            expected = reference(parts, scale)
            assert t.info["lycoris"]["scale"] == scale
            assert t.shape == tuple(expected.shape), module
            assert torch.equal(ours(t), expected), module
        assert ckpt.extras["adapter"]["algorithms"] == {"lokr": 2, "loha": 2}


def broken(tmp_path: Path, tensors: dict) -> Path:
    path = tmp_path / "broken.safetensors"
    save_file(tensors, str(path))
    return path


def test_a_loha_of_mismatched_shapes_is_said_and_kept_as_stored(tmp_path):
    m = "lora_unet_x"
    path = broken(tmp_path, {f"{m}.hada_w1_a": torch.ones(4, 2), f"{m}.hada_w1_b": torch.ones(2, 5),
                             f"{m}.hada_w2_a": torch.ones(4, 2), f"{m}.hada_w2_b": torch.ones(3, 5)})
    with tensorloupe.open(path) as ckpt:
        assert [w for w in ckpt.warnings if "are not a LoHa module's" in w]
        assert len(ckpt.tensors) == 4 and not any("computed as" in t.info for t in ckpt.tensors)


def test_a_lokr_missing_its_w2_is_said(tmp_path):
    m = "lora_unet_x"
    path = broken(tmp_path, {f"{m}.lokr_w1": torch.ones(2, 2), f"{m}.lokr_w2_a": torch.ones(3, 2)})
    with tensorloupe.open(path) as ckpt:
        assert [w for w in ckpt.warnings if "LoKr needs lokr_w2 or both lokr_w2_a and lokr_w2_b" in w]


def test_a_peft_loha_with_a_rank_its_config_does_not_say_is_refused(tmp_path):
    folder = tmp_path / "loha"
    folder.mkdir()
    config = json.loads((OUT / "loha" / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "r": 3}))
    (folder / "adapter_model.safetensors").write_bytes((OUT / "loha" / "adapter_model.safetensors").read_bytes())
    with tensorloupe.open(folder / "adapter_model.safetensors") as ckpt:
        assert sum("rank 4 but the adapter config says 3" in w for w in ckpt.warnings) == 4


def test_lycoris_names_with_a_lora_config_are_said(tmp_path):
    folder = tmp_path / "loha"
    folder.mkdir()
    config = json.loads((OUT / "loha" / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "peft_type": "LORA"}))
    (folder / "adapter_model.safetensors").write_bytes((OUT / "loha" / "adapter_model.safetensors").read_bytes())
    with tensorloupe.open(folder / "adapter_model.safetensors") as ckpt:
        assert "peft_type is 'LORA', but these tensor names are a LOHA or LOKR adapter's" in \
            ckpt.extras["adapter"]["problem"]
