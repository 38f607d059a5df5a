"""The worker's "Save as safetensors…" handlers in CPython: for every choice the page offers
(dtype, Hugging Face names, a regex, a prune, a shard set), the chunks, joined file by file, are
the files `tensorloupe convert|extract|prune` writes for the same options, byte for byte;
safetensors reads them back as the source's tensors; each chunk is bounded; a tensor whose read
fails makes the page start again without it, giving the file `convert` writes for that failure;
a dangerous pickle needs the page's confirmation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load, save_file

from tensorloupe.cli import main
from tensorloupe.errors import UsageError
from tensorloupe.source.base import FileSource
from tensorloupe.web import save_ops
from tensorloupe.web.handlers import Session

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "out"


def call(session: Session, op: str, **args):
    result, buffers = session.handle(op, json.loads(json.dumps(args)))
    json.dumps(result, allow_nan=False)
    return result, buffers


def saved(session: Session, **args) -> tuple[dict, dict[str, bytes], int]:
    """The plan, each file's bytes by name, and the biggest chunk; a restart (a failed read) is
    followed as the page follows it: save_begin again with retry."""
    plan, _ = call(session, "save_begin", **args)
    parts, biggest = [bytearray() for _ in plan["files"]], 0
    while True:
        result, buffers = call(session, "save_chunk")
        if result.get("restart"):
            return saved(session, **{**args, "retry": True})
        parts[result["file"]] += buffers[0]
        biggest = max(biggest, len(buffers[0]))
        if result["finished"]:
            break
    assert sum(map(len, parts)) == plan["size"] == result["done"]
    assert [len(p) for p in parts] == [f["size"] for f in plan["files"]]
    return plan, {f["name"]: bytes(p) for f, p in zip(plan["files"], parts)}, biggest


def opened(path) -> Session:
    s = Session()
    call(s, "open", path=str(path))
    return s


def test_the_saved_bytes_are_the_converted_file(tmp_path, monkeypatch):
    monkeypatch.setattr(save_ops, "SAVE_CHUNK_BYTES", 1 << 16)
    tensors = {"a": torch.randn(300, 200), "b": torch.arange(10, dtype=torch.int64),
               "c": torch.randn(7).to(torch.bfloat16)}
    src = tmp_path / "m.pt"
    torch.save({**tensors, "epoch": 4}, src)
    s = opened(src)
    plan, files, biggest = saved(s)
    assert list(files) == ["m.safetensors"] and plan["tensors"] == 3 and plan["skipped"] == []
    data = files["m.safetensors"]
    assert biggest <= (1 << 16) + (16 << 20) and biggest < len(data)
    got = load(data)
    for name, want in tensors.items():
        assert got[name].dtype == want.dtype and torch.equal(got[name], want)
    assert main(["convert", str(src), str(tmp_path / "m.safetensors")]) == 0
    assert data == (tmp_path / "m.safetensors").read_bytes()     # the same writer, the same bytes
    with pytest.raises(UsageError, match="no save is in progress"):
        call(s, "save_chunk")


@pytest.mark.parametrize("page, cli", [
    ({"dtype": "F16"}, ["convert", "--dtype", "F16"]),
    ({"match": r"blk\.0\.", "dtype": "BF16"}, ["extract", "--match", r"blk\.0\.", "--dtype", "BF16"]),
    ({"hf_names": True}, ["convert", "--hf-names"]),
], ids=["dtype", "regex", "hf-names"])
def test_each_option_writes_the_bytes_the_cli_writes(tmp_path, page, cli):
    src = OUT / "tiny-llama.gguf"
    _, files, _ = saved(opened(src), **page)
    out = tmp_path / "cli.safetensors"
    assert main([cli[0], str(src), str(out), *cli[1:]]) == 0
    assert files["tiny-llama.safetensors"] == out.read_bytes()


def test_a_shard_set_into_a_folder_is_the_cli_s_shard_set(tmp_path):
    src = OUT / "tiny-llama.gguf"
    plan, files, _ = saved(opened(src), folder=True, shard_size="40KB")
    assert main(["convert", str(src), str(tmp_path / "set"), "--max-shard-size", "40KB"]) == 0
    written = {p.name: p.read_bytes() for p in (tmp_path / "set").iterdir()}
    assert len(files) > 2 and "model.safetensors.index.json" in files
    assert files == written
    # without a folder (a browser with no directory picker) the shard size is not taken: one file
    plan, files, _ = saved(opened(src), shard_size="40KB")
    assert list(files) == ["tiny-llama.safetensors"]


def test_a_prune_writes_the_cli_s_weights(tmp_path):
    src = OUT / "demo-moe.safetensors"
    plan, files, _ = saved(opened(src), drop="0:1,0:2", folder=True)
    assert main(["prune", str(src), str(tmp_path / "cli"), "--drop-experts", "0:1,0:2"]) == 0
    assert files["model.safetensors"] == (tmp_path / "cli" / "model.safetensors").read_bytes()
    assert plan["dropped"] == {"0": [1, 2]}
    with pytest.raises(UsageError, match="no expert analysis has finished"):
        call(opened(src), "save_begin", drop="recommended")


def test_the_experts_recommendation_fills_the_drops_prune_recommended_takes(tmp_path):
    from tensorloupe.moe.redundancy import analyse
    src = OUT / "demo-moe.safetensors"
    s = opened(src)
    with pytest.raises(UsageError, match="no expert analysis has finished"):
        call(s, "save_recommended")
    s.analysis = analyse(s.current())            # what the Experts tab's job leaves (moe_ops)
    drop = call(s, "save_recommended", threshold=0.9)[0]["drop"]
    assert drop == ",".join(f"{layer}:{e}" for layer in range(4) for e in (4, 5, 6, 7))   # the noisy copies
    _, files, _ = saved(s, drop=drop, folder=True)
    assert main(["prune", str(src), str(tmp_path / "cli"), "--recommended"]) == 0
    assert files["model.safetensors"] == (tmp_path / "cli" / "model.safetensors").read_bytes()


def test_a_failed_read_starts_again_without_the_tensor_as_convert_skips_it(tmp_path, monkeypatch):
    g = torch.Generator().manual_seed(3)
    src = tmp_path / "src.safetensors"
    save_file({"a.first": torch.randn(256, 512, generator=g), "b.broken": torch.randn(256, 512, generator=g),
               "c.last": torch.randn(9, generator=g)}, str(src))   # in this order in the file
    with open(src, "rb") as f:
        start = 8 + int.from_bytes(f.read(8), "little")
        lo, hi = (start + o for o in json.loads(f.read(start - 8))["b.broken"]["data_offsets"])
    real = FileSource._read

    def _read(self, offset, n):   # the tensor's bytes end short: the source's TruncatedError
        data = real(self, offset, n)
        return data[:max(0, lo - offset) + 10] if offset < hi and offset + n > lo else data
    monkeypatch.setattr(FileSource, "_read", _read)
    plan, files, _ = saved(opened(src))
    assert [s["name"] for s in plan["skipped"]] == ["b.broken"]
    assert "could not be read" in plan["skipped"][0]["why"]
    assert main(["convert", str(src), str(tmp_path / "cli.safetensors")]) == 0
    assert files["src-saved.safetensors"] == (tmp_path / "cli.safetensors").read_bytes()
    assert sorted(load(files["src-saved.safetensors"])) == ["a.first", "c.last"]


def test_a_save_whose_every_read_fails_says_so(tmp_path, monkeypatch):
    from tensorloupe.errors import UnsupportedError
    src = tmp_path / "src.safetensors"
    save_file({"a": torch.randn(256, 512), "b": torch.randn(256, 512)}, str(src))
    s = opened(src)
    monkeypatch.setattr(FileSource, "_read", lambda self, offset, n: b"")   # every read comes back empty
    with pytest.raises(UnsupportedError, match="no tensor could be written"):
        saved(s)


def test_a_dangerous_file_is_saved_only_when_confirmed_and_a_save_can_end(tmp_path):
    import torch_files
    src = torch_files.save(torch_files.hostile_object(), tmp_path / "evil.pt")
    s = opened(src)
    with pytest.raises(UsageError, match="saved only when you confirm"):
        call(s, "save_begin")
    plan, files, _ = saved(s, allow_dangerous=True)
    assert list(load(files["evil.safetensors"])) == ["weight"]
    call(s, "save_begin", allow_dangerous=True)
    assert call(s, "save_end")[0] == {"ended": True}
    with pytest.raises(UsageError, match="no save is in progress"):
        call(s, "save_chunk")
