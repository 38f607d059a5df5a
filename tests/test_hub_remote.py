"""`org/model[@rev]` that is not in the local Hugging Face cache is read from the Hub by HTTP Range,
as the page's Hub shortcut reads it (issue 27): here from a local server that imitates the Hub's
/resolve/<rev>/ URLs, its 302 to a CDN for weight files and its 404s (tests/hub_server.py),
named by huggingface_hub's own HF_ENDPOINT. HF_HUB_OFFLINE=1 keeps the cache-only answer."""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import tensorloupe
from hub_server import serve_hub
from tensorloupe.cli import main

SHARDED, SINGLE = "tiny-org/remote-sharded", "tiny-org/remote-single"
CONFIG = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 32}


def sharded_model(folder):
    rng = np.random.default_rng(7)
    shards = {
        "model-00001-of-00002.safetensors": {
            "model.embed_tokens.weight": rng.standard_normal((32, 8)).astype(np.float32)},
        "model-00002-of-00002.safetensors": {
            "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((8, 8)).astype(np.float32),
            "model.norm.weight": np.ones(8, np.float32)},
    }
    folder.mkdir()
    weight_map = {}
    for name, tensors in shards.items():
        save_file(tensors, str(folder / name))
        weight_map.update({t: name for t in tensors})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(CONFIG))
    return {t: v for tensors in shards.values() for t, v in tensors.items()}


@pytest.fixture
def hubs(tmp_path, monkeypatch):
    """Two Hubs (one model each: a shard set with its index and config.json, and a single file),
    an empty cache, and HF_ENDPOINT naming the first."""
    weights = sharded_model(tmp_path / "sharded")
    (tmp_path / "single").mkdir()
    save_file({"w": np.arange(6, dtype=np.float32)}, str(tmp_path / "single" / "model.safetensors"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)   # no folder here is named like the models
    with serve_hub(tmp_path / "sharded", SHARDED) as (base, log), \
            serve_hub(tmp_path / "single", SINGLE) as (single_base, single_log):
        monkeypatch.setenv("HF_ENDPOINT", base)
        yield {"base": base, "log": log, "weights": weights, "single": single_base,
               "single_log": single_log}


def test_a_model_not_in_the_cache_is_read_from_the_hub_by_range(hubs, capsys):
    code = main(["inspect", SHARDED, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert sorted(t["name"] for t in doc["tensors"]) == sorted(hubs["weights"])
    assert doc["extras"]["hub_remote"] == {
        "repo": SHARDED, "revision": "main", "endpoint": hubs["base"],
        "files": [f"{hubs['base']}/{SHARDED}/resolve/main/model.safetensors.index.json"]}
    # the config.json beside the index, on the Hub, gave the architecture
    assert any("config.json" in s for s in doc["architecture"]["sources"])
    assert "hub_cache" not in doc["extras"]
    # every request for a weight file was a range (the Hub's 302 to its CDN followed), never
    # the whole file
    weight_requests = [(m, p, r) for m, p, r in hubs["log"] if p.endswith(".safetensors")]
    assert weight_requests and all(r and r.startswith("bytes=") for _, _, r in weight_requests)


def test_the_text_report_says_it_came_from_the_hub(hubs, capsys):
    code = main(["inspect", SHARDED])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (f"  from        the Hub by HTTP Range (not in the Hugging Face cache): "
            f"{SHARDED}@main, {hubs['base']}") in out


def test_values_from_the_hub_equal_safetensors(hubs, tmp_path):
    ckpt = tensorloupe.open(SHARDED)
    try:
        reference = load_file(str(tmp_path / "sharded" / "model-00002-of-00002.safetensors"))
        for name, value in reference.items():
            assert tensorloupe.values(ckpt.tensor(name), 0, value.size) == value.ravel().tolist()
        assert ckpt.warnings[0].startswith(f"opened {SHARDED}@main from the Hub ({hubs['base']}) "
                                           "by HTTP Range requests")
    finally:
        ckpt.close()


def test_a_single_file_model_and_a_missing_one(hubs, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", hubs["single"])
    ckpt = tensorloupe.open(SINGLE)
    assert [t.name for t in ckpt.tensors] == ["w"]
    assert tensorloupe.values(ckpt.tensor("w"), 0, 6) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    ckpt.close()
    code = main(["inspect", "tiny-org/not-there"])
    err = capsys.readouterr().err
    assert code == 3
    assert "tiny-org/not-there is not in the Hugging Face cache" in err
    assert f"and the Hub ({hubs['single']}) has neither model.safetensors.index.json nor " \
           "model.safetensors for tiny-org/not-there@main" in err
    assert "Traceback" not in err


def test_offline_keeps_the_cache_only_answer_and_asks_nothing(hubs, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(hubs["log"])
    code = main(["inspect", SHARDED])
    err = capsys.readouterr().err
    assert code == 3 and "HF_HUB_OFFLINE is set, so the Hub is not asked" in err
    assert len(hubs["log"]) == before


def test_an_unreachable_hub_says_both_facts_in_one_line(hubs, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")   # the discard port: nothing listens
    code = main(["inspect", SHARDED])
    err = capsys.readouterr().err
    assert code == 3 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{SHARDED} is not in the Hugging Face cache" in err
    assert "asking the Hub (http://127.0.0.1:9) failed: " in err
