"""tensorloupe's "weights_only" verdict against torch itself: over every pickle file the fixture
writers make (torch_files, hostile_files, polyglot_files, bin_shard_files, training_files,
dcp_files' .metadata, deepspeed_files' rank files), a child
process runs torch.load(path, weights_only=True) (never weights_only=False) in a throwaway cwd and
records whether it loads, the global its message names, and for ZIP files
torch.serialization.get_unsafe_globals_in_checkpoint; any file where tensorloupe says otherwise
fails. The allow-list table itself is compared with torch's _get_allowed_globals()."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch  # noqa: F401 (the oracle: this module is skipped where torch does not exist)

import bin_shard_files
import count_files
import dcp_files
import deepspeed_files
import deepspeed_parallel_files
import hostile_files
import nemo_files
import polyglot_files
import strided_files
import torch_files
import torchao_files
import training_files

import tensorloupe
from tensorloupe.errors import TensorloupeError
from tensorloupe.formats.pytorch import weightsonly

ROOT = Path(__file__).resolve().parent.parent
WRITERS = (torch_files, hostile_files, polyglot_files, bin_shard_files, training_files, dcp_files,
           deepspeed_files, deepspeed_parallel_files, strided_files, count_files, torchao_files, nemo_files)
# Files that are no pickle for torch.load: it hands *.safetensors to safetensors, and JSON is
# read by the libraries that wrote it (an index.json opens its shard set here, not one file);
# a .npy is NumPy's (numpy.load), not torch's.
NOT_PICKLES = (".safetensors", ".json", ".npy")

TORCH_LOADS = r"""
import contextlib, io, json, pickle, sys, warnings
warnings.simplefilter("ignore")
import torch, torch.serialization as ser
import torch._weights_only_unpickler as wou
out = {"allowed": sorted(wou._get_allowed_globals()),
       "user_allowed": sorted(wou._get_user_allowed_globals()),
       "opcodes": sorted(n for n, v in vars(wou).items()
                         if isinstance(v, bytes) and len(v) == 1 and getattr(pickle, n, None) == v),
       "files": {}}
for path in json.load(sys.stdin):
    rec = {}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            torch.load(path, weights_only=True)
        rec["loads"] = True
    except Exception as e:
        rec["loads"] = False
        rec["error"] = f"{type(e).__name__}: {e}"
    try:
        rec["unsafe"] = sorted(ser.get_unsafe_globals_in_checkpoint(path))
    except Exception as e:     # no ZIP, a TorchScript archive, a broken one
        rec["unsafe"] = None
    out["files"][path] = rec
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("verdicts")
    files = set()
    for writer in WRITERS:
        for path in writer.write_all(out / writer.__name__).values():
            path = Path(path)
            files |= {p for p in (path.rglob("*") if path.is_dir() else [path]) if p.is_file()}
    files |= set(beyond_the_writers(out / "beyond"))
    files = {m for p in files for m in nemo_members(p, out / "nemo-members")}
    return sorted(p for p in files if not p.name.endswith(NOT_PICKLES))


def nemo_members(path: Path, out: Path) -> list[Path]:
    """A .nemo as torch sees it: NeMo extracts the tar and torch.loads its model_weights.ckpt
    (the .nemo's own report names that member, test_a_nemo_verdict_names_its_member)."""
    if path.suffix != ".nemo":
        return [path]
    import tarfile
    with tarfile.open(path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("model_weights.ckpt"))
        target = out / path.stem / "model_weights.ckpt"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(tar.extractfile(member).read())
    return [target]


def beyond_the_writers(out: Path) -> list[Path]:
    """Two refusals no fixture writer makes: a storage record longer than its storage (torch
    stops at its size check, not in its unpickler) and a pickle of protocol 4 (opcodes torch's
    weights_only unpickler does not read)."""
    import zipfile
    out.mkdir(parents=True)
    plain = out / "plain.pt"
    torch.save({"w": torch.arange(4, dtype=torch.uint8)}, plain)
    longer = out / "record_longer.pt"
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(longer, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data + bytes(12) if info.filename.endswith("/data/0") else data)
    protocol4 = out / "protocol4.pt"
    torch.save({"w": torch.ones(3), "names": ["a", "b"]}, protocol4, pickle_protocol=4)
    return [longer, protocol4]


@pytest.fixture(scope="module")
def torch_says(written, tmp_path_factory):
    if sys.platform == "emscripten":
        pytest.skip("no child processes in Pyodide")
    cwd = tmp_path_factory.mktemp("throwaway-cwd")
    done = subprocess.run([sys.executable, "-c", TORCH_LOADS], input=json.dumps(
        [str(p) for p in written]), capture_output=True, text=True, cwd=cwd, timeout=600,
        env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(cwd.iterdir()) == []        # torch.load made nothing (no pickle ran)
    return json.loads(done.stdout)


def named_in_message(error: str) -> str | None:
    """The global torch's weights_only message names (it drops the "builtins." of a builtin)."""
    found = re.search(r"GLOBAL (\S+)", error)
    if not found:
        return None
    name = found.group(1)
    return name if "." in name else f"builtins.{name}"


def test_the_allow_list_is_torch_s(torch_says):
    assert weightsonly.ALLOWED == set(torch_says["allowed"]) | set(torch_says["user_allowed"])
    assert weightsonly.SUPPORTED_OPCODES == set(torch_says["opcodes"])


def test_every_pickle_fixture_s_verdict_agrees_with_torch(written, torch_says):
    compared, contradictions, unopened = [], [], []
    for path in written:
        said = torch_says["files"][str(path)]
        try:
            ckpt = tensorloupe.open(str(path))
        except TensorloupeError:
            # refused by tensorloupe (a limit, a broken file): no verdict is shown, none can
            # contradict torch
            unopened.append(path.name)
            continue
        loads = (ckpt.extras.get("safety") or {}).get("weights_only")
        if loads is None:
            contradictions.append(f"{path.name}: no weights_only verdict")
            continue
        compared.append(path.name)
        if loads["loads"] != said["loads"]:
            contradictions.append(f"{path.name}: tensorloupe says loads={loads['loads']} "
                                  f"({loads['why']}), torch: {said.get('error', 'loads')[:300]}")
            continue
        named = named_in_message(said.get("error", ""))
        if named and named not in loads["refused"]:
            contradictions.append(f"{path.name}: torch refuses {named}, tensorloupe refuses "
                                  f"{loads['refused']}")
        torchscript = "torchscript" in ckpt.extras
        if said["unsafe"] is not None and not torchscript and \
                ckpt.extras.get("safety", {}).get("torch_reading") is None and \
                sorted(loads["refused"]) != said["unsafe"]:
            contradictions.append(f"{path.name}: get_unsafe_globals_in_checkpoint says "
                                  f"{said['unsafe']}, tensorloupe {loads['refused']}")
        if not loads["loads"]:
            assert loads["why"].startswith("torch.load(weights_only=True) (torch 2.13) refuses")
    assert contradictions == []
    # every kind of pickle file was compared, both ways
    assert {"rng_state.pth", "random_states_0.pkl", "training_args.bin", "optimizer.pt",
            "state_dict.pt", "legacy.pt", "legacy_tar.pt", "torchscript.jit", "module.pt",
            "hostile.pt", "plain_evil.pkl", "bad_crc.pt", "safetensors_pickle.bin",
            "gguf_pickle.gguf", "pytorch_model-00001-of-00003.bin", "record_longer.pt",
            "protocol4.pt", ".metadata", "mp_rank_00_model_states.pt",
            "zero_pp_rank_0_mp_rank_00_optim_states.pt",
            "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= set(compared)
    assert len(compared) >= 45, (compared, unopened)
    outcomes = {torch_says["files"][str(p)]["loads"] for p in written if p.name in compared}
    assert outcomes == {True, False}


def test_no_reason_claims_torch_allows_what_it_refuses(written, torch_says):
    torch_allows = set(torch_says["allowed"]) | set(torch_says["user_allowed"])
    claims = 0
    for path in written:
        try:
            safety = tensorloupe.open(str(path)).extras.get("safety") or {}
        except TensorloupeError:
            continue
        for g in safety.get("globals", ()):
            if "allow-list has it" in g["reason"] or "own allow-list" in g["reason"]:
                claims += 1
                assert g["name"] in torch_allows, (path.name, g)
            if g["name"] not in torch_allows and g["verdict"] == "allowed":
                assert "weights_only=True) refuses it" in g["reason"], (path.name, g)
    assert claims > 0


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "pylib")})


@pytest.mark.skipif(sys.platform == "emscripten", reason="no child processes in Pyodide")
def test_a_trainer_rng_state_is_refused_as_torch_refuses_it_and_strict_fails(tmp_path, torch_says):
    folder = training_files.write_trainer(tmp_path)
    rng = folder / "rng_state.pth"
    said = torch_says["files"]
    torch_rng = next(v for k, v in said.items() if k.endswith("trainer/checkpoint-2/rng_state.pth"))
    assert not torch_rng["loads"] and "numpy._core.multiarray._reconstruct" in torch_rng["error"]
    loads = tensorloupe.open(str(rng)).extras["safety"]["weights_only"]
    assert loads["loads"] is False
    assert sorted(loads["refused"]) == torch_rng["unsafe"] == \
        ["numpy._core.multiarray._reconstruct", "numpy.dtype", "numpy.ndarray"]
    # our own verdict stays (NumPy arrays are read as data), the reason no longer claims torch's
    verdicts = {g["name"]: g for g in tensorloupe.open(str(rng)).extras["safety"]["globals"]}
    assert verdicts["numpy._core.multiarray._reconstruct"]["verdict"] == "allowed"
    assert "torch.load(weights_only=True) refuses it" in \
        verdicts["numpy._core.multiarray._reconstruct"]["reason"]
    done = cli("inspect", "--strict", rng)
    assert done.returncode == 6, done.stderr
    assert "numpy._core.multiarray._reconstruct" in done.stderr
    assert ("torch.load(weights_only=True), torch's default since 2.6: refuses it (globals: "
            "numpy._core.multiarray._reconstruct, numpy.ndarray, numpy.dtype)") in done.stdout
    # the folder says so too (training_args.bin is dangerous: 4 wins), and names the file
    folder_loads = tensorloupe.open(str(folder)).extras["safety"]["weights_only"]
    assert not folder_loads["loads"] and "rng_state.pth" in folder_loads["files"]
    assert cli("inspect", "--strict", folder).returncode == 4


@pytest.mark.skipif(sys.platform == "emscripten", reason="no child processes in Pyodide")
def test_a_clean_file_says_torch_loads_it(tmp_path):
    path = torch_files.write_all(tmp_path)["state_dict"]
    loads = tensorloupe.open(str(path)).extras["safety"]["weights_only"]
    assert loads == {"loads": True, "refused": [], "why": loads["why"]} and "loads it" in loads["why"]
    done = cli("inspect", "--strict", path)
    assert done.returncode == 0, done.stderr
    assert "torch.load(weights_only=True), torch's default since 2.6: loads it" in done.stdout


@pytest.mark.skipif(sys.platform == "emscripten", reason="no child processes in Pyodide")
def test_each_part_of_a_folder_keeps_torch_s_verdict_and_the_set_merges_them(written, torch_says):
    """A training folder's parts, each with torch's own verdict on that file (CLI text too), and
    a .bin shard set that torch loads shard by shard: the set loads."""
    folder = next(p for p in written if p.name == "rng_state.pth").parent
    parts = tensorloupe.open(str(folder)).extras["training"]["parts"]
    checked = 0
    for part in parts:
        if part.get("safety"):
            said = torch_says["files"][str(folder / part["file"])]
            assert part["safety"]["weights_only"]["loads"] == said["loads"], part["file"]
            checked += 1
    assert checked == 4
    text = cli("inspect", folder).stdout
    assert text.count("torch.load(weights_only=True), torch's default since 2.6: refuses it") >= 3
    shards = next(p for p in written if p.name == "pytorch_model-00001-of-00003.bin").parent
    each = [v["loads"] for k, v in torch_says["files"].items() if Path(k).parent == shards]
    assert each == [True, True, True]
    merged = tensorloupe.open(str(shards)).extras["safety"]["weights_only"]
    assert merged["loads"] is True and merged["refused"] == []


def test_a_nemo_verdict_names_its_member(written, tmp_path):
    ckpt = tensorloupe.open(str(ROOT / "fixtures" / "out" / "nemo" / "tiny.nemo"))
    loads = ckpt.extras["safety"]["weights_only"]
    assert loads["member"].endswith("model_weights.ckpt") and loads["loads"] is True
    from tensorloupe.report import weights_only_line
    assert weights_only_line(loads).startswith("torch.load(weights_only=True) of its ")
