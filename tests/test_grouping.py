"""The CLI and the page group one folder into the same checkpoints (opening/grouping.py is the
one rule): a TorchScript `.jit`, a plain `.pkl`, a safetensors shard set with its index and a
`config.json` beside them. Before the rule existed the CLI found the `.jit` but not the `.pkl`
and the page the reverse."""

import json
import pickle

from tensorloupe.cli import main
from tensorloupe.web import dispatch

import shard_files
import torch_files


def page_entries(folder):
    files = [{"rel": f"{folder.name}/{p.name}", "path": str(p), "size": p.stat().st_size,
              "folder": True} for p in sorted(folder.iterdir())]
    reply = json.loads(dispatch("group", json.dumps({"files": files}))[0])
    assert reply["ok"], reply
    return reply["result"]["entries"]


def cli_error(folder, capsys):
    assert main(["inspect", str(folder)]) == 2
    return capsys.readouterr().err


def test_one_folder_is_the_same_checkpoints_for_the_cli_and_the_page(tmp_path, capsys):
    folder = tmp_path / "run"
    shard_files.write_sharded_moe(folder)
    torch_files.write_torchscript(folder / "traced.jit")
    (folder / "notes.pkl").write_bytes(pickle.dumps({"lr": 0.1}, protocol=2))
    (folder / "README.md").write_text("not a checkpoint")
    assert (folder / "config.json").exists() and any(folder.glob("*.safetensors.index.json"))

    entries = page_entries(folder)
    names = [e["name"] for e in entries]
    assert sorted(names) == ["model-*-of-00003.safetensors", "notes.pkl", "traced.jit"], names
    assert {e["kind"] for e in entries if e["name"].startswith("model-")} == {"set"}
    err = cli_error(folder, capsys)
    assert "several checkpoints" in err
    for name in names:         # the CLI names exactly the page's entries
        assert name in err, (name, err)
    assert "README.md" not in err and "config.json" not in err


def test_a_folder_holding_only_a_pickle_or_only_a_jit_opens_in_both(tmp_path, capsys):
    for name, write in (("state.pkl", lambda p: p.write_bytes(pickle.dumps({"step": 3}, protocol=2))),
                        ("traced.jit", torch_files.write_torchscript)):
        folder = tmp_path / name.replace(".", "-")
        folder.mkdir()
        write(folder / name)
        (folder / "README.md").write_text("x")
        assert [e["name"] for e in page_entries(folder)] == [name]
        assert main(["inspect", str(folder), "--json"]) in (0, 4)   # 4: a verdict, not a refusal
        assert json.loads(capsys.readouterr().out)["file"] == name


def test_a_folder_of_many_models_gets_a_short_message(tmp_path, capsys):
    folder = tmp_path / "zoo"
    folder.mkdir()
    for i in range(2000):
        (folder / f"model{i:04d}.gguf").write_bytes(b"GGUF")
    err = cli_error(folder, capsys)
    assert "several checkpoints" in err and "model0000.gguf" in err
    assert "and 1,990 more" in err and len(err) < 1000
