"""Encoder-decoder (Whisper, T5, BART) and encoder-only (BERT) models, built from transformers
configs and written by save_pretrained (fixtures/encdec_files.py). Oracles: the configs, the
live models' parameters() and buffers(), and the bytes of the EncoderDecoderCache transformers
fills when the decoder runs with use_cache."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import encdec_files

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    out = tmp_path_factory.mktemp("encdec")
    return {name.split("/")[1]: path.parent for name, path in encdec_files.write_all(out).items()}


@pytest.fixture(scope="module")
def docs(folders):
    """inspect --json --context 64 of each folder (config.json beside the model)."""
    out = {}
    for name, folder in folders.items():
        done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", "--json",
                               "--context", "64", str(folder)], capture_output=True, text=True,
                              env={"PYTHONPATH": str(ROOT / "pylib")})
        assert done.returncode == 0, done.stderr
        out[name] = json.loads(done.stdout)
    return out


def fields(doc) -> dict:
    return {f["key"]: f["value"] for f in doc["architecture"]["fields"]}


def at(doc, context, cache="f16"):
    return next(a for a in doc["memory"]["kv_cache"]["at"]
                if a["context"] == context and a["cache_type"] == cache)


@pytest.mark.parametrize("name", list(encdec_files.MODELS))
def test_one_parameter_total_the_live_model_s_with_buffers_beside_it(docs, name):
    model = encdec_files.build(name)
    params = docs[name]["architecture"]["parameters"]
    assert params["total"] == sum(p.numel() for p in model.parameters())
    stored_buffers = {"bart": 120}.get(name, 0)     # BART's final_logits_bias (a buffer)
    assert params["buffers"]["parameters"] == stored_buffers
    assert stored_buffers <= sum(b.numel() for b in model.buffers())


@pytest.mark.parametrize("name, expected", [
    ("whisper", dict(encoder_layers=2, decoder_layers=3, encoder_heads=4, decoder_heads=4,
                     encoder_intermediate_size=128, decoder_intermediate_size=96,
                     source_length=1500, context_length=448, head_dim=16)),
    ("t5", dict(encoder_layers=2, decoder_layers=3, encoder_heads=4, decoder_heads=4,
                encoder_intermediate_size=128, decoder_intermediate_size=128, head_dim=16)),
    ("bart", dict(encoder_layers=2, decoder_layers=2, encoder_heads=4, decoder_heads=2,
                  encoder_intermediate_size=128, decoder_intermediate_size=96, head_dim=32,
                  context_length=256))])
def test_both_stacks_are_in_the_architecture(docs, name, expected):
    got = fields(docs[name])
    config = encdec_files.build(name).config
    assert got["stacks"] == "encoder-decoder" and config.is_encoder_decoder
    assert {k: got.get(k) for k in expected} == expected
    assert "layers" not in got and "heads" not in got    # each stack says its own
    assert got["lm_head"] == "tied to the embeddings (not stored)"


def cache_bytes(name: str, target: int, source: int) -> int:
    """Bytes of the self- and cross-attention caches after the decoder reads `target` tokens
    of a `source`-token input (Whisper: the encoder's frames of 2 x source mel frames)."""
    model = encdec_files.build(name).to(torch.float16)
    decoder = torch.arange(target)[None] % 100 + 3
    with torch.no_grad():
        if name == "whisper":
            features = torch.zeros(1, model.config.num_mel_bins, 2 * source, dtype=torch.float16)
            out = model(input_features=features, decoder_input_ids=decoder, use_cache=True)
        else:
            out = model(input_ids=torch.arange(source)[None] % 100 + 3, decoder_input_ids=decoder,
                        use_cache=True)
    cache = out.past_key_values
    return sum(t.numel() * t.element_size()
               for part in (cache.self_attention_cache, cache.cross_attention_cache)
               for layer in part.layers for t in (layer.keys, layer.values))


@pytest.mark.parametrize("name", ["whisper", "t5", "bart"])
def test_the_decoder_s_kv_cache_is_what_transformers_allocates(docs, name):
    doc = docs[name]
    kv = doc["memory"]["kv_cache"]
    assert kv["kind"] == "encoder-decoder"
    source = 1500 if name == "whisper" else 64     # Whisper's encoder: 1,500 frames always
    assert at(doc, 64)["bytes"] == cache_bytes(name, 64, source)
    assert doc["memory"]["fits"]["kv_bytes"] == at(doc, 64)["bytes"]
    if name != "t5":   # learned positions: no context beyond the model's maximum
        assert max(kv["contexts"]) == kv["max_context"] == {"whisper": 448, "bart": 256}[name]


def test_an_encoder_only_model_has_no_kv_cache_and_no_lm_head(docs):
    doc = docs["bert"]
    got = fields(doc)
    assert got["stacks"] == "encoder-only" and got["lm_head"] == "no LM head"
    assert "tied_embeddings" not in got
    kv = doc["memory"]["kv_cache"]
    assert kv["available"] is False and kv["none"] is True and "encoder-only" in kv["reason"]
    assert max(kv["contexts"]) == kv["max_context"] == 512
    assert doc["memory"]["fits"]["kv_bytes"] == 0
    masked = fields(docs["bert-mlm"])
    assert masked["lm_head"] == "yes" and masked["tied_embeddings"] is True


def test_the_text_says_none_rather_than_cannot_be_estimated(folders):
    done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", str(folders["bert"])],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "pylib")})
    assert "  KV cache: none (an encoder-only model (bert) keeps no KV cache" in done.stdout
    assert "Fits? weights + no KV cache (encoder-only)" in done.stdout
