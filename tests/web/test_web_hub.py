"""The Hub shortcut's parsing, in CPython: what `org/model[@rev]` and Hub page/blob/tree/resolve
URLs become (the Hub's /resolve/<rev>/ file URLs), and what is left as an ordinary URL."""

import json

import pytest

from tensorloupe.opening.hubfiles import parse, plan, shard_urls

HUB = "https://huggingface.co"


@pytest.mark.parametrize("text, repo, revision, file", [
    ("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M", "main", None),
    (" org/model@v1.0 ", "org/model", "v1.0", None),
    ("https://huggingface.co/org/model", "org/model", "main", None),
    ("https://huggingface.co/org/model/tree/dev", "org/model", "dev", None),
    ("https://huggingface.co/org/model/blob/main/model.safetensors", "org/model", "main", "model.safetensors"),
    ("https://hf.co/org/model/resolve/abc123/sub/w.gguf?download=true", "org/model", "abc123", "sub/w.gguf"),
])
def test_hub_names_and_urls(text, repo, revision, file):
    model = parse(text, HUB)
    assert (model.repo, model.revision, model.file) == (repo, revision, file)


@pytest.mark.parametrize("text", ["files/model.safetensors", "https://example.com/org/model",
                                  "http://127.0.0.1:8000/files/model.safetensors", "model.safetensors",
                                  "https://huggingface.co/datasets/org/data", "not a url"])
def test_ordinary_urls_and_paths_are_not_hub_models(text):
    assert parse(text, HUB) is None


def test_plan_tries_the_index_then_the_single_file_and_finds_config():
    p = plan("org/model@refs/pr/1", "http://127.0.0.1:9/")
    base = "http://127.0.0.1:9/org/model/resolve/refs%2Fpr%2F1/"
    assert p == {"repo": "org/model", "revision": "refs/pr/1", "index": base + "model.safetensors.index.json",
                 "single": base + "model.safetensors", "config": base + "config.json"}
    p = plan("https://huggingface.co/org/model/blob/main/gguf/m-Q4_0.gguf")
    assert p["index"] is None and p["single"].endswith("/resolve/main/gguf/m-Q4_0.gguf")
    assert p["config"].endswith("/resolve/main/gguf/config.json")


def test_shard_urls_beside_the_index():
    index = "https://huggingface.co/org/model/resolve/main/model.safetensors.index.json"
    text = json.dumps({"weight_map": {"a": "model-00002-of-00002.safetensors",
                                      "b": "model-00001-of-00002.safetensors"}})
    assert shard_urls(index, text) == [
        "https://huggingface.co/org/model/resolve/main/model-00001-of-00002.safetensors",
        "https://huggingface.co/org/model/resolve/main/model-00002-of-00002.safetensors"]
