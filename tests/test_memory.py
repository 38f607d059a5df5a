"""Memory estimates: hand-computed figures for named public configurations (Llama-3-8B, Llama-2-7B,
Qwen2.5-7B, Mistral-7B, Gemma-2-9B, Gemma-3-1B, DeepSeek-V2-Lite), the KV cache measured by
transformers on tiny models, and the weights of the GGUF fixtures against gguf-py's tensor bytes."""

import math

import pytest
import torch
from gguf import GGUFReader

import tensorloupe
from tensorloupe import architecture
from tensorloupe.architecture import memory
from tensorloupe.model import Checkpoint, Tensor

import gguf_files


@pytest.fixture(scope="module")
def gguf_paths(tmp_path_factory):
    return gguf_files.write_all(tmp_path_factory.mktemp("gguf"))

LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
             "rope_theta": 500000.0, "tie_word_embeddings": False}
LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32, "max_position_embeddings": 4096}      # no KV heads: MHA
QWEN25_7B = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
             "num_attention_heads": 28, "num_key_value_heads": 4, "sliding_window": 131072,
             "use_sliding_window": False, "max_position_embeddings": 32768}
MISTRAL_7B_V01 = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "sliding_window": 4096,
                  "max_position_embeddings": 32768}
GEMMA2_9B = {"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
             "sliding_window": 4096, "max_position_embeddings": 8192}
GEMMA3_1B = {"model_type": "gemma3_text", "hidden_size": 1152, "num_hidden_layers": 26,
             "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
             "sliding_window": 512, "sliding_window_pattern": 6, "max_position_embeddings": 32768}
DEEPSEEK_V2_LITE = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
                    "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
                    "num_key_value_heads": 16, "kv_lora_rank": 512, "q_lora_rank": None,
                    "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                    "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
                    "moe_intermediate_size": 1408, "max_position_embeddings": 163840,
                    "vocab_size": 102400}


def estimate(config, tensors=(), context=None):
    arch = architecture.summarize(Checkpoint("safetensors", "m", 0, list(tensors)), config)
    return arch, memory.estimate(arch, context)


def per_token(doc, cache="f16"):
    return next(p for p in doc["kv_cache"]["per_token"] if p["cache_type"] == cache)


def at(doc, context, cache="f16"):
    return next(a for a in doc["kv_cache"]["at"] if a["context"] == context and a["cache_type"] == cache)


def test_llama3_8b_kv_cache_is_128_kib_per_token_at_f16():
    _, doc = estimate(LLAMA3_8B)
    # 32 layers x 8 KV heads x 128 head dim x 2 (K and V) x 2 bytes
    assert per_token(doc)["bytes"] == 32 * 8 * 128 * 2 * 2 == 131_072
    assert per_token(doc)["formula"].startswith("32 layers × 8 KV heads × 128 head dim × 2 (K and V) × 2 bytes")
    assert doc["kv_cache"]["kind"] == "GQA"
    # Q8_0 blocks: 34 bytes per 32 elements; Q4_0: 18 bytes per 32.
    assert per_token(doc, "q8_0")["bytes"] == 32 * 2 * (1024 // 32) * 34 == 69_632
    assert per_token(doc, "q4_0")["bytes"] == 32 * 2 * (1024 // 32) * 18 == 36_864
    assert doc["kv_cache"]["contexts"] == [4096, 8192, 32768]   # 4k, 32k and the model's maximum
    assert at(doc, 4096)["bytes"] == 131_072 * 4096 == 512 << 20
    assert at(doc, 8192)["bytes"] == 1 << 30
    assert at(doc, 32768, "q4_0")["bytes"] == 36_864 * 32768


def llama3_8b_tensors():
    """The tensor shapes of Meta-Llama-3-8B (bf16), descriptors only."""
    d, ff, kv, vocab = 4096, 14336, 1024, 128256
    shapes = [("model.embed_tokens.weight", (vocab, d))]
    for i in range(32):
        p = f"model.layers.{i}"
        shapes += [(f"{p}.self_attn.q_proj.weight", (d, d)), (f"{p}.self_attn.k_proj.weight", (kv, d)),
                   (f"{p}.self_attn.v_proj.weight", (kv, d)), (f"{p}.self_attn.o_proj.weight", (d, d)),
                   (f"{p}.mlp.gate_proj.weight", (ff, d)), (f"{p}.mlp.up_proj.weight", (ff, d)),
                   (f"{p}.mlp.down_proj.weight", (d, ff)), (f"{p}.input_layernorm.weight", (d,)),
                   (f"{p}.post_attention_layernorm.weight", (d,))]
    shapes += [("model.norm.weight", (d,)), ("lm_head.weight", (vocab, d))]
    return [Tensor(name, "BF16", shape, 0, 2 * math.prod(shape)) for name, shape in shapes]


def test_llama3_8b_parameters_weights_and_fits():
    arch, doc = estimate(LLAMA3_8B, llama3_8b_tensors())
    params = arch.parameters
    assert params.total == 8_030_261_248     # the published 8.03B
    by = {k: c.parameters for k, c in params.components.items()}
    assert by == {"embeddings": 128256 * 4096, "output_head": 128256 * 4096,
                  "attention": 32 * (2 * 4096 * 4096 + 2 * 1024 * 4096),
                  "mlp": 32 * 3 * 14336 * 4096, "norms": 65 * 4096}
    weights = {w["precision"]: w["bytes"] for w in doc["weights"]}
    assert weights == {"stored": 2 * 8_030_261_248, "bf16": 2 * 8_030_261_248, "fp8": 8_030_261_248,
                       "q8_0": 8_030_261_248 * 17 // 16, "q4_k": 8_030_261_248 * 9 // 16}
    fits = doc["fits"]
    assert fits["context"] == 4096 and fits["kv_bytes"] == 512 << 20
    table = {row["memory_gb"]: {c["precision"]: c["fits"] for c in row["cells"]} for row in fits["rows"]}
    # bf16: 16.06e9 B + 0.5 GiB = 15.46 GiB; q4_k: 4.52e9 B + 0.5 GiB = 4.71 GiB
    assert [gb for gb, row in table.items() if row["bf16"]] == [16, 24, 48, 80]
    assert [gb for gb, row in table.items() if row["q4_k"]] == [8, 12, 16, 24, 48, 80]
    assert [gb for gb, row in table.items() if row["q8_0"]] == [12, 16, 24, 48, 80]
    # 8k context: 16.06e9 + 1 GiB = 15.96 GiB still fits 16 GB; 32k: + 4 GiB = 18.96 GiB does not
    for context, kv, fits_16 in ((8192, 1 << 30, True), (32768, 4 << 30, False)):
        _, longer = estimate(LLAMA3_8B, llama3_8b_tensors(), context=context)
        assert longer["fits"]["kv_bytes"] == kv
        bf16_16 = next(c for r in longer["fits"]["rows"] if r["memory_gb"] == 16 for c in r["cells"]
                       if c["precision"] == "bf16")
        assert bf16_16["total"] == 2 * 8_030_261_248 + kv and bf16_16["fits"] is fits_16


def test_mha_when_the_config_has_no_kv_heads():
    arch, doc = estimate(LLAMA2_7B)
    assert arch.fields["kv_heads"].source.startswith("default: = attention heads")
    assert doc["kv_cache"]["kind"] == "MHA"
    assert per_token(doc)["bytes"] == 32 * 32 * 128 * 2 * 2 == 512 << 10


def test_gqa_with_sliding_window_switched_off():
    arch, doc = estimate(QWEN25_7B)
    assert arch.fields["sliding_window"].value is None
    assert arch.fields["sliding_window"].source == "config.json: use_sliding_window false"
    assert per_token(doc)["bytes"] == 28 * 4 * 128 * 2 * 2 == 57_344
    assert at(doc, 32768)["bytes"] == 57_344 * 32768


def test_sliding_window_on_every_layer_caps_the_cache():
    arch, doc = estimate(MISTRAL_7B_V01)
    assert arch.get("sliding_layers") == list(range(32))
    assert at(doc, 4096)["bytes"] == at(doc, 32768)["bytes"] == 32 * 4096 * 4096
    assert "min(32,768, window 4,096)" in at(doc, 32768)["formula"]


def test_gemma2_alternates_sliding_and_global_layers():
    arch, doc = estimate(GEMMA2_9B)
    assert arch.get("sliding_layers") == list(range(0, 42, 2))
    assert "gemma2 default" in arch.fields["sliding_layers"].source
    row = 8 * 256 * 2 * 2   # per layer per token
    assert per_token(doc)["bytes"] == 42 * row
    assert at(doc, 8192)["bytes"] == 21 * row * 8192 + 21 * row * 4096 == 2_113_929_216


def test_gemma3_five_sliding_layers_to_one_global():
    arch, doc = estimate(GEMMA3_1B)
    assert arch.get("sliding_layers") == [i for i in range(26) if (i + 1) % 6]
    assert len(arch.get("sliding_layers")) == 22
    assert at(doc, 32768)["bytes"] == 22 * 1024 * 512 + 4 * 1024 * 32768 == 145_752_064


def test_mla_caches_the_compressed_latent():
    arch, doc = estimate(DEEPSEEK_V2_LITE)
    assert doc["kv_cache"]["kind"] == "MLA"
    # 27 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes
    assert per_token(doc)["bytes"] == 27 * (512 + 64) * 2 == 31_104
    assert "kv_lora_rank 512 + qk_rope_head_dim 64" in per_token(doc)["formula"]
    assert per_token(doc, "q8_0")["bytes"] == 27 * (576 // 32) * 34
    assert doc["kv_cache"]["max_context"] == 163840
    assert at(doc, 163840)["bytes"] == 31_104 * 163840
    assert arch.get("experts") == 64 and arch.get("experts_per_token") == 6
    assert arch.get("shared_experts") == 2


def cache_bytes(model, tokens: int) -> int:
    with torch.no_grad():
        out = model(torch.arange(tokens)[None], use_cache=True)
    return sum(t.numel() * t.element_size() for layer in out.past_key_values.layers
               for t in (layer.keys, layer.values))


def test_kv_cache_matches_what_transformers_allocates():
    """A tiny Llama (GQA) and Gemma-2 (sliding/global) in f16: the estimate is the bytes of
    transformers' DynamicCache. Sliding layers: transformers keeps window - 1 past tokens, llama.cpp
    (and we) count the whole window, so we are one token per sliding layer above it."""
    from transformers import Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    llama = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=100, max_position_embeddings=256)
    _, doc = estimate(llama.to_dict(), context=20)
    assert cache_bytes(LlamaForCausalLM(llama).to(torch.float16).eval(), 20) == at(doc, 20)["bytes"]
    gemma = Gemma2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, vocab_size=100, max_position_embeddings=256,
                         sliding_window=8)
    arch, doc = estimate(gemma.to_dict(), context=20)
    assert arch.fields["sliding_layers"].source == "config.json: layer_types"
    row = 2 * 16 * 2 * 2
    measured = cache_bytes(Gemma2ForCausalLM(gemma).to(torch.float16).eval(), 20)
    assert at(doc, 20)["bytes"] == 2 * row * 20 + 2 * row * 8 == measured + 2 * row


@pytest.mark.parametrize("name", ["gguf_llama", "gguf_moe"])
def test_gguf_weights_are_the_sum_of_the_tensor_bytes(gguf_paths, name):
    path = gguf_paths[name]
    oracle = GGUFReader(path)
    ckpt = tensorloupe.open(path)
    arch = architecture.summarize(ckpt)
    doc = memory.estimate(arch)
    stored = doc["weights"][0]
    assert stored["precision"] == "stored"
    assert stored["bytes"] == sum(int(t.n_bytes) for t in oracle.tensors)
    params = sum(int(t.n_elements) for t in oracle.tensors)
    assert arch.parameters.total == params
    assert next(w for w in doc["weights"] if w["precision"] == "bf16")["bytes"] == 2 * params
    # and the per-token cache from the GGUF keys: block_count x head_count_kv x (embedding / heads) x 2 x 2
    fields = {f.name: f.parts[-1][0] for f in oracle.fields.values() if f.name.startswith("llama.")}
    expected = (fields["llama.block_count"] * fields["llama.attention.head_count_kv"]
                * fields["llama.embedding_length"] // fields["llama.attention.head_count"] * 2 * 2)
    assert per_token(doc)["bytes"] == expected
    assert doc["kv_cache"]["max_context"] == fields["llama.context_length"] == 2048


def test_unknown_attention_shape_says_why():
    _, doc = estimate({"num_hidden_layers": 4})
    assert doc["kv_cache"]["available"] is False
    assert doc["kv_cache"]["reason"] == "the attention shape (KV heads, head dim) is unknown"
    assert doc["fits"]["kv_included"] is False


GPT_OSS_20B = {"model_type": "gpt_oss", "num_hidden_layers": 24, "hidden_size": 2880,
               "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
               "sliding_window": 128, "num_local_experts": 32, "experts_per_token": 4,
               "layer_types": ["sliding_attention", "full_attention"] * 12,
               "max_position_embeddings": 131072}


def test_gpt_oss_layer_types_and_experts_per_token():
    arch, doc = estimate(GPT_OSS_20B)
    assert arch.fields["experts_per_token"] == (4, "config.json: experts_per_token")
    assert arch.get("sliding_layers") == list(range(0, 24, 2))
    row = 8 * 64 * 2 * 2
    assert at(doc, 131072)["bytes"] == 12 * row * 131072 + 12 * row * 128
