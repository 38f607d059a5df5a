"""LoRA adapters shown as what they change (issue 26): every ΔW tensorloupe lists equals, element
for element, ΔW computed by torch in float64 from the same A and B with peft's own scaling
(rounded once to float32), and peft's own get_delta_weight and merged-minus-base to float
tolerance; the Summary (`inspect --json`) says what adapter_config.json says; kohya files by their
layout; `diff BASE MERGED --adapter` pairs base + ΔW with peft's merge_and_unload.

Fixtures: fixtures/adapter_files.py (peft save_pretrained / merge_and_unload of a tiny llama)."""

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
from tensorloupe.sampler.sampling import exact_stats, grid, sample, values

import adapter_files

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "fixtures" / "out" / "adapters"
PEFT_CASES = ["lora", "rslora", "pattern", "dora", "untrained"]


def run_json(capsys, *argv):
    code = main([*map(str, argv), "--json"])
    printed, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(printed)


@pytest.fixture(scope="module")
def peft_modules():
    """case -> {base weight name: (peft's scaling, A, B, get_delta_weight, transposed)}, read by
    peft itself (PeftModel.from_pretrained on the base)."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer
    from transformers import LlamaForCausalLM
    out = {}
    for case in PEFT_CASES:
        base = LlamaForCausalLM.from_pretrained(OUT / "base")
        model = PeftModel.from_pretrained(base, OUT / case)
        found = {}
        for name, module in model.base_model.model.named_modules():
            if isinstance(module, LoraLayer) and "default" in module.scaling:
                embedding = "default" in module.lora_embedding_A
                a = (module.lora_embedding_A if embedding else module.lora_A)["default"]
                b = (module.lora_embedding_B if embedding else module.lora_B)["default"]
                a = a if embedding else a.weight
                b = b if embedding else b.weight
                with torch.no_grad():
                    found[name + ".weight"] = (module.scaling["default"], a.detach().clone(),
                                               b.detach().clone(), module.get_delta_weight("default"),
                                               embedding)
        out[case] = found
    return out


def reference(scaling: float, a: torch.Tensor, b: torch.Tensor, transposed: bool) -> torch.Tensor:
    """ΔW by torch in float64 from A, B and the scale, rounded once to float32."""
    product = scaling * (b.double().flatten(1) @ a.double().flatten(1))
    return (product.T if transposed else product).float()


def ours(t) -> torch.Tensor:
    return torch.tensor(values(t, 0, t.numel), dtype=torch.float32).reshape(t.shape)


@pytest.mark.parametrize("case", PEFT_CASES)
def test_every_delta_equals_torch_and_peft(case, peft_modules):
    expected = peft_modules[case]
    base = load_file(str(OUT / "base" / "model.safetensors"))
    merged = load_file(str(OUT / f"{case}-merged" / "model.safetensors"))
    with tensorloupe.open(OUT / case / "adapter_model.safetensors") as ckpt:
        deltas = {t.name: t for t in ckpt.tensors if "computed as" in t.info}
        assert sorted(deltas) == sorted(expected)
        for name, (scaling, a, b, peft_delta, transposed) in expected.items():
            t = deltas[name]
            got = ours(t)
            assert t.info["lora"]["scale"] == scaling
            assert torch.equal(got, reference(scaling, a, b, transposed)), name
            # float32 sums of r products: within a few float32 steps of the tensor's largest value
            tolerance = 1e-6 * max(1.0, float(peft_delta.abs().max()))
            torch.testing.assert_close(got, peft_delta, rtol=0, atol=tolerance)
            if case != "dora":   # DoRA's merged weight is rescaled: compared in test_diff_*
                torch.testing.assert_close(got, merged[name] - base[name], rtol=0, atol=tolerance)


def test_the_summary_says_what_the_adapter_config_says(capsys):
    config = json.loads((OUT / "pattern" / "adapter_config.json").read_text())
    doc = run_json(capsys, "inspect", OUT / "pattern")
    adapter = doc["extras"]["adapter"]
    stored = load_file(str(OUT / "pattern" / "adapter_model.safetensors"))
    assert adapter["layout"] == "peft-lora" and adapter["source"] == "adapter_config.json"
    assert adapter["base_model"] == config["base_model_name_or_path"]
    assert (adapter["r"], adapter["alpha"]) == (config["r"], config["lora_alpha"])
    assert adapter["rank_pattern"] == config["rank_pattern"] and adapter["alpha_pattern"] == config["alpha_pattern"]
    assert sorted(adapter["targets"]) == sorted(config["target_modules"])
    assert adapter["modules_to_save"] == ["lm_head"] and adapter["replaced"] == ["lm_head.weight"]
    assert adapter["ranks"] == [2, 4, 6] and adapter["scales"] == [0.75, 8 / 6, 2.0, 4.0]
    assert adapter["parameters"] == sum(t.numel() for t in stored.values())
    assert (adapter["rslora"], adapter["dora"]) == (False, False)
    records = {r["name"]: r for r in doc["tensors"]}
    q1 = records["model.layers.1.self_attn.q_proj.weight"]
    assert q1["shape"] == [64, 64] and q1["dtype"] == "F32"
    assert [p["name"] for p in q1["parts"]] == [
        "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight"]
    assert q1["info"]["lora"]["r"] == 2 and q1["info"]["computed as"].startswith("ΔW = 8/2 · B · A")
    rs = run_json(capsys, "inspect", OUT / "rslora" / "adapter_model.safetensors")["extras"]["adapter"]
    assert rs["rslora"] and rs["scales"] == [16 / math.sqrt(8)]
    assert run_json(capsys, "inspect", OUT / "dora")["extras"]["adapter"]["dora"]


def test_kohya_deltas_follow_its_layout(capsys):
    """sd-scripts' LoRAModule: ΔW = up · down · alpha / r (conv: up [out, r, 1, 1] times down
    flattened), alpha = r when the file has none."""
    stored = load_file(str(OUT / "kohya.safetensors"))
    doc = run_json(capsys, "inspect", OUT / "kohya.safetensors")
    adapter = doc["extras"]["adapter"]
    assert adapter["layout"] == "kohya-lora" and adapter["base_model"] == "v1-5-pruned-emaonly.safetensors"
    assert adapter["training"]["network_dim"] == "4" and adapter["delta"] == 3
    with tensorloupe.open(OUT / "kohya.safetensors") as ckpt:
        for module in (adapter_files.KOHYA_LINEAR, adapter_files.KOHYA_CONV, adapter_files.KOHYA_TE):
            down, up = stored[f"{module}.lora_down.weight"], stored[f"{module}.lora_up.weight"]
            r = down.shape[0]
            alpha = float(stored[f"{module}.alpha"]) if f"{module}.alpha" in stored else r
            t = ckpt.tensor(module + ".weight")
            expected = reference(alpha / r, down, up, False).reshape(up.shape[0], *down.shape[1:])
            assert t.shape == tuple(expected.shape) and torch.equal(ours(t), expected), module


def test_a_row_reads_r_values_of_b_and_a_once():
    """A row of ΔW needs its r values of B and all of A; a second row reads B's row only."""
    with tensorloupe.open(OUT / "lora" / "adapter_model.safetensors") as ckpt:
        t = ckpt.tensor("model.layers.0.self_attn.q_proj.weight")
        a, b = t.parts[0], t.parts[1]
        before = ckpt.bytes_asked()
        values(t, 5 * 64, 64)
        assert ckpt.bytes_asked() - before == a.nbytes + 4 * 4
        values(t, 40 * 64, 3)
        assert ckpt.bytes_asked() - before == a.nbytes + 2 * 4 * 4


def test_stats_heatmap_and_exact_stats_read_the_delta(peft_modules):
    scaling, a, b, _, _ = peft_modules["rslora"]["model.layers.1.self_attn.q_proj.weight"]
    expected = reference(scaling, a, b, False).numpy()
    with tensorloupe.open(OUT / "rslora") as ckpt:
        t = ckpt.tensor("model.layers.1.self_attn.q_proj.weight")
        s = exact_stats(t)
        assert s.count == expected.size and s.min == expected.min() and s.max == expected.max()
        assert s.mean == pytest.approx(float(expected.astype(np.float64).mean()), rel=1e-12)
        sampled = sample(t, 256)
        assert len(sampled.values) == 256 and not sampled.exhaustive
        g = grid(t, 16, 16)
        assert len(g.values) == 256
        assert g.values == [float(expected[r, c]) for r in g.row_index for c in g.col_index]


def test_without_its_config_a_peft_adapter_is_shown_as_stored(tmp_path, capsys):
    shutil.copy(OUT / "lora" / "adapter_model.safetensors", tmp_path)
    doc = run_json(capsys, "inspect", tmp_path / "adapter_model.safetensors")
    assert doc["extras"]["adapter"]["delta"] == 0 and "no adapter_config.json" in doc["extras"]["adapter"]["problem"]
    assert all("parts" not in r for r in doc["tensors"]) and len(doc["tensors"]) == 8


@pytest.mark.parametrize("change, said", [
    ({"r": 0}, "r must be a positive integer"),
    ({"lora_alpha": "eight"}, "lora_alpha must be a finite number"),
    ({"rank_pattern": {"layers\\.(0|1)+\\.q_proj": 2}}, "is a regular expression"),
    ({"peft_type": "LOHA"}, "but these tensor names are a LORA adapter's"),
    ({"use_rslora": "yes"}, "use_rslora must be true or false"),
])
def test_a_broken_adapter_config_is_said_and_nothing_is_computed(tmp_path, capsys, change, said):
    shutil.copy(OUT / "lora" / "adapter_model.safetensors", tmp_path)
    config = {**json.loads((OUT / "lora" / "adapter_config.json").read_text()), **change}
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    doc = run_json(capsys, "inspect", tmp_path)
    assert said in doc["extras"]["adapter"]["problem"] and doc["extras"]["adapter"]["delta"] == 0
    assert any(said in w for w in doc["warnings"])


def test_a_rank_the_config_does_not_say_is_refused_per_module(tmp_path, capsys):
    shutil.copy(OUT / "lora" / "adapter_model.safetensors", tmp_path)
    config = {**json.loads((OUT / "lora" / "adapter_config.json").read_text()),
              "rank_pattern": {"layers.0.self_attn.q_proj": 2}}
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    doc = run_json(capsys, "inspect", tmp_path)
    assert doc["extras"]["adapter"]["delta"] == 3
    assert any("A has rank 4 but rank_pattern in the adapter config says 2" in w for w in doc["warnings"])


def flags_of(doc) -> dict:
    return {(f["tensor"], f["kind"]): f for f in doc["flags"]}


def test_health_untrained_is_info_faults_are_named(capsys):
    untrained = flags_of(run_json(capsys, "health", OUT / "untrained"))
    assert {k for _, k in untrained} == {"untrained"} and len(untrained) == 4
    assert all(f["severity"] == "info" and "untrained (B = 0)" in f["message"] for f in untrained.values())
    faults = flags_of(run_json(capsys, "health", OUT / "faults"))
    nan = faults[("model.layers.0.self_attn.v_proj.weight", "nonfinite")]
    assert nan["severity"] == "error" and nan["related"] == [adapter_files.FAULTS["nan"]]
    assert "holds 1 NaN" in nan["message"]
    boom = faults[("model.layers.1.self_attn.q_proj.weight", "exploding")]
    assert boom["severity"] == "error" and boom["evidence"]["ratio"] > 100
    # the norm is exact: ‖ΔW‖_F of the torch reference
    sd = load_file(str(OUT / "faults" / "adapter_model.safetensors"))
    stem = "base_model.model.model.layers.1.self_attn.q_proj."
    norm = float(reference(2.0, sd[stem + "lora_A.weight"], sd[stem + "lora_B.weight"], False).double().norm())
    assert boom["evidence"]["value"] == pytest.approx(norm, rel=1e-6)
    assert len(faults) == 2   # nothing else: the scan's own flags on these ΔW are replaced
    assert not flags_of(run_json(capsys, "health", OUT / "lora"))


@pytest.mark.parametrize("case", ["lora", "rslora", "pattern", "dora"])
def test_diff_of_base_and_merged_pairs_base_plus_delta(case, capsys):
    """A merged PEFT model equals base + ΔW (DoRA: rescaled per row) to float tolerance, and
    differs from the base alone."""
    doc = run_json(capsys, "diff", OUT / "base", OUT / f"{case}-merged", "--adapter", OUT / case, "--exact")
    adapter = doc["adapter"]
    assert adapter["problems"] == [] and len(adapter["applied"]) >= 4
    rows = {r["name"]: r for r in doc["tensors"]}
    for name in adapter["applied"]:
        assert rows[name]["exact"] and rows[name]["max_abs"] <= 1e-5, (name, rows[name]["max_abs"])
    # the rest (modules_to_save too: the adapter's copy is the merged model's) byte for byte
    assert all(r["category"] == "byte_identical" for n, r in rows.items() if n not in adapter["applied"])
    plain = {r["name"]: r for r in run_json(capsys, "diff", OUT / "base", OUT / f"{case}-merged", "--exact")["tensors"]}
    assert all(plain[name]["max_abs"] > 1e-3 for name in adapter["applied"])


# --- hostile and broken adapters: each is said, and its tensors stay readable as stored -------

def kohya_file(path: Path, tensors: dict) -> Path:
    from safetensors.torch import save_file
    save_file(tensors, str(path))
    return path


M = "lora_unet_mid_block_attentions_0_proj_out"


@pytest.mark.parametrize("tensors, said", [
    # the pair's ranks disagree: A is [4, 8], B is [8, 3]
    ({f"{M}.lora_down.weight": torch.ones(4, 8), f"{M}.lora_up.weight": torch.ones(8, 3)},
     "are not a LoRA pair"),
    # a 3-D factor is no layout LoRA has
    ({f"{M}.lora_down.weight": torch.ones(4, 8, 2), f"{M}.lora_up.weight": torch.ones(8, 4)},
     "are not a LoRA pair"),
    # a conv up-projection must be 1x1
    ({f"{M}.lora_down.weight": torch.ones(4, 8, 3, 3), f"{M}.lora_up.weight": torch.ones(8, 4, 3, 3)},
     "are not a LoRA pair"),
    # integer factors are no float weights
    ({f"{M}.lora_down.weight": torch.ones(4, 8, dtype=torch.int32), f"{M}.lora_up.weight": torch.ones(8, 4)},
     "not a float type"),
    # alpha must be one value
    ({f"{M}.lora_down.weight": torch.ones(4, 8), f"{M}.lora_up.weight": torch.ones(8, 4),
      f"{M}.alpha": torch.ones(2)}, "is not one float"),
    # a NaN alpha would make every value NaN: refused, not shown
    ({f"{M}.lora_down.weight": torch.ones(4, 8), f"{M}.lora_up.weight": torch.ones(8, 4),
      f"{M}.alpha": torch.tensor(float("nan"))}, "its alpha cannot be read: alpha is nan"),
    # half a pair
    ({f"{M}.lora_down.weight": torch.ones(4, 8)}, "its B (lora_up) is not in the file"),
])
def test_a_broken_kohya_pair_is_said_and_kept_as_stored(tmp_path, capsys, tensors, said):
    path = kohya_file(tmp_path / "broken.safetensors", tensors)
    doc = run_json(capsys, "inspect", path)
    assert doc["extras"]["adapter"]["delta"] == 0
    assert any(said in w and M in w for w in doc["warnings"]), doc["warnings"]
    assert sorted(r["name"] for r in doc["tensors"]) == sorted(tensors)
    assert main(["stats", str(path)]) == 0


def test_a_too_large_factor_is_refused_before_anything_is_read(tmp_path, monkeypatch):
    from tensorloupe.adapters import pairs
    monkeypatch.setattr(pairs, "MAX_FACTOR_VALUES", 31)
    path = kohya_file(tmp_path / "wide.safetensors", {f"{M}.lora_down.weight": torch.ones(4, 8),
                                                      f"{M}.lora_up.weight": torch.ones(8, 4)})
    with tensorloupe.open(path) as ckpt:
        assert ckpt.bytes_read() < 1024 and not any(t.parts for t in ckpt.tensors)
        assert any("holds 32 values, more than the 31" in w for w in ckpt.warnings)


def test_inf_meeting_inf_is_nan_as_in_torch(tmp_path):
    """fsum refuses inf - inf: the plain sum gives torch's NaN; an overflow gives its Inf."""
    down = torch.tensor([[math.inf, 1.0], [math.inf, 1e38]])
    up = torch.tensor([[1.0, -1.0], [1e38, 1e38]])
    path = kohya_file(tmp_path / "inf.safetensors", {f"{M}.lora_down.weight": down,
                                                     f"{M}.lora_up.weight": up, f"{M}.alpha": torch.tensor(2.0)})
    with tensorloupe.open(path) as ckpt:
        got = ours(ckpt.tensor(M + ".weight"))
    expected = reference(1.0, down, up, False)
    assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got[~got.isnan()], expected[~expected.isnan()])


def test_any_adapter_config_values_give_a_delta_or_a_reason(tmp_path):
    """Property: whatever JSON the keys hold, opening is our warning or ΔW, never an exception."""
    from hypothesis import given, settings, strategies as st
    shutil.copy(OUT / "lora" / "adapter_model.safetensors", tmp_path)
    base = json.loads((OUT / "lora" / "adapter_config.json").read_text())
    json_values = st.recursive(st.none() | st.booleans() | st.integers(-10, 10) | st.floats() | st.text(max_size=8),
                               lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                               max_leaves=6)
    keys = st.sampled_from(["r", "lora_alpha", "use_rslora", "use_dora", "rank_pattern", "alpha_pattern",
                            "target_modules", "modules_to_save", "fan_in_fan_out", "peft_type",
                            "base_model_name_or_path", "lora_bias"])

    @settings(max_examples=60, deadline=None)
    @given(st.dictionaries(keys, json_values, min_size=1, max_size=3))
    def check(change):
        (tmp_path / "adapter_config.json").write_text(json.dumps({**base, **change}))
        with tensorloupe.open(tmp_path / "adapter_model.safetensors") as ckpt:
            adapter = ckpt.extras["adapter"]
            assert adapter["delta"] == 4 or adapter.get("problem") or ckpt.warnings
            for t in ckpt.tensors:
                values(t, 0, 3)

    check()


def test_fan_in_fan_out_is_the_transposed_product(capsys):
    """GPT-2's Conv1D weight is [in, out]: peft's get_delta_weight is (B·A)ᵀ · scale, and the
    merged model matches base + ΔW."""
    from peft import PeftModel
    from transformers import GPT2LMHeadModel
    model = PeftModel.from_pretrained(GPT2LMHeadModel.from_pretrained(OUT / "gpt2-base"), OUT / "gpt2-fifo")
    with tensorloupe.open(OUT / "gpt2-fifo") as ckpt:
        for i in range(2):
            module = model.base_model.model.transformer.h[i].attn.c_attn
            t = ckpt.tensor(f"transformer.h.{i}.attn.c_attn.weight")
            assert t.shape == (32, 96) and t.info["lora"]["transposed"]
            a, b = module.lora_A["default"].weight.detach(), module.lora_B["default"].weight.detach()
            scaling = module.scaling["default"]
            assert torch.equal(ours(t), reference(scaling, a, b, True))
            with torch.no_grad():
                torch.testing.assert_close(ours(t), module.get_delta_weight("default"), rtol=0, atol=1e-6)
    doc = run_json(capsys, "diff", OUT / "gpt2-base", OUT / "gpt2-fifo-merged", "--adapter", OUT / "gpt2-fifo", "--exact")
    rows = {r["name"]: r for r in doc["tensors"]}
    assert len(doc["adapter"]["applied"]) == 2
    assert all(rows[n]["max_abs"] <= 1e-6 for n in doc["adapter"]["applied"])


def test_a_bin_adapter_and_an_adapter_over_http(tmp_path, serve_directory, capsys):
    """adapter_model.bin (torch.save of the same state dict) gives the same ΔW; so does the
    adapter read by URL, its adapter_config.json fetched beside it."""
    folder = tmp_path / "bin"
    folder.mkdir()
    torch.save(load_file(str(OUT / "lora" / "adapter_model.safetensors")), folder / "adapter_model.bin")
    shutil.copy(OUT / "lora" / "adapter_config.json", folder)
    name = "model.layers.1.self_attn.v_proj.weight"
    with tensorloupe.open(OUT / "lora") as st_ckpt, tensorloupe.open(folder / "adapter_model.bin") as bin_ckpt:
        assert bin_ckpt.extras["adapter"]["delta"] == 4
        assert torch.equal(ours(bin_ckpt.tensor(name)), ours(st_ckpt.tensor(name)))
    server, url = serve_directory(OUT / "lora")
    try:
        doc = run_json(capsys, "stats", url + "adapter_model.safetensors", name, "--exact")
        with tensorloupe.open(OUT / "lora") as ckpt:
            assert doc[0]["stats"]["mean"] == exact_stats(ckpt.tensor(name)).to_json()["mean"]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("case", ["pattern", "kohya"])
def test_convert_writes_the_adapter_as_stored(case, tmp_path, capsys):
    """`convert` of an adapter (a .bin one, here) writes its factors under their stored names,
    so it stays an adapter; a ΔW named with --names is written as its values."""
    source = OUT / "kohya.safetensors" if case == "kohya" else OUT / case / "adapter_model.safetensors"
    stored = load_file(str(source))
    folder = tmp_path / "in"
    folder.mkdir()
    torch.save(stored, folder / "adapter_model.bin")
    if case != "kohya":
        shutil.copy(OUT / case / "adapter_config.json", folder)
    out = tmp_path / "out.safetensors"
    assert main(["convert", str(folder / "adapter_model.bin"), str(out)]) == 0
    written = load_file(str(out))
    assert sorted(written) == sorted(stored) and all(torch.equal(written[k], stored[k]) for k in stored)
    with tensorloupe.open(source) as ckpt:
        delta = next(t for t in ckpt.tensors if "computed as" in t.info)
        assert main(["extract", str(source), str(tmp_path / "delta.safetensors"), "--names", delta.name]) == 0
        assert torch.equal(load_file(str(tmp_path / "delta.safetensors"))[delta.name], ours(delta))


def test_health_names_a_dead_pair_and_inf_in_a(tmp_path, capsys):
    """A all zero while B is not: a dead pair (warning); an Inf in A: named by its factor."""
    down_inf = torch.ones(2, 8)
    down_inf[1, 3] = math.inf
    path = kohya_file(tmp_path / "faults.safetensors", {
        f"{M}_a.lora_down.weight": torch.zeros(2, 8), f"{M}_a.lora_up.weight": torch.ones(8, 2),
        f"{M}_b.lora_down.weight": down_inf, f"{M}_b.lora_up.weight": torch.ones(8, 2)})
    flags = flags_of(run_json(capsys, "health", path))
    assert set(flags) == {(f"{M}_a.weight", "dead_pair"), (f"{M}_b.weight", "nonfinite")}
    assert flags[(f"{M}_a.weight", "dead_pair")]["severity"] == "warning"
    inf = flags[(f"{M}_b.weight", "nonfinite")]
    assert inf["related"] == [f"{M}_b.lora_down.weight"] and "holds 1 +Inf" in inf["message"]
