"""What a converted file carries besides tensors: a torch checkpoint's non-tensor entries as JSON
(equal to what torch.load(weights_only=True) gives for them), bounded; the sha256 of the source's
header; and the tensors that could not be written, skipped with their reason (or, with --strict,
nothing written)."""

import hashlib
import json
import math
import struct
from pathlib import Path

import torch
from safetensors import safe_open

import torch_files

import tensorloupe
from tensorloupe.cli import EXIT_INVALID, EXIT_OK, main
from tensorloupe.errors import UnsupportedError

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures" / "out"


def metadata(path: Path) -> tuple[list[str], dict]:
    with safe_open(str(path), "pt") as f:
        return list(f.keys()), f.metadata()


def test_a_lightning_checkpoint_keeps_its_training_entries_as_json(tmp_path, capsys):
    src = OUT / "lightning.ckpt"
    out = tmp_path / "m.safetensors"
    assert main(["convert", str(src), str(out)]) == EXIT_OK
    said = capsys.readouterr().out
    assert "entry 'epoch': not a tensor, written as JSON in __metadata__ torch_entries" in said
    _, meta = metadata(out)
    entries = json.loads(meta["torch_entries"])
    ref = torch.load(src, weights_only=True)
    for key in ("epoch", "global_step", "pytorch-lightning_version", "hyper_parameters",
                "lr_schedulers", "hparams_name"):
        assert entries[key] == json.loads(json.dumps(ref[key])), key   # JSON has no tuples
    # a tensor inside an entry is its descriptor, never its values
    best = entries["callbacks"]["ModelCheckpoint{'monitor': 'val_loss'}"]["best_model_score"]
    assert best == {"tensor": "callbacks.ModelCheckpoint{'monitor': 'val_loss'}.best_model_score",
                    "dtype": "float32", "shape": []}
    assert entries["state_dict"] == {"tensors": 6, "tree": "state_dict.model."}   # where they went
    assert "header_sha256" not in meta     # a torch zip states no header length


def test_entries_are_bounded_and_a_too_long_one_is_named(tmp_path, capsys):
    # the torch reader already cuts each string and container (jsonable.PICKLED); what is
    # left of this one still passes the 64 KiB an entry may take
    notes = {f"k{i}": [f"{j}" + "y" * 300 for j in range(60)] for i in range(40)}
    src = torch_files.save({"w": torch.ones(2), "step": 7, "lr": math.nan, "notes": notes},
                           tmp_path / "m.pt")
    out = tmp_path / "m.safetensors"
    assert main(["convert", str(src), str(out)]) == EXIT_OK
    assert "entry 'notes': not a tensor, too long for __metadata__: not written" in capsys.readouterr().out
    _, meta = metadata(out)
    assert json.loads(meta["torch_entries"]) == {"step": 7, "lr": "nan"}
    assert json.loads(meta["torch_entries_left_out"].split(" (")[0]) == ["notes"]


def test_the_header_sha256_is_of_the_sources_header_bytes(tmp_path):
    for src, length in ((OUT / "small.safetensors", None), (OUT / "tiny-llama.gguf", "gguf")):
        data = src.read_bytes()
        if length is None:
            n = 8 + struct.unpack("<Q", data[:8])[0]
        else:
            import gguf
            n = gguf.GGUFReader(src).data_offset
        out = tmp_path / f"{src.stem}.safetensors"
        assert main(["convert", str(src), str(out)]) == EXIT_OK
        _, meta = metadata(out)
        assert meta["header_sha256"] == f"{hashlib.sha256(data[:n]).hexdigest()} " \
                                        f"(the source's first {n:,} bytes: its header)"
        assert tensorloupe.__version__ in meta["converted_by"]


def test_a_tensor_that_cannot_be_written_is_skipped_with_its_reason(tmp_path, capsys):
    src = torch_files.save({"w": torch.arange(3.0), "z": torch.zeros(2, dtype=torch.complex128)},
                           tmp_path / "m.pt")
    out = tmp_path / "m.safetensors"
    assert main(["convert", str(src), str(out)]) == EXIT_OK
    why = "tensor 'z' has dtype C128, which safetensors cannot hold"
    assert f"tensor 'z' skipped: {why}" in capsys.readouterr().out
    names, meta = metadata(out)
    assert names == ["w"] and json.loads(meta["skipped"].split(" (tensors")[0]) == {"z": why}
    # --strict: nothing is written
    out.unlink()
    assert main(["convert", str(src), str(out), "--strict"]) == EXIT_INVALID
    assert why in capsys.readouterr().err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]
    # the API refuses unless asked to skip
    try:
        tensorloupe.write_safetensors(src, out)
        raise AssertionError("written")
    except UnsupportedError as e:
        assert why in str(e)
    tensorloupe.write_safetensors(src, out, strict=False)
    assert metadata(out)[0] == ["w"]
