"""`org/model[@rev]` opened from the local Hugging Face cache, without the network (issue 27).

The cache is built by hand as huggingface_hub lays it out: models--org--model/refs/<rev> holding
a commit hash, snapshots/<hash>/ with symlinks into blobs/ (named by the file's sha256)."""

import hashlib
import json
import os
import socket

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.opening import hubcache

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD = "fedcba9876543210fedcba9876543210fedcba98"


def add_file(model, commit, name, data: bytes):
    blob = model / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    link = model / "snapshots" / commit / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))


def build_cache(root, tmp_path):
    model = root / "models--tiny-org--tiny-model"
    rng = np.random.default_rng(0)
    weights = {"model.embed_tokens.weight": rng.standard_normal((16, 8)).astype(np.float32),
               "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((8, 8)).astype(np.float32)}
    save_file(weights, str(tmp_path / "w.safetensors"))
    add_file(model, COMMIT, "model.safetensors", (tmp_path / "w.safetensors").read_bytes())
    add_file(model, COMMIT, "config.json", json.dumps(
        {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1}).encode())
    # an older revision, tagged v1, with one tensor only
    save_file({"old.weight": np.ones(3, np.float32)}, str(tmp_path / "old.safetensors"))
    add_file(model, OLD, "model.safetensors", (tmp_path / "old.safetensors").read_bytes())
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text(COMMIT)
    (model / "refs" / "v1").write_text(OLD)
    return weights


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "hub"
    weights = build_cache(root, tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.chdir(tmp_path)   # "tiny-org/tiny-model" is no folder here

    def no_network(*args, **kwargs):
        raise AssertionError("the network was used")
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")   # what is not cached is not looked for on the Hub
    return root, weights


def test_api_opens_the_cached_snapshot(cache):
    root, weights = cache
    ckpt = tensorloupe.open("tiny-org/tiny-model")
    assert sorted(t.name for t in ckpt.tensors) == sorted(weights)
    reference = load_file(str(root / "models--tiny-org--tiny-model" / "snapshots" / COMMIT /
                              "model.safetensors"))
    for name, value in reference.items():
        assert tensorloupe.values(ckpt.tensor(name), 0, value.size) == value.ravel().tolist()
    folder = str(root / "models--tiny-org--tiny-model" / "snapshots" / COMMIT)
    assert ckpt.extras["hub_cache"] == {"repo": "tiny-org/tiny-model", "revision": "main",
                                        "commit": COMMIT, "folder": folder}
    assert ckpt.warnings[0] == (f"opened tiny-org/tiny-model@main from the Hugging Face cache, "
                                f"commit {COMMIT[:12]}, {folder}")


def test_a_revision_by_tag_and_by_commit(cache):
    assert [t.name for t in tensorloupe.open("tiny-org/tiny-model@v1").tensors] == ["old.weight"]
    assert [t.name for t in tensorloupe.open(f"tiny-org/tiny-model@{OLD}").tensors] == ["old.weight"]


def test_cli_inspect_says_where_the_model_came_from(cache, capsys):
    root, _ = cache
    code = main(["inspect", "tiny-org/tiny-model"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (f"  from        the Hugging Face cache: tiny-org/tiny-model@main, commit "
            f"{COMMIT[:12]}, {root}/models--tiny-org--tiny-model/snapshots/{COMMIT}") in out
    assert "format      safetensors" in out and "tensors     2" in out
    assert "config.json" in out   # the config beside the model in the snapshot is used
    code = main(["inspect", "tiny-org/tiny-model@v1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["extras"]["hub_cache"]["commit"] == OLD


def test_hf_home_and_the_default_path(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    assert hubcache.cache_dir({"HF_HOME": "/x/hf"}) == "/x/hf/hub"
    assert hubcache.cache_dir({"HF_HUB_CACHE": "/c", "HF_HOME": "/x"}) == "/c"
    assert hubcache.cache_dir({}) == os.path.expanduser("~/.cache/huggingface/hub")
    build_cache(tmp_path / "home" / "hub", tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert len(tensorloupe.open("tiny-org/tiny-model").tensors) == 2


def test_a_missing_model_says_it_is_not_in_the_cache_and_where_it_looked(cache, capsys):
    # offline (the fixture sets huggingface_hub's HF_HUB_OFFLINE): the cache's answer stands
    # (online, the Hub is asked: tests/test_hub_remote.py)
    root, _ = cache
    code = main(["inspect", "other-org/absent"])
    err = capsys.readouterr().err
    assert code == 3   # as for a path that does not exist (the README's "cannot be read")
    assert f"other-org/absent is not in the Hugging Face cache (looked for " \
           f"{root}/models--other-org--absent" in err and "is no file or folder here" in err
    assert "HF_HUB_OFFLINE is set, so the Hub is not asked" in err
    code = main(["inspect", "tiny-org/tiny-model@v9"])
    err = capsys.readouterr().err
    assert code == 3 and "revision 'v9' of tiny-org/tiny-model is not in the Hugging Face " \
        "cache" in err and "cached refs: main, v1" in err
    with pytest.raises(tensorloupe.TensorloupeError, match="is not in the Hugging Face cache"):
        tensorloupe.open("other-org/absent")


def test_a_revision_cannot_leave_refs(cache):
    root, _ = cache
    (root / "outside").write_text(COMMIT)
    with pytest.raises(tensorloupe.TensorloupeError, match="revision '../../outside'"):
        tensorloupe.open("tiny-org/tiny-model@../../outside")


def test_a_local_folder_or_a_missing_file_is_not_a_hub_name(cache, tmp_path, capsys):
    local = tmp_path / "tiny-org" / "tiny-model"
    local.mkdir(parents=True)
    save_file({"local.weight": np.ones(2, np.float32)}, str(local / "model.safetensors"))
    assert [t.name for t in tensorloupe.open("tiny-org/tiny-model").tensors] == ["local.weight"]
    code = main(["inspect", "tiny-org/missing.safetensors"])
    assert code == 3 and "cannot open the file" in capsys.readouterr().err
