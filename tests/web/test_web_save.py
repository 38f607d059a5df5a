"""The worker's "Save as safetensors…" handlers in CPython: the chunks, joined, are the file
`tensorloupe convert` writes (byte for byte), safetensors reads them back as the source's
tensors, and each chunk is bounded; a dangerous pickle needs the page's confirmation."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load

from tensorloupe.cli import main
from tensorloupe.errors import UsageError
from tensorloupe.web import save_ops
from tensorloupe.web.handlers import Session


def call(session: Session, op: str, **args):
    result, buffers = session.handle(op, json.loads(json.dumps(args)))
    json.dumps(result, allow_nan=False)
    return result, buffers


def saved(session: Session, **args) -> tuple[dict, bytes, int]:
    plan, buffers = call(session, "save_begin", **args)
    parts, biggest = [bytes(buffers[0])], 0
    while True:
        result, buffers = call(session, "save_chunk")
        parts.append(bytes(buffers[0]))
        biggest = max(biggest, len(buffers[0]))
        if result["finished"]:
            break
    data = b"".join(parts)
    assert len(data) == plan["size"] == result["done"]
    return plan, data, biggest


def test_the_saved_bytes_are_the_converted_file(tmp_path, monkeypatch):
    monkeypatch.setattr(save_ops, "SAVE_CHUNK_BYTES", 1 << 16)
    tensors = {"a": torch.randn(300, 200), "b": torch.arange(10, dtype=torch.int64),
               "c": torch.randn(7).to(torch.bfloat16)}
    src = tmp_path / "m.pt"
    torch.save({**tensors, "epoch": 4}, src)
    s = Session()
    call(s, "open", path=str(src))
    plan, data, biggest = saved(s)
    assert plan["file"] == "m.safetensors" and plan["tensors"] == 3 and plan["skipped"] == []
    assert biggest <= (1 << 16) + (16 << 20) and biggest < len(data)
    got = load(data)
    for name, want in tensors.items():
        assert got[name].dtype == want.dtype and torch.equal(got[name], want)
    assert main(["convert", str(src), str(tmp_path / "m.safetensors")]) == 0
    assert data == (tmp_path / "m.safetensors").read_bytes()     # the same writer, the same bytes
    with pytest.raises(UsageError, match="no save is in progress"):
        call(s, "save_chunk")


def test_a_dangerous_file_is_saved_only_when_confirmed_and_a_save_can_end(tmp_path):
    import torch_files
    src = torch_files.save(torch_files.hostile_object(), tmp_path / "evil.pt")
    s = Session()
    call(s, "open", path=str(src))
    with pytest.raises(UsageError, match="saved only when you confirm"):
        call(s, "save_begin")
    plan, data, _ = saved(s, allow_dangerous=True)
    assert list(load(data)) == ["weight"]
    call(s, "save_begin", allow_dangerous=True)
    assert call(s, "save_end")[0] == {"ended": True}
    with pytest.raises(UsageError, match="no save is in progress"):
        call(s, "save_chunk")
