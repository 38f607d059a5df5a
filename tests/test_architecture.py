"""The architecture summary: each value and where it came from (config.json beside the file, an
embedded config, GGUF keys, or inferred from tensors), and parameters by component with training
state kept apart. Oracles: gguf-py's reading of the GGUF keys, transformers' own configs and
num_parameters() of models it builds and saves, torch's parameters() of saved modules."""

import json
import threading

import pytest
import torch
from gguf import GGUFReader
from safetensors.torch import save_file

import tensorloupe
from tensorloupe import architecture
from tensorloupe.cli import main

import build
import gguf_files
import shard_files
import torch_files


def inspect(capsys, *args) -> dict:
    # what ran before (building a model: transformers may import deepspeed, which prints its
    # accelerator on stdout) is not the command's output
    capsys.readouterr()
    assert main(["inspect", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def fields(doc: dict) -> dict:
    return {f["key"]: (f["value"], f["source"]) for f in doc["architecture"]["fields"]}


@pytest.fixture(scope="module")
def gguf_paths(tmp_path_factory):
    return gguf_files.write_all(tmp_path_factory.mktemp("gguf"))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return shard_files.write_all(tmp_path_factory.mktemp("shards"))


def test_demo_names_its_experts_and_top_k_from_metadata(capsys, demo_path):
    doc = inspect(capsys, demo_path)
    got = fields(doc)
    embedded = "embedded config (__metadata__ config)"
    assert got["family"] == ("mixtral", f"{embedded}: model_type")
    assert got["layers"] == (4, f"{embedded}: num_hidden_layers")
    assert got["experts"] == (8, f"{embedded}: num_local_experts")
    assert got["experts_per_token"] == (2, f"{embedded}: num_experts_per_tok")
    assert got["kv_heads"] == (2, f"{embedded}: num_key_value_heads")
    assert got["head_dim"] == (16, "derived: hidden size / heads (96 / 6)")
    assert got["router"][0] == "model.layers.*.block_sparse_moe.gate.weight"
    assert doc["architecture"]["moe"] == {"detected": True, "experts": 8, "experts_per_token": 2,
                                          "moe_layers": 4}
    params = doc["architecture"]["parameters"]
    experts = 4 * 8 * 3 * 96 * 192
    assert params["by_component"]["experts"]["parameters"] == experts
    assert params["total"] == doc["parameters"] == 1_920_864
    assert params["active"] == 1_920_864 - experts + experts * 2 // 8
    assert doc["memory"]["kv_cache"]["per_token"][0]["bytes"] == 4 * 2 * 16 * 2 * 2


def test_inspect_text_starts_with_the_architecture(capsys, demo_path):
    assert main(["inspect", str(demo_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Architecture (configs read: embedded config (__metadata__ config))")
    assert out.index("Experts per token") < out.index("format      safetensors")
    assert "Fits? weights + f16 KV cache at 4,096 tokens" in out


def test_gguf_keys_name_their_source(capsys, gguf_paths):
    for name in ("gguf_llama", "gguf_moe"):
        oracle = {f.name: f.contents() for f in GGUFReader(gguf_paths[name]).fields.values()}
        got = fields(inspect(capsys, gguf_paths[name]))
        for key, gguf_key in (("layers", "llama.block_count"), ("hidden_size", "llama.embedding_length"),
                              ("heads", "llama.attention.head_count"),
                              ("kv_heads", "llama.attention.head_count_kv"),
                              ("context_length", "llama.context_length"),
                              ("rope_theta", "llama.rope.freq_base"),
                              ("intermediate_size", "llama.feed_forward_length")):
            assert got[key] == (oracle[gguf_key], f"GGUF key {gguf_key}")
        assert got["family"] == ("llama", "GGUF key general.architecture")
        assert got["vocab_size"] == (oracle["llama.vocab_size"], "GGUF key llama.vocab_size")
        assert got["tied_embeddings"] == (False, "inferred: output.weight is stored apart from token_embd.weight")
    moe = inspect(capsys, gguf_paths["gguf_moe"])
    assert fields(moe)["experts"] == (8, "GGUF key llama.expert_count")
    assert fields(moe)["experts_per_token"] == (2, "GGUF key llama.expert_used_count")
    assert moe["architecture"]["moe"]["experts"] == 8 and moe["architecture"]["moe"]["experts_per_token"] == 2


def test_lightning_checkpoint_keeps_optimizer_state_apart(capsys, tmp_path):
    path = torch_files.write_all(tmp_path)["lightning"]
    saved = torch.load(path, weights_only=False)
    doc = inspect(capsys, path)
    params = doc["architecture"]["parameters"]
    assert params["total"] == sum(t.numel() for t in saved["state_dict"].values()) == 73
    moments = sum(t.numel() for s in saved["optimizer_states"][0]["state"].values() for t in s.values())
    assert params["training_state"]["optimizer"]["parameters"] == moments == 2 * 73 + 6
    assert params["training_state"]["trainer state"]["tensors"] == 1   # callbacks' best_model_score
    assert doc["parameters"] == 73 + moments + 1                       # every tensor, as before
    assert fields(doc)["hidden_size"] == (8, "embedded config (hyper_parameters): hidden")


def test_a_resemblyzer_style_checkpoint_counts_only_the_model(capsys, tmp_path):
    """{"step", "model_state", "optimizer_state"} as resemblyzer saves its encoder: Adam's moments
    are twice the model and must not be counted as parameters."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.LSTM(8, 16, batch_first=True))
    optimizer = torch.optim.Adam(net.parameters())
    net(torch.randn(2, 3, 8))[0].sum().backward()
    optimizer.step()
    path = tmp_path / "pretrained.pt"
    torch.save({"step": 10, "model_state": net.state_dict(), "optimizer_state": optimizer.state_dict()}, path)
    params = inspect(capsys, path)["architecture"]["parameters"]
    assert params["total"] == sum(p.numel() for p in net.parameters())
    assert params["training_state"]["optimizer"]["parameters"] == 2 * params["total"] + 4  # + 4 step scalars


def test_buffers_are_not_parameters(capsys, tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6))
    path = tmp_path / "bn.pt"
    torch.save(net.state_dict(), path)
    params = inspect(capsys, path)["architecture"]["parameters"]
    assert params["total"] == sum(p.numel() for p in net.parameters()) == 42
    assert params["buffers"]["tensors"] == 3   # running_mean, running_var, num_batches_tracked


def save_pretrained(model, folder):
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def test_config_json_beside_a_single_file_wins_over_the_embedded_config(capsys, demo_path, tmp_path):
    (tmp_path / "demo-moe.safetensors").write_bytes(demo_path.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mixtral", "num_hidden_layers": 4,
                                                      "num_experts_per_tok": 3}))
    doc = inspect(capsys, tmp_path / "demo-moe.safetensors")
    got = fields(doc)
    assert got["experts_per_token"] == (3, "config.json: num_experts_per_tok")
    assert got["layers"] == (4, "config.json: num_hidden_layers")
    # what config.json lacks still comes from the embedded one
    assert got["hidden_size"] == (96, "embedded config (__metadata__ config): hidden_size")
    assert doc["architecture"]["sources"] == [str(tmp_path / "config.json"),
                                              "embedded config (__metadata__ config)"]


def test_a_broken_config_json_is_a_warning(capsys, demo_path, tmp_path):
    (tmp_path / "demo-moe.safetensors").write_bytes(demo_path.read_bytes())
    (tmp_path / "config.json").write_text("{not json")
    doc = inspect(capsys, tmp_path / "demo-moe.safetensors")
    assert any("config.json was not used" in w and "not valid JSON" in w for w in doc["warnings"])
    assert fields(doc)["experts_per_token"][1].startswith("embedded config")


def test_shard_folder_and_its_files_read_the_config_beside_them(capsys, shards):
    folder = shards["sharded_folder"]
    by_folder = inspect(capsys, folder)
    by_files = inspect(capsys, shards["shard_1"], shards["shard_2"], shards["shard_3"], shards["shard_index"])
    assert by_folder["architecture"] == by_files["architecture"]
    got = fields(by_folder)
    config = json.loads((folder / "config.json").read_text())
    assert got["family"] == (config["model_type"], "config.json: model_type")
    assert got["experts"] == (config["num_experts"], "config.json: num_experts")
    assert got["experts_per_token"] == (3, "config.json: num_experts_per_tok")
    assert by_folder["architecture"]["moe"]["experts_per_token"] == 3
    assert by_folder["tensor_count"] == by_files["tensor_count"] > 0


def test_config_json_beside_a_url(capsys, shards):
    server = build.make_server(shards["sharded_folder"], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        doc = inspect(capsys, *(f"{base}/model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)))
        assert fields(doc)["experts_per_token"] == (3, "config.json: num_experts_per_tok")
        assert doc["architecture"]["sources"] == [f"{base}/config.json"]
    finally:
        server.shutdown()


def test_transformers_checkpoint_matches_its_config_and_parameter_count(capsys, tmp_path):
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM
    torch.manual_seed(0)
    config = DeepseekV2Config(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                              kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=8, qk_nope_head_dim=16,
                              v_head_dim=16, n_routed_experts=4, n_shared_experts=1,
                              num_experts_per_tok=2, vocab_size=100, first_k_dense_replace=1,
                              max_position_embeddings=512)
    model = DeepseekV2ForCausalLM(config)
    folder = save_pretrained(model, tmp_path / "with-config")
    doc = inspect(capsys, folder / "model.safetensors")
    got = fields(doc)
    for key, attr in (("layers", "num_hidden_layers"), ("kv_lora_rank", "kv_lora_rank"),
                      ("q_lora_rank", "q_lora_rank"), ("qk_rope_head_dim", "qk_rope_head_dim"),
                      ("experts", "n_routed_experts"), ("experts_per_token", "num_experts_per_tok"),
                      ("shared_experts", "n_shared_experts"), ("context_length", "max_position_embeddings")):
        assert got[key][0] == getattr(config, attr) and got[key][1].startswith("config.json: ")
    params = doc["architecture"]["parameters"]
    assert params["total"] == model.num_parameters()
    routed = params["by_component"]["experts"]["parameters"]
    assert routed == 4 * 3 * 64 * 32
    assert params["active"] == params["total"] - routed + routed * 2 // 4
    assert doc["memory"]["kv_cache"]["per_token"][0]["bytes"] == 2 * (32 + 8) * 2
    # Without config.json, the MLA ranks, layers, vocabulary and experts are inferred from tensors.
    (folder / "config.json").unlink()
    got = fields(inspect(capsys, folder / "model.safetensors"))
    assert got["kv_lora_rank"] == (32, "inferred from tensor model.layers.0.self_attn.kv_a_layernorm.weight shape [32]")
    assert got["qk_rope_head_dim"][0] == 8 and got["qk_rope_head_dim"][1].startswith("inferred")
    assert got["q_lora_rank"][0] == 48
    assert got["layers"] == (2, "inferred from tensor names (layer numbers 0..1)")
    assert got["vocab_size"] == (100, "inferred from tensor model.embed_tokens.weight shape [100, 64]")
    assert got["experts"] == (4, "inferred from tensor names (4 experts in 1 layer)")
    assert got["shared_experts"][0] == "present"
    assert "experts_per_token" not in got


def test_inferred_values_say_so(capsys, tmp_path):
    torch.manual_seed(1)
    tensors = {"model.embed_tokens.weight": torch.zeros(50, 16),
               "model.layers.0.mlp.up_proj.weight": torch.zeros(40, 16),
               "model.layers.1.mlp.up_proj.weight": torch.zeros(40, 16),
               "model.norm.weight": torch.zeros(16)}
    save_file(tensors, tmp_path / "m.safetensors")
    doc = inspect(capsys, tmp_path / "m.safetensors")
    got = fields(doc)
    assert got == {
        "layers": (2, "inferred from tensor names (layer numbers 0..1)"),
        "hidden_size": (16, "inferred from tensor model.embed_tokens.weight shape [50, 16]"),
        "intermediate_size": (40, "inferred from tensor model.layers.0.mlp.up_proj.weight shape [40, 16]"),
        "vocab_size": (50, "inferred from tensor model.embed_tokens.weight shape [50, 16]"),
        "tied_embeddings": (True, "inferred: no output head tensor beside model.embed_tokens.weight "
                            "(the embedding serves as the head, or there is no head)"),
    }
    assert doc["architecture"]["sources"] == []
    assert doc["memory"]["kv_cache"]["available"] is False


def test_api_summarize_matches_the_cli(capsys, demo_path):
    arch = architecture.summarize(tensorloupe.open(demo_path))
    assert arch.to_json() == inspect(capsys, demo_path)["architecture"]


def test_an_absurd_layer_count_is_ignored_not_expanded(capsys, demo_path, tmp_path):
    """A hostile config.json: 10^15 layers with a sliding window would, taken at its word, build
    per-layer lists of 10^15 entries (a hang, then MemoryError)."""
    (tmp_path / "demo-moe.safetensors").write_bytes(demo_path.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 10 ** 15, "sliding_window": 4096,
                                                      "num_key_value_heads": 2}))
    doc = inspect(capsys, tmp_path / "demo-moe.safetensors")
    assert fields(doc)["layers"] == (4, "embedded config (__metadata__ config): num_hidden_layers")
    assert fields(doc)["sliding_layers"][0] == [0, 1, 2, 3]


def test_tied_weights_saved_by_torch_count_once(capsys, tmp_path):
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(50, 8)
            self.norm = torch.nn.LayerNorm(8)
            self.lm_head = torch.nn.Linear(8, 50, bias=False)
            self.lm_head.weight = self.embed_tokens.weight      # tied, as tie_word_embeddings does
    net = Tiny()
    path = tmp_path / "tied.pt"
    torch.save(net.state_dict(), path)
    doc = inspect(capsys, path)
    params = doc["architecture"]["parameters"]
    assert params["total"] == sum(p.numel() for p in net.parameters()) == 50 * 8 + 16
    assert params["tied"]["tensors"] == 1 and params["tied"]["parameters"] == 400
    assert fields(doc)["tied_embeddings"] == (True, "inferred: lm_head.weight is stored as the same tensor as embed_tokens.weight")


def test_training_groups_by_segment_agree_with_the_table_as_regular_expressions():
    # components.training_group looks ASCII names up by segment; the same table as regular
    # expressions (used for the other names) must give the same group for every name.
    import random

    from tensorloupe.architecture import components
    words = [w for _, _, _, group_words in components.TRAINING_STATE for w in group_words]
    pieces = words + [w.upper() for w in words] + ["model", "layers", "0", "weight", "\n", "",
                                                   "Optim", "ſcheduler", "\u212aema", "emas"]
    rng = random.Random(11)
    names = [".".join(rng.choice(pieces) for _ in range(rng.randint(1, 4))) for _ in range(20000)]
    names += [w + "\n" for w in words] + ["x." + w + "\n" for w in words] + ["callbacks", "a.loops"]
    for name in names:
        by_regex = next((g for g, p in components._TRAINING_RE if p.search(name)), None)
        assert components.training_group(name) == by_regex, name
    assert components.training_group("model.layers.0.mlp.weight") is None
    assert components.training_group("state.0.exp_avg") == "optimizer"
    assert components.training_group("Model_EMA.fc.weight") == "ema"
