"""One set of bytes, two files (issue 25): what torch.load does with a file's bytes is decided as
torch decides it (formats/pytorch/loadpath.py) and analysed whatever format the file is shown as.

Every polyglot of fixtures/polyglot_files.py is first proved real: torch.load(weights_only=False)
creates the canary in a throwaway child process. Then tensorloupe must name os.system, say both
readings, and fail --strict, and never create the canary itself. The decision itself is compared
with torch's own on every fixture the repository writes, by recording which branch torch.load takes
(its ZIP test, tarfile, its unpickler) in a child where each branch is stopped before it reads on.
"""

import json
import os
import pickle
import pickletools
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bin_shard_files
import gguf_files
import hostile_files
import hostile_headers
import shard_files
import polyglot_files as pf
import safetensors_files
import torch_files as tf
import tensorloupe
from tensorloupe.errors import TensorloupeError
from tensorloupe.formats.pytorch import loadpath
from tensorloupe.source import open_source
from tensorloupe.unpickling.machine import unpickle
from tensorloupe.unpickling.objects import StandIn

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}
# name -> (format shown, the path torch takes, how tensorloupe answers: "report" or "refusal")
POLYGLOTS = {
    "safetensors_pickle.bin": ("safetensors", "pickle", "report"),
    "safetensors_zip.bin": ("safetensors", "zip", "report"),
    "gguf_pickle.gguf": ("gguf", "pickle", "report"),
    "tar_pickle_name.pt": ("pytorch-tar", "tar", "report"),
    "tar_no_magic.pt": ("pytorch-tar", "tar", "report"),
    "tar_count_call.pt": (None, "tar", "refusal"),
    "legacy_bad_keys.pt": (None, "pickle", "refusal"),
}


@pytest.fixture(scope="module")
def polyglots(tmp_path_factory):
    out = tmp_path_factory.mktemp("polyglot")
    evil_zip = tf.write_torch_zip(out / "evil-zip.pt", pf.PAYLOAD, {"byteorder": b"little"})
    written = pf.write_all(out, evil_zip.read_bytes())
    return {path.name: path for path in written.values()}


def cli(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, argv)], cwd=cwd,
                          capture_output=True, text=True, env=ENV, timeout=300)


@pytest.mark.parametrize("name", sorted(POLYGLOTS))
def test_torch_load_runs_the_payload(polyglots, name, tmp_path):
    """The attack is real: torch itself creates the canary (in a child, in a throwaway folder)."""
    subprocess.run([sys.executable, "-c", "import sys, torch\ntry:\n    torch.load(sys.argv[1], "
                    "weights_only=False)\nexcept Exception:\n    pass", str(polyglots[name])],
                   cwd=tmp_path, capture_output=True, timeout=300, check=True)
    assert (tmp_path / pf.CANARY).exists(), name


def test_each_polyglot_is_valid_for_the_reader_it_is_shown_by(polyglots):
    import gguf
    from safetensors import safe_open
    with safe_open(polyglots["safetensors_pickle.bin"], "np") as f:
        assert bytes(f.get_tensor("payload")) == pf.PAYLOAD
    with safe_open(polyglots["safetensors_zip.bin"], "np") as f:
        assert bytes(f.get_tensor("archive")[:4]) == b"PK\x03\x04"
    reader = gguf.GGUFReader(polyglots["gguf_pickle.gguf"])
    assert len(reader.tensors) == ord("V") << 8
    for name in ("tar_pickle_name.pt", "tar_no_magic.pt", "tar_count_call.pt"):
        with tarfile.open(polyglots[name], mode="r:") as tar:
            assert {"storages", "tensors", "pickle"} <= set(tar.getnames()), name


@pytest.mark.parametrize("name", sorted(POLYGLOTS))
def test_tensorloupe_names_what_torch_would_run(polyglots, name, tmp_path):
    shown, path, answer = POLYGLOTS[name]
    strict = cli("inspect", "--strict", polyglots[name], cwd=tmp_path)
    as_json = cli("inspect", "--json", polyglots[name], cwd=tmp_path)
    text = cli("inspect", polyglots[name], cwd=tmp_path)
    for proc in (strict, as_json, text):
        assert "Traceback" not in proc.stderr, proc.stderr
    if answer == "refusal":
        # torch runs the payload, then fails on what follows: the refusal says both
        assert strict.returncode == 3 and text.returncode == 3
        assert "os.system" in text.stderr and "would already have run" in text.stderr
    else:
        assert strict.returncode == 4, strict.stderr
        doc = json.loads(as_json.stdout)
        assert doc["format"] == shown
        safety = doc["extras"]["safety"]
        assert safety["dangerous"] == ["os.system"]
        assert pf.CANARY in json.dumps(safety["calls"])      # the command, quoted, never run
        if shown in ("safetensors", "gguf"):                  # two readings: both are named
            assert safety["torch_reading"]["path"] == path
            assert safety["torch_reading"]["format"] == {"pickle": "pickle", "zip": "pytorch-zip"}[path]
            assert f"shown here as {shown}" in safety["notes"][0]
            assert f"SAFETY: these bytes are two files: shown here as {shown}" in text.stdout
            assert doc["warnings"][0].startswith("SAFETY: these bytes are two files")
        assert "DANGEROUS  os.system" in text.stdout
    assert not (tmp_path / pf.CANARY).exists()


def test_a_renamed_polyglot_is_only_what_its_name_makes_it_for_torch(polyglots, tmp_path):
    """Named .safetensors, torch hands the file to safetensors: the pickle is never reached, so
    the same bytes are a clean safetensors file (and --strict passes)."""
    renamed = tmp_path / "model.safetensors"
    renamed.write_bytes(polyglots["safetensors_pickle.bin"].read_bytes())
    proc = cli("inspect", "--strict", "--json", renamed)
    assert proc.returncode == 0, proc.stderr
    assert "safety" not in json.loads(proc.stdout)["extras"]


# --- the decision, against torch's own, on every fixture ---------------------------------------

# Runs in a child: records which branch torch.load takes for each path and stops it there, so no
# pickle of any fixture is ever unpickled (weights_only=True besides).
TORCH_DECISION = r"""
import json, sys, tarfile
import torch, torch.serialization as ser, torch._weights_only_unpickler as wou

class Taken(Exception):
    pass

def stop(branch):
    def stopped(*args, **kwargs):
        raise Taken(branch)
    return stopped

is_zip, tar_open = ser._is_zipfile, tarfile.open
ser._is_zipfile = lambda f: is_zip(f) and stop("zip")()
def opened(*args, **kwargs):
    tar_open(*args, **kwargs).close()
    raise Taken("tar")
tarfile.open = opened
wou.load = stop("pickle")
wou.Unpickler.load = stop("pickle")
import safetensors.torch
safetensors.torch.load_file = stop("safetensors")
out = {}
for path in sys.argv[1:]:
    try:
        torch.load(path, weights_only=True)
        out[path] = "loaded"
    except Taken as taken:
        out[path] = taken.args[0]
    except Exception as e:
        out[path] = "error: " + type(e).__name__
print(json.dumps(out))
"""


def every_fixture(out: Path, polyglots: dict) -> list[Path]:
    files = [*polyglots.values()]
    for module in (tf, hostile_files, hostile_headers, safetensors_files, gguf_files, shard_files,
                   bin_shard_files):
        folder = out / module.__name__
        folder.mkdir()
        module.write_all(folder)
        files += [p for p in folder.rglob("*") if p.is_file() and p.suffix != ".json"]
    return sorted(set(files))


def test_the_path_is_the_one_torch_load_takes(polyglots, tmp_path):
    files = every_fixture(tmp_path, polyglots)
    assert len(files) > 60
    done = subprocess.run([sys.executable, "-c", TORCH_DECISION, *map(str, files)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, check=True)
    torch_says = json.loads(done.stdout.splitlines()[-1])
    mine, disagree = {}, []
    for path in files:
        source = open_source(str(path))
        head = source.read(0, min(1024, source.size))
        mine[str(path)] = loadpath.path_of(source, head) if source.size else "empty"
    for path, branch in torch_says.items():
        if branch.startswith("error") or branch == "loaded":
            # torch failed before choosing (an empty file) or loaded it: say which, then skip
            assert mine[path] == "empty" or branch == "loaded", (path, branch)
            continue
        if mine[path] != branch:
            disagree.append((Path(path).name, branch, mine[path]))
    assert disagree == []
    assert not (tmp_path / pf.CANARY).exists()


# --- the two cheap gates are sound: they never say "harmless" of what torch would run ----------

def _header_mutations():
    block = pf.tar_no_magic()[:512]
    return st.lists(st.tuples(st.integers(0, 511), st.integers(0, 255)), max_size=4).map(
        lambda flips: _flipped(block, flips))


def _flipped(block: bytes, flips) -> bytes:
    out = bytearray(block)
    for at, value in flips:
        out[at] = value
    return bytes(out) + b"\0" * 1024


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_header_mutations())
def test_the_checksum_gate_never_refuses_what_tarfile_opens(data):
    import io
    try:
        tarfile.open(fileobj=io.BytesIO(data), mode="r:").close()
        opens = True
    except tarfile.TarError:
        opens = False
    if opens:
        assert loadpath._checksum_matches(data[:512])


def _pickle_prefixes():
    """Real pickles (with and without globals), cut and spliced with junk."""
    samples = [pickle.dumps(x, protocol=p) for p in range(6)
               for x in (1, "a" * 300, [1.5, None, b"xy" * 200], {"k": (1, 2)})]
    samples += [pf.PAYLOAD, hostile_files.evil_pickle(), pickle.dumps(StandIn, protocol=2)]
    return st.tuples(st.sampled_from(samples), st.binary(max_size=40), st.integers(0, 400),
                     st.binary(max_size=8)).map(lambda t: t[3] + t[0][:t[2]] + t[1])


class _Bytes:
    def __init__(self, data):
        self.data, self.size, self.name = data, len(data), "fuzz.bin"

    def read(self, offset, n):
        return self.data[offset:offset + n]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pickle_prefixes())
def test_the_opcode_walk_never_calls_harmless_what_imports_or_calls(data):
    """Whenever the walk says the pickle breaks first, the allow-list machine (and so a real
    unpickler) breaks before any global: nothing could have run."""
    if not data or loadpath._may_run(_Bytes(data), data[:1024]):
        return
    seen = []
    try:
        unpickle(data, lambda module, name: seen.append(name) or StandIn(f"{module}.{name}", "dangerous"))
    except TensorloupeError:
        pass
    else:
        pytest.fail("the walk said the pickle breaks, but it reads to STOP")
    assert seen == []
    ops = []
    try:
        for op, _, _ in pickletools.genops(data):
            ops.append(op.name)
    except Exception:
        pass
    assert not set(ops) & loadpath.REACHES


def test_the_check_reads_nothing_more_of_a_real_file(demo_path, tmp_path):
    """A safetensors file named .bin (torch would unpickle it) reads the same bytes as under its
    own name: the walk of its first opcodes stays in the block the header read brought."""
    renamed = tmp_path / "demo.bin"
    renamed.write_bytes(demo_path.read_bytes())
    with tensorloupe.open(str(demo_path)) as plain, tensorloupe.open(str(renamed)) as checked:
        assert checked.format == "safetensors" and "safety" not in checked.extras
        assert checked.bytes_read() == plain.bytes_read() < plain.size // 50
