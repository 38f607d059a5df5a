"""CP/Tucker-decomposed LyCORIS convs (issue 26): LoHa's hada_t1/hada_t2, LoKr's lokr_t2 (peft's
use_effective_conv2d and the lycoris library's use_tucker) and LoCon's lora_mid, shown as ΔW
[out, in, *k]. Every element equals torch's float64 value of the reference formula (rebuild_tucker /
make_weight_cp) rounded once to float32, and the writing library's own ΔW (peft's
get_delta_weight, lycoris's get_diff_weight) to float tolerance; a heatmap's cells are computed
from the factors alone; `diff BASE MERGED --adapter` pairs base + ΔW with peft's merge_and_unload
and lycoris's merge_to; health is judged on the factors.

Fixtures: fixtures/tucker_files.py (peft save_pretrained, lycoris LycorisNetwork.save_weights)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import tensorloupe
from tensorloupe.adapters import lycoris
from tensorloupe.cli import main
from tensorloupe.sampler.gather import gather
from tensorloupe.sampler.sampling import values

import tucker_files as fx

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "fixtures" / "out" / "tucker"
PEFT = "base_model.model."
ADAPTERS = {"peft-loha": OUT / "peft-loha" / "adapter_model.safetensors",
            "peft-lokr": OUT / "peft-lokr" / "adapter_model.safetensors",
            **{f"lycoris-{a}": OUT / f"lycoris-{a}.safetensors" for a in fx.LYCORIS_CASES}}
TUCKER_MODULES = ("conv1", "conv2", "conv3")


def run_json(capsys, *argv):
    capsys.readouterr()
    assert main([*map(str, argv), "--json"]) in (0, 1)
    return json.loads(capsys.readouterr().out)


def ours(t) -> torch.Tensor:
    return torch.tensor(values(t, 0, t.numel), dtype=torch.float32).reshape(t.shape)


def rebuild_tucker(t, wa, wb):
    """lycoris/functional/general.py rebuild_tucker (peft's make_weight_cp), here in float64."""
    return torch.einsum("i j ..., i p, j r -> p r ...", t, wa, wb)


def reference(parts: dict, scale: float, shape: tuple) -> torch.Tensor:
    """ΔW by torch in float64 from the stored factors, rounded once to float32."""
    d = {k: v.double() for k, v in parts.items() if k != "alpha"}
    if "lora_mid.weight" in d:
        up, down = d["lora_up.weight"], d["lora_down.weight"]
        w = rebuild_tucker(d["lora_mid.weight"], up.reshape(up.shape[0], -1).T, down.reshape(down.shape[0], -1))
    elif "lora_up.weight" in d:
        up, down = d["lora_up.weight"], d["lora_down.weight"]
        w = up.reshape(up.shape[0], -1) @ down.reshape(down.shape[0], -1)
    elif "hada_t1" in d:
        w = (rebuild_tucker(d["hada_t1"], d["hada_w1_a"], d["hada_w1_b"])
             * rebuild_tucker(d["hada_t2"], d["hada_w2_a"], d["hada_w2_b"]))
    elif "hada_w1_a" in d:
        w = (d["hada_w1_a"] @ d["hada_w1_b"]) * (d["hada_w2_a"] @ d["hada_w2_b"])
    else:
        w1 = d["lokr_w1"] if "lokr_w1" in d else d["lokr_w1_a"] @ d["lokr_w1_b"]
        w2 = (rebuild_tucker(d["lokr_t2"], d["lokr_w2_a"], d["lokr_w2_b"]) if "lokr_t2" in d
              else d["lokr_w2"] if "lokr_w2" in d else d["lokr_w2_a"] @ d["lokr_w2_b"])
        while w1.dim() < w2.dim():
            w1 = w1.unsqueeze(-1)
        w = torch.kron(w1.contiguous(), w2.contiguous())
    return (w * scale).float().reshape(shape)


def stored_parts(case: str, module: str) -> dict:
    stored = load_file(str(ADAPTERS[case]))
    prefix = (PEFT + module if case.startswith("peft") else f"lycoris_{module}") + "."
    return {k[len(prefix):]: v for k, v in stored.items() if k.startswith(prefix)}


@pytest.fixture(scope="module")
def peft_deltas():
    """case -> {module: (scaling, get_delta_weight)}, by peft itself (PeftModel.from_pretrained)."""
    from peft import PeftModel
    out = {}
    for kind in fx.PEFT_CASES:
        base = fx.TinyConv()
        base.load_state_dict(load_file(str(OUT / "base.safetensors")))
        model = PeftModel.from_pretrained(base, OUT / f"peft-{kind}")
        with torch.no_grad():
            out[f"peft-{kind}"] = {name: (layer.scaling["default"], layer.get_delta_weight("default"))
                                   for name, layer in model.base_model.model.named_modules()
                                   if hasattr(layer, "get_delta_weight") and "default" in getattr(layer, "scaling", {})}
    return out


@pytest.mark.parametrize("case", sorted(ADAPTERS))
def test_every_delta_equals_torch_float64_and_the_writing_library(case, peft_deltas):
    base = load_file(str(OUT / "base.safetensors"))
    merged = load_file(str(OUT / (f"{case}-merged.safetensors")))
    own = peft_deltas[case] if case.startswith("peft") else \
        {k[len("lycoris_"):]: (None, v) for k, v in load_file(str(OUT / f"{case}.reference.safetensors")).items()}
    with tensorloupe.open(ADAPTERS[case]) as ckpt:
        assert not ckpt.warnings
        deltas = {t.name: t for t in ckpt.tensors if "computed as" in t.info}
        assert {t.name for t in ckpt.tensors} == set(deltas)     # every stored factor is in one
        prefix = "" if case.startswith("peft") else "lycoris_"
        assert sorted(deltas) == sorted(f"{prefix}{m}.weight" for m in fx.TARGETS)
        for module in fx.TARGETS:
            t = deltas[f"{prefix}{module}.weight"]
            tucker = module in TUCKER_MODULES
            meta = t.info.get("lycoris") or t.info["lora"]    # LoCon's 1x1 and Linear: kohya LoRA pairs
            assert meta.get("tucker", False) is tucker, module
            if tucker:      # the conv's own shape (peft's conv1d: [out, in, k, 1], as its t is)
                assert t.shape[:2] == tuple(base[f"{module}.weight"].shape[:2]) and len(t.shape) >= 3
            scale = meta["scale"]
            got = ours(t)
            assert torch.equal(got, reference(stored_parts(case, module), scale, t.shape)), module
            scaling, library = own[module]
            if scaling is not None:
                assert scale == scaling
            library = library.reshape(t.shape)
            tolerance = 1e-6 * max(1.0, float(library.abs().max()))
            torch.testing.assert_close(got, library, rtol=0, atol=tolerance)
            name = f"{module}.weight"
            torch.testing.assert_close(got, (merged[name] - base[name]).reshape(t.shape), rtol=0,
                                       atol=1e-5 * max(1.0, float(library.abs().max())))


@pytest.mark.parametrize("case", ["peft-loha", "peft-lokr", "lycoris-lora", "lycoris-loha"])
def test_a_heatmap_cell_is_computed_from_the_factors_not_from_its_row(case, monkeypatch):
    with tensorloupe.open(ADAPTERS[case]) as ckpt:
        t = next(t for t in ckpt.tensors if t.name.endswith("conv2.weight"))
        whole = values(t, 0, t.numel)
        t.source._kept.clear()

        def no_rows(*_):
            raise AssertionError("a row was computed for a cell")
        monkeypatch.setattr(lycoris.LycorisSource, "_computed", no_rows)
        positions = random.Random(7).sample(range(t.numel), 300)
        assert gather(t, positions) == [whole[p] for p in positions]


@pytest.mark.parametrize("case", ["peft-loha", "peft-lokr", "lycoris-lora", "lycoris-loha", "lycoris-lokr"])
def test_diff_of_base_and_merged_pairs_base_plus_delta(case, capsys):
    base, merged = OUT / "base.safetensors", OUT / f"{case}-merged.safetensors"
    doc = run_json(capsys, "diff", base, merged, "--adapter", ADAPTERS[case], "--exact")
    adapter = doc["adapter"]
    assert adapter["problems"] == [] and len(adapter["applied"]) == len(fx.TARGETS)
    rows = {r["name"]: r for r in doc["tensors"]}
    for name in adapter["applied"]:
        r = rows[name]
        assert r["exact"] and (r["category"] == "byte_identical" or r["max_abs"] <= 1e-5), (name, r)
    assert all(r["category"] == "byte_identical" for n, r in rows.items() if n not in adapter["applied"])
    # the same diff without the adapter: the weights differ by ΔW, far beyond that tolerance
    plain = {r["name"]: r for r in run_json(capsys, "diff", base, merged, "--exact")["tensors"]}
    assert all(plain[n]["max_abs"] > 1e-3 for n in adapter["applied"])


def test_the_summary_names_the_tucker_modules(capsys):
    doc = run_json(capsys, "inspect", ADAPTERS["lycoris-lora"])
    adapter = doc["extras"]["adapter"]
    assert adapter["algorithms"] == {"locon": 3} and adapter["delta"] == 5
    assert adapter["kind"] == "kohya/A1111 LoRA (LoCon Tucker ×3)"
    doc = run_json(capsys, "inspect", OUT / "peft-loha")
    assert doc["extras"]["adapter"]["kind"] == "PEFT LyCORIS (LoHa ×5)"


def _tucker_file(tmp_path: Path, parts: dict, name: str = "t.safetensors") -> Path:
    path = tmp_path / name
    save_file({k: v.contiguous() for k, v in parts.items()}, str(path))
    return path


def test_a_tucker_core_of_the_wrong_rank_is_said_and_kept_as_stored(tmp_path):
    stored = load_file(str(ADAPTERS["lycoris-loha"]))
    stored["lycoris_conv1.hada_t2"] = torch.zeros(2, 2, 3, 3)
    with tensorloupe.open(_tucker_file(tmp_path, stored)) as ckpt:
        said = [w for w in ckpt.warnings if "lycoris_conv1" in w]
        assert len(said) == 1 and "CP/Tucker factor" in said[0] and "[2, 2, 3, 3]" in said[0]
        assert "lycoris_conv1.hada_t2" in {t.name for t in ckpt.tensors}
        assert len([t for t in ckpt.tensors if "computed as" in t.info]) == 4


def test_a_locon_mid_without_its_down_is_said(tmp_path):
    stored = load_file(str(ADAPTERS["lycoris-lora"]))
    del stored["lycoris_conv2.lora_down.weight"]
    with tensorloupe.open(_tucker_file(tmp_path, stored)) as ckpt:
        said = [w for w in ckpt.warnings if "lycoris_conv2" in w]
        assert len(said) == 1 and "lora_down.weight" in said[0], ckpt.warnings
        assert {"lycoris_conv2.lora_mid.weight", "lycoris_conv2.lora_up.weight"} <= {t.name for t in ckpt.tensors}


def flags_of(doc) -> dict:
    return {(f["tensor"], f["kind"]): f for f in doc["flags"]}


def test_health_on_the_factors_names_nan_untrained_and_an_exploding_module(tmp_path, capsys):
    assert not [f for f in run_json(capsys, "health", ADAPTERS["lycoris-lora"])["flags"]
                if f["kind"] in ("nonfinite", "untrained", "exploding", "dead")]
    stored = load_file(str(ADAPTERS["lycoris-lora"]))
    stored["lycoris_conv1.lora_mid.weight"][0, 1, 2, 2] = float("nan")
    stored["lycoris_conv2.lora_up.weight"].zero_()                  # lycoris's own init: up = 0
    stored["lycoris_conv3.lora_mid.weight"] *= 1000
    flags = flags_of(run_json(capsys, "health", _tucker_file(tmp_path, stored)))
    nan = flags[("lycoris_conv1.weight", "nonfinite")]
    assert nan["severity"] == "error" and "lycoris_conv1.lora_mid.weight" in nan["message"]
    assert flags[("lycoris_conv2.weight", "untrained")]["severity"] == "info"
    assert ("lycoris_conv2.weight", "dead") not in flags
    boom = flags[("lycoris_conv3.weight", "exploding")]
    assert boom["evidence"]["ratio"] > 100 and boom["evidence"]["statistic"] == "‖ΔW‖_F"


def test_exact_norm_of_every_tucker_module_equals_torch(capsys):
    from tensorloupe.healthscan.lora import lycoris_norm
    for case, path in ADAPTERS.items():
        with tensorloupe.open(path) as ckpt:
            for t in ckpt.tensors:
                norm = lycoris_norm(t)
                if "lycoris" not in t.info:      # a kohya LoRA pair's norm is lora.py's own
                    assert norm is None
                    continue
                expected = float(torch.linalg.vector_norm(ours(t).double()))
                assert norm == pytest.approx(expected, rel=1e-6), (case, t.name)


@pytest.mark.parametrize("algo", ["loha", "lokr"])
def test_lycoris_merge_to_scales_loha_and_lokr_twice_which_its_forward_does_not(algo):
    """Why lycoris-<algo>-merged is base + the forward's ΔW: lycoris 4.1.3's merge_to adds
    get_diff_weight = get_weight (already × scale) × scale; its forward adds get_weight once,
    as peft and ComfyUI do, and as ΔW here is."""
    base = load_file(str(OUT / "base.safetensors"))
    merge_to = load_file(str(OUT / f"lycoris-{algo}-merge_to.safetensors"))
    with tensorloupe.open(ADAPTERS[f"lycoris-{algo}"]) as ckpt:
        for t in ckpt.tensors:
            name = t.name[len("lycoris_"):]
            scale = t.info["lycoris"]["scale"]
            got = (merge_to[name] - base[name]).reshape(t.shape)
            torch.testing.assert_close(got, ours(t) * scale, rtol=0, atol=1e-5 * max(1.0, float(got.abs().max())))
            assert scale == 1 or not torch.allclose(got, ours(t), rtol=0, atol=1e-4)


@pytest.mark.parametrize("kind", sorted(fx.PEFT_CASES))
def test_an_adapter_peft_saved_at_its_default_init_is_untrained_not_dead(kind, tmp_path, capsys):
    from peft import LoHaConfig, LoKrConfig, get_peft_model
    config = {"loha": LoHaConfig, "lokr": LoKrConfig}[kind](
        **fx.PEFT_CASES[kind], target_modules=fx.TARGETS, use_effective_conv2d=True)
    get_peft_model(fx.TinyConv(), config).save_pretrained(tmp_path / kind)
    flags = flags_of(run_json(capsys, "health", tmp_path / kind))
    assert {name for name, k in flags if k == "untrained"} == {f"{m}.weight" for m in fx.TARGETS}
    assert all(f["severity"] == "info" for (_, k), f in flags.items() if k == "untrained")
    assert not [k for _, k in flags if k in ("dead_pair", "dead", "nonfinite", "exploding")]
