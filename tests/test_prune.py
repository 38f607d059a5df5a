"""`tensorloupe prune`: a checkpoint without some of its experts. transformers decides: the
pruned tiny Mixtral and Qwen2-MoE (per-expert names as save_pretrained writes them, and the fused
`experts.gate_up_proj` [E, ...] layout of transformers 5's live modules) load with
`from_pretrained` and give the logits of the original model with those experts deleted in torch
(their slabs and router rows removed by index_select, the expert count lowered); gguf-py decides
for a stacked `*_exps` GGUF; the demo model's copies are dropped and the rest are bit-identical."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import tensorloupe
from tensorloupe.cli import EXIT_OK, EXIT_USAGE, main
from tensorloupe.errors import UsageError
from tensorloupe.moe import detect
from tensorloupe.synthetic import demo_bytes
from tensorloupe.writing import prune

ROOT = Path(__file__).resolve().parent.parent
IDS = torch.tensor([[1, 7, 42, 20, 3, 59, 5, 11]])
DROPS = {0: [1, 4], 1: [0, 5]}          # two of six experts in each layer
DROP_TEXT = ",".join(f"{layer}:{e}" for layer, es in DROPS.items() for e in es)


def loaded(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def tiny(kind: str):
    from transformers import MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM
    common = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, num_experts_per_tok=2)
    if kind == "mixtral":
        config, cls = MixtralConfig(**common, intermediate_size=24, num_local_experts=6), MixtralForCausalLM
    else:
        config, cls = Qwen2MoeConfig(**common, intermediate_size=24, moe_intermediate_size=8,
                                     shared_expert_intermediate_size=12, num_experts=6), Qwen2MoeForCausalLM
    torch.manual_seed(28)
    model = cls(config).eval()
    with torch.no_grad():   # routers with a clear preference, so routing differs between tokens
        for name, p in model.named_parameters():
            if name.endswith("gate.weight"):
                p.mul_(20)
    return model


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


def deleted_in_torch(model, drops: dict[int, list[int]]):
    """The original model with the experts deleted from its live modules: every [E, ...] tensor
    of a layer's experts and router keeps the other experts' slabs, the count is lowered."""
    experts = model.config.num_local_experts if hasattr(model.config, "num_local_experts") else model.config.num_experts
    state = {}
    for name, value in model.state_dict().items():
        layer = next((i for i in drops if f"layers.{i}." in name), None)
        moe = ".experts." in name or name.endswith(".gate.weight")
        if layer is not None and moe and value.shape[0] == experts:
            keep = torch.tensor([e for e in range(experts) if e not in drops[layer]])
            value = value.index_select(0, keep)
        state[name] = value
    config = model.config.to_dict()
    key = "num_local_experts" if "num_local_experts" in config else "num_experts"
    config[key] = experts - len(next(iter(drops.values())))
    smaller = type(model)(type(model.config).from_dict(config)).eval()
    smaller.load_state_dict(state)
    return smaller


@pytest.fixture(scope="module", params=["mixtral", "qwen2_moe"])
def saved(request, tmp_path_factory):
    model = tiny(request.param)
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    return model, folder


def test_a_pruned_per_expert_model_loads_in_transformers_and_runs_as_the_deleted_one(tmp_path, saved):
    from transformers import AutoModelForCausalLM
    model, src = saved
    out = tmp_path / "pruned"
    assert main(["prune", str(src / "model.safetensors"), str(out), "--drop-experts", DROP_TEXT]) == EXIT_OK
    config = json.loads((out / "config.json").read_text())
    key = "num_local_experts" if model.config.model_type == "mixtral" else "num_experts"
    assert config[key] == 4 and (out / "generation_config.json").exists()
    again = AutoModelForCausalLM.from_pretrained(out).eval()
    want = logits(deleted_in_torch(model, DROPS))
    assert torch.equal(logits(again), want)
    assert not torch.allclose(want, logits(model))     # the experts mattered
    tensors, meta = loaded(out / "model.safetensors")
    assert json.loads(meta["pruned_experts"].split(" (")[0]) == {"0": [1, 4], "1": [0, 5]}
    assert json.loads(meta["kept_experts"].split(" (")[0]) == {"0": [0, 2, 3, 5], "1": [1, 2, 3, 4]}
    with safe_open(str(src / "model.safetensors"), "pt") as f:   # renumbered: new 1 is old 2
        stem = "mlp.experts" if key == "num_experts" else "block_sparse_moe.experts"
        leaf = "gate_proj.weight" if key == "num_experts" else "w1.weight"
        assert torch.equal(tensors[f"model.layers.0.{stem}.1.{leaf}"],
                           f.get_tensor(f"model.layers.0.{stem}.2.{leaf}"))
        assert not any(f".experts.4." in k for k in tensors)


def test_the_fused_layout_of_transformers_5_is_pruned_along_its_expert_axis(tmp_path):
    from transformers import AutoModelForCausalLM
    model = tiny("mixtral")
    src = tmp_path / "fused"
    src.mkdir()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    assert state["model.layers.0.mlp.experts.gate_up_proj"].shape[0] == 6
    save_file(state, str(src / "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(src)
    out = tmp_path / "pruned"
    assert main(["prune", str(src / "model.safetensors"), str(out), "--drop-experts", DROP_TEXT]) == EXIT_OK
    tensors, _ = loaded(out / "model.safetensors")
    assert tensors["model.layers.0.mlp.experts.gate_up_proj"].shape[0] == 4
    assert tensors["model.layers.1.mlp.gate.weight"].shape == (4, 16)
    again = AutoModelForCausalLM.from_pretrained(out).eval()
    assert torch.equal(logits(again), logits(deleted_in_torch(model, DROPS)))


def test_a_stacked_gguf_keeps_the_other_experts_slabs_as_gguf_py_reads_them(tmp_path):
    import gguf
    src = ROOT / "fixtures" / "converted" / "tiny-mixtral.q8_0.gguf"
    out = tmp_path / "pruned"
    assert main(["prune", str(src), str(out), "--drop-experts", "0:2,1:0"]) == EXIT_OK
    got, _ = loaded(out / "model.safetensors")
    keep = {0: [0, 1, 3], 1: [1, 2, 3]}
    checked = 0
    for t in gguf.GGUFReader(src).tensors:
        shape = tuple(int(n) for n in reversed(t.shape))
        want = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type)).reshape(shape)
        layer = int(t.name.split(".")[1]) if t.name.startswith("blk.") else None
        if "_exps." in t.name or "ffn_gate_inp" in t.name:
            want = want[keep[layer]]
            checked += 1
        assert np.array_equal(got[t.name].numpy(), want.astype(np.float32)), t.name
    assert checked == 8 and len(got) == len(gguf.GGUFReader(src).tensors)
    assert not (out / "config.json").exists()


def test_the_demo_model_without_its_noisy_copies_keeps_four_bit_identical_experts(tmp_path):
    src = tmp_path / "demo.safetensors"
    src.write_bytes(demo_bytes())
    out = tmp_path / "pruned"
    assert main(["prune", str(src), str(out), "--recommended"]) == EXIT_OK
    got, meta = loaded(out / "model.safetensors")
    before, _ = loaded(src)
    kept = json.loads(meta["kept_experts"].split(" (")[0])
    assert {len(k) for k in kept.values()} == {4} and len(kept) == 4
    for layer, old in kept.items():
        p = f"model.layers.{layer}.block_sparse_moe."
        for new, e in enumerate(old):
            for w in ("w1", "w2", "w3"):
                a, b = got[f"{p}experts.{new}.{w}.weight"], before[f"{p}experts.{e}.{w}.weight"]
                assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        assert torch.equal(got[p + "gate.weight"], before[p + "gate.weight"][old])
        assert not any(f"{p}experts.{n}." in k for k in got for n in range(4, 8))
    with tensorloupe.open(out / "model.safetensors") as ckpt:
        assert detect(ckpt).expert_count == 4


@pytest.mark.parametrize("drops, said", [
    ("0:1", "layers would keep different numbers of experts (layer 0: 5, layer 1: 6)"),
    ("0:9", "layer 0 has experts 0..5: there is no expert 9"),
    ("7:1", "layer 7 has no experts (layers with experts: 0, 1)"),
    ("0:0,0:1,0:2,0:3,0:4,1:0,1:1,1:2,1:3,1:4", "layer 0 would keep 1 expert(s), fewer than the 2 "
     "each token is routed to (config.json num_experts_per_tok)"),
    ("zero:one", "--drop-experts item 'zero:one' is not LAYER:EXPERT"),
])
def test_a_prune_that_cannot_be_written_says_why_and_writes_nothing(tmp_path, saved, capsys, drops, said):
    model, src = saved
    out = tmp_path / "pruned"
    assert main(["prune", str(src), str(out), "--drop-experts", drops]) == EXIT_USAGE
    assert said in capsys.readouterr().err
    assert not out.exists()


def test_the_source_folder_is_never_written_into(tmp_path, saved, capsys):
    model, src = saved
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    assert main(["prune", str(src / "model.safetensors"), str(src), "--drop-experts", DROP_TEXT]) == EXIT_USAGE
    assert "refusing to write into" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before


def test_per_layer_counts_are_written_where_the_architecture_holds_them():
    config = {"model_type": "hunyuan_v1_moe", "num_hidden_layers": 3, "num_experts": 8}
    assert prune.new_config(config, {0: 6, 1: 8, 2: 7})["num_experts"] == [6, 8, 7]
    with pytest.raises(UsageError, match="one count for every layer of a 'mixtral' model"):
        prune.new_config({"model_type": "mixtral", "num_local_experts": 8}, {0: 6, 1: 8})


def test_write_pruned_is_the_cli_s_prune_from_python(tmp_path, saved):
    model, src = saved
    written = tensorloupe.write_pruned(src / "model.safetensors", tmp_path / "api", drop=DROPS)
    assert main(["prune", str(src / "model.safetensors"), str(tmp_path / "cli"),
                 "--drop-experts", DROP_TEXT]) == EXIT_OK
    assert [Path(p).name for p in written][:2] == ["model.safetensors", "config.json"]
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()


def test_a_dry_run_writes_nothing_and_a_shard_set_loads(tmp_path, saved, capsys):
    from transformers import AutoModelForCausalLM
    model, src = saved
    out = tmp_path / "pruned"
    assert main(["prune", str(src), str(out), "--drop-experts", DROP_TEXT, "--dry-run"]) == EXIT_OK
    said = capsys.readouterr().out
    assert "layer 0: drop 2 experts (1, 4), keep 4: new 0..3 are old 0, 2, 3, 5" in said
    assert "would write" in said and not out.exists()
    assert main(["prune", str(src), str(out), "--drop-experts", DROP_TEXT, "--max-shard-size", "20KB"]) == EXIT_OK
    assert len(list(out.glob("model-*-of-*.safetensors"))) > 1 and (out / "model.safetensors.index.json").exists()
    again = AutoModelForCausalLM.from_pretrained(out).eval()
    assert torch.equal(logits(again), logits(deleted_in_torch(model, DROPS)))
