"""torch.distributed.checkpoint folders (fixtures/dcp_files.py, written by torch's dcp.save: one
process, and two gloo ranks sharding DTensors) opened as one checkpoint. Oracles: torch's own
FileSystemReader.read_metadata (every tensor, chunk, file and byte range), and
format_utils.dcp_to_torch_save (every element of every tensor and chunk)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.metadata import BytesStorageMetadata

import dcp_files

import tensorloupe
from tensorloupe.errors import FormatError
from tensorloupe.web.handlers import Session

ROOT = Path(__file__).resolve().parent.parent
DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
          torch.int32: "I32"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return dcp_files.write_all(tmp_path_factory.mktemp("dcp"))


@pytest.fixture(scope="module")
def saved(folders, tmp_path_factory):
    """dcp_to_torch_save's output of each folder: the full tensors and objects."""
    out = {}
    for key, folder in folders.items():
        path = tmp_path_factory.mktemp("torch-save") / "out.pt"
        dcp_to_torch_save(folder, path)
        out[key] = torch.load(path, weights_only=False)   # our own fixture
    return out


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "pylib")})


def flat(state: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in state.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


@pytest.mark.parametrize("key", ["dcp_single", "dcp_sharded"])
def test_every_tensor_and_chunk_is_where_torch_s_metadata_says(folders, key):
    folder = folders[key]
    want = FileSystemReader(str(folder)).read_metadata()
    ckpt = tensorloupe.open(str(folder))
    assert ckpt.format == "torch-dcp" and ckpt.warnings == []
    by_chunk = {(t.info["dcp"]["fqn"], tuple(t.info["dcp"]["offsets"])): t for t in ckpt.tensors}
    expected = 0
    for fqn, entry in want.state_dict_metadata.items():
        if isinstance(entry, BytesStorageMetadata):
            continue
        for chunk in entry.chunks:
            expected += 1
            t = by_chunk[(fqn, tuple(chunk.offsets))]
            assert t.shape == tuple(chunk.sizes) and t.info["dcp"]["shape"] == list(entry.size)
            assert t.dtype == DTYPES[entry.properties.dtype]
            place = next(v for k, v in want.storage_data.items()
                         if k.fqn == fqn and tuple(k.offset) == tuple(chunk.offsets))
            dcp = t.info["dcp"]
            assert (dcp["file"], dcp["item_offset"], dcp["item_length"]) == \
                (place.relative_path, place.offset, place.length)
            # the tensor's bytes lie inside its item's byte range of that file
            assert t.file == place.relative_path
            assert place.offset <= t.locate() and t.locate() + t.nbytes <= place.offset + place.length
    assert len(ckpt.tensors) == expected
    files = sorted(p.name for p in folder.glob("*.distcp"))
    assert ckpt.extras["dcp"]["files"] == files and ckpt.files == [".metadata"] + files


@pytest.mark.parametrize("key", ["dcp_single", "dcp_sharded"])
def test_values_equal_dcp_to_torch_save(folders, saved, key):
    ckpt = tensorloupe.open(str(folders[key]))
    full = flat(saved[key])
    covered = {}
    for t in ckpt.tensors:
        dcp = t.info["dcp"]
        whole = full[dcp["fqn"]]
        part = whole[tuple(slice(o, o + n) for o, n in zip(dcp["offsets"], dcp["sizes"]))]
        got = tensorloupe.values(t, 0, t.numel)
        assert got == part.float().flatten().tolist() if part.is_floating_point() else \
            got == part.flatten().tolist(), t.name
        covered[dcp["fqn"]] = covered.get(dcp["fqn"], 0) + t.numel
    tensors = {k: v for k, v in full.items() if isinstance(v, torch.Tensor)}
    assert covered == {k: v.numel() for k, v in tensors.items()}   # the chunks tile each tensor
    assert ckpt.parameter_count == sum(v.numel() for v in tensors.values())
    objects = {k: v for k, v in full.items() if not isinstance(v, torch.Tensor)}
    assert {k: o["value"] for k, o in ckpt.extras["dcp"]["objects"].items()} == objects


def test_sharded_tensors_are_listed_by_chunk_with_their_offsets(folders):
    ckpt = tensorloupe.open(str(folders["dcp_sharded"]))
    assert [t.name for t in ckpt.tensors] == [
        "rows[0:3, 0:4]", "rows[3:6, 0:4]", "cols[0:4, 0:3]", "cols[0:4, 3:5]", "rep", "plain"]
    assert {t.name: t.file for t in ckpt.tensors}["rows[3:6, 0:4]"] == "__1_0.distcp"
    assert {e["name"]: e["chunks"] for e in ckpt.extras["dcp"]["tensors"]} == \
        {"rows": 2, "cols": 2, "rep": 1, "plain": 1}


def test_the_metadata_pickle_is_read_as_data_and_nothing_is_dangerous(folders):
    ckpt = tensorloupe.open(str(folders["dcp_sharded"]))
    safety = ckpt.extras["safety"]
    assert safety["dangerous"] == []
    verdicts = {g["name"]: g["verdict"] for g in safety["globals"]}
    assert verdicts["torch.distributed.checkpoint.metadata.Metadata"] == "allowed"
    assert verdicts["torch.distributed.checkpoint.filesystem._StorageInfo"] == "allowed"
    # but torch.load(weights_only=True) refuses the .metadata (protocol-4 opcodes, DCP's classes
    # not on its allow-list; tests/test_torch_verdicts.py checks it against torch), so --strict
    # fails as on any pickle torch's default load refuses
    done = cli("inspect", "--strict", folders["dcp_sharded"])
    assert done.returncode == 6 and ".metadata: torch.load(weights_only=True)" in done.stderr


def test_a_dangerous_global_in_the_metadata_is_named_and_strict_fails(folders, tmp_path):
    import os
    import pickle
    folder = tmp_path / "d"
    shutil.copytree(folders["dcp_single"], folder)
    metadata = FileSystemReader(str(folder)).read_metadata()
    metadata.storage_meta.load_id = os.system    # pickled as the global posix.system: never called
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    ckpt = tensorloupe.open(str(folder))
    assert ckpt.extras["safety"]["dangerous"] == [f"{os.system.__module__}.system"]
    assert len(ckpt.tensors) == 5
    done = cli("inspect", "--strict", folder)
    assert done.returncode == 4 and "system" in done.stderr


def test_a_metadata_whose_root_is_not_dcp_s_is_refused(folders, tmp_path):
    folder = tmp_path / "d"
    shutil.copytree(folders["dcp_single"], folder)
    data = (folder / ".metadata").read_bytes()
    # the class of the root object renamed (same length: the pickle stays valid)
    old = b"\x8c%torch.distributed.checkpoint.metadata\x94\x8c\x08Metadata"
    assert data.count(old) == 1
    new = b"\x8c%" + b"os".ljust(37, b"_") + b"\x94\x8c\x08Metadata"
    (folder / ".metadata").write_bytes(data.replace(old, new))
    with pytest.raises(FormatError, match="not a DCP Metadata pickle"):
        tensorloupe.open(str(folder))


def test_a_lone_distcp_names_the_metadata_it_needs(folders):
    path = folders["dcp_single"] / "__0_0.distcp"
    with pytest.raises(FormatError, match=r"data file of a torch.distributed.checkpoint \(DCP\) "
                                          r"folder.*\.metadata, which was not given"):
        tensorloupe.open(str(path))
    done = cli("inspect", path)
    assert done.returncode == 3 and ".metadata" in done.stderr and "bytes before" not in done.stdout


def test_a_missing_data_file_is_an_error(folders, tmp_path):
    folder = tmp_path / "d"
    shutil.copytree(folders["dcp_sharded"], folder)
    (folder / "__1_0.distcp").unlink()
    ckpt = tensorloupe.open(str(folder))
    assert ckpt.extras["shards"]["missing"] == ["__1_0.distcp"]
    gone = [t for t in ckpt.tensors if t.problem]
    assert {t.name for t in gone} == {"rows[3:6, 0:4]", "cols[0:4, 3:5]", "rep", "plain"}
    assert cli("health", folder).returncode == 5
    assert cli("inspect", "--strict", folder).returncode == 6     # the .metadata's verdict first
    assert ckpt.extras["dcp"]["objects"]["step"]["problem"] == "its data file __1_0.distcp is missing"


def test_cli_and_page_agree_on_the_folder(folders):
    folder = folders["dcp_sharded"]
    doc = json.loads(cli("inspect", "--json", folder).stdout)
    assert doc["parameters"] == 24 + 20 + 3 + 4 and doc["format"] == "torch-dcp"
    stats = cli("stats", folder, "rows[3:6, 0:4]")
    assert stats.returncode == 0 and "3×4" in stats.stdout
    assert cli("health", folder).returncode == 0
    files = [{"rel": f"dcp-sharded/{p.name}", "path": str(p), "size": p.stat().st_size,
              "folder": True} for p in sorted(folder.iterdir())]
    s = Session()
    entries = s.handle("group", {"files": files})[0]["entries"]
    assert [(e["kind"], e["files"]) for e in entries] == [
        ("set", [".metadata", "__0_0.distcp", "__1_0.distcp"])]
    result, _ = s.handle("open", {"paths": entries[0]["paths"]})
    assert result["parameters"] == doc["parameters"]
    assert result["tensor_count"] == doc["tensor_count"] == 6


def test_random_corruption_of_the_metadata_raises_only_our_errors(folders, tmp_path):
    import random
    from tensorloupe.errors import TensorloupeError
    folder = tmp_path / "d"
    shutil.copytree(folders["dcp_sharded"], folder)
    original = (folder / ".metadata").read_bytes()
    rng = random.Random(20261203)
    for _ in range(300):
        data = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cut = rng.choice([len(data), rng.randrange(1, len(data))])
        (folder / ".metadata").write_bytes(bytes(data[:cut]))
        try:
            tensorloupe.open(str(folder)).close()
        except TensorloupeError:
            pass
