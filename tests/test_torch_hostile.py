"""Hostile torch checkpoints: code-execution attacks, resource bombs, random corruption.

Each attack pickle tries to create a canary file. It is put inside a valid torch ZIP (written by
torch's own PyTorchFileWriter) and opened with tensorloupe: the canary must never appear, the file
must be reported with the dangerous globals named, nothing may be imported, and any error must be
a TensorloupeError. `test_the_attack_is_real` runs the same bytes through CPython's pickle.loads in
a throwaway subprocess to prove that each attack marked real does create the canary there.
"""

import copyreg
import json
import pickle
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorloupe
from tensorloupe.errors import LimitError, TensorloupeError

import torch_files as tf  # noqa: E402

EXT_CODE = 0xF1  # an extension code registered for os.system by the copyreg attack


def text(s: str) -> bytes:
    """BINUNICODE: 'X', 4-byte length, UTF-8."""
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def short(s: str) -> bytes:
    """SHORT_BINUNICODE (protocol 4)."""
    return b"\x8c" + bytes([len(s)]) + s.encode()


# name -> (pickle builder taking the canary path, dangerous globals it must be reported with,
#          whether CPython's pickle.loads really creates the canary)
ATTACKS = {
    # REDUCE calls os.system("touch canary")
    "reduce_os_system": (lambda c: b"\x80\x02cos\nsystem\n" + text(f"touch {c}") + b"\x85R.",
                         ["os.system"], True),
    "builtins_exec": (lambda c: b"\x80\x02cbuiltins\nexec\n" + text(f"open({c!r}, 'w').close()")
                      + b"\x85R.", ["builtins.exec"], True),
    "builtins_eval": (lambda c: b"\x80\x02c__builtin__\neval\n"
                      + text(f"__import__('os').system('touch {c}')") + b"\x85R.",
                      ["builtins.eval"], True),
    # INST (protocol 0) instantiates os.system with the marked arguments
    "inst": (lambda c: f"(S'touch {c}'\nios\nsystem\n.".encode(), ["os.system"], True),
    # OBJ (protocol 1): class and arguments after a MARK
    "obj": (lambda c: b"(cos\nsystem\n" + text(f"touch {c}") + b"o.", ["os.system"], True),
    # NEWOBJ / NEWOBJ_EX build subprocess.Popen objects
    "newobj": (lambda c: b"\x80\x02csubprocess\nPopen\n]" + text("touch") + b"a" + text(c)
               + b"a\x85\x81.", ["subprocess.Popen"], False),
    "newobj_ex": (lambda c: b"\x80\x04" + short("subprocess") + short("Popen") + b"\x93]"
                  + short("touch") + b"a" + short(c) + b"a\x85}" + short("shell") + b"\x89s\x92.",
                  ["subprocess.Popen"], False),
    # BUILD puts os.system into the instance dict as __setstate__; a second BUILD then calls it
    "build_setstate": (lambda c: b"\x80\x02cargparse\nNamespace\n)\x81}" + text("__setstate__")
                       + b"cos\nsystem\nsb" + text(f"touch {c}") + b"b.", ["os.system"], True),
    # protocol 4 STACK_GLOBAL: getattr(__import__("os"), "system")("touch canary")
    "stack_global_getattr": (lambda c: b"\x80\x04" + short("builtins") + short("getattr") + b"\x93"
                             + short("builtins") + short("__import__") + b"\x93" + short("os")
                             + b"\x85R" + short("system") + b"\x86R" + text(f"touch {c}") + b"\x85R.",
                             ["builtins.getattr", "builtins.__import__"], True),
    # EXT1 resolves through copyreg's extension registry to os.system
    "ext_copyreg": (lambda c: b"\x80\x02\x82" + bytes([EXT_CODE]) + text(f"touch {c}") + b"\x85R.",
                    ["os.system"], True),
}


@pytest.fixture
def registered_extension():
    copyreg.add_extension("os", "system", EXT_CODE)
    yield
    copyreg.remove_extension("os", "system", EXT_CODE)


def evil_zip(tmp_path: Path, data_pkl: bytes) -> Path:
    return tf.write_torch_zip(tmp_path / "evil.pt", data_pkl, {"byteorder": b"little"})


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_is_reported_and_never_runs(name, tmp_path, request):
    if name == "ext_copyreg":
        request.getfixturevalue("registered_extension")
    build, dangerous, _ = ATTACKS[name]
    canary = tmp_path / "canary"
    path = evil_zip(tmp_path, build(str(canary)))
    modules = set(sys.modules)
    ckpt = tensorloupe.open(path)
    assert not canary.exists()
    # nothing imported, not even argparse or subprocess (our own modules may load lazily)
    assert {m for m in set(sys.modules) - modules if m.split(".")[0] != "tensorloupe"} == set()
    assert set(dangerous) <= set(ckpt.extras["safety"]["dangerous"])
    # the command the attack carries is shown (its first call's arguments, or a later call's)
    shown_args = json.dumps(ckpt.extras["safety"]["calls"])
    assert str(canary) in shown_args or "touch" in shown_args
    assert "dangerous globals" in ckpt.warnings[0] and dangerous[0] in ckpt.warnings[0]
    assert ckpt.tensors == []
    json.dumps(ckpt.metadata)
    json.dumps(ckpt.extras)


@pytest.mark.parametrize("name", sorted(n for n, (_, _, real) in ATTACKS.items() if real))
def test_the_attack_is_real(name, tmp_path):
    build, _, _ = ATTACKS[name]
    canary = tmp_path / "canary"
    (tmp_path / "attack.pkl").write_bytes(build(str(canary)))
    setup = f"import copyreg; copyreg.add_extension('os', 'system', {EXT_CODE}); "
    subprocess.run([sys.executable, "-c", setup + "import pickle; "
                    "pickle.loads(open('attack.pkl', 'rb').read())"],
                   cwd=tmp_path, capture_output=True, timeout=60)
    assert canary.exists()


def test_malicious_data_pkl_in_a_torch_save_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the fixture's commands use a relative canary path
    path = tf.write_all(tmp_path)["hostile"]
    with pytest.raises(pickle.UnpicklingError, match="unsupported GLOBAL posix.system"):
        torch.load(path, weights_only=True)  # torch's own allow-list refuses it too
    ckpt = tensorloupe.open(path)
    assert not (tmp_path / tf.CANARY_NAME).exists()
    assert ckpt.extras["safety"]["dangerous"] == ["posix.system", "builtins.exec"]
    assert tensorloupe.values(ckpt.tensor("weight")) == [0.0, 1.0, 2.0, 3.0]
    assert ckpt.metadata["payload"] == {"global": "posix.system",
                                        "args": [f"touch {tf.CANARY_NAME}"]}


def test_unregistered_extension_code_is_inert(tmp_path):
    # a real unpickler stops at an unregistered extension code: nothing can run
    ckpt = tensorloupe.open(evil_zip(tmp_path, b"\x80\x02\x82\xf2" + text("x") + b"\x85R."))
    (entry,) = ckpt.extras["safety"]["globals"]
    assert entry["verdict"] == "inert" and "unregistered_code_242" in entry["name"]


# --- resource bombs: one per test, each with its own clear error ------------------------------------

def open_bomb(tmp_path, data_pkl: bytes):
    start = time.perf_counter()
    try:
        return tensorloupe.open(evil_zip(tmp_path, data_pkl))
    finally:
        assert time.perf_counter() - start < 10


def test_deep_mark_nesting(tmp_path):
    with pytest.raises(LimitError, match="MARKs nest deeper than 1,000"):
        open_bomb(tmp_path, b"\x80\x02" + b"(" * 100_000 + b".")


def test_deep_list_nesting(tmp_path):
    # 100,000 nested lists, built without MARK: the walk refuses them, no RecursionError
    with pytest.raises(LimitError, match="nest deeper than 200 levels"):
        open_bomb(tmp_path, b"\x80\x02" + b"]" * 100_000 + b"a" * 99_999 + b".")


def test_deep_dict_nesting(tmp_path):
    # {"k": {"k": ... None}} 50,000 deep: each SETITEM stores the dict built so far
    bomb = b"\x80\x02" + (b"}" + text("k")) * 50_000 + b"N" + b"s" * 50_000 + b"."
    with pytest.raises(LimitError, match="nest deeper than 200 levels"):
        open_bomb(tmp_path, bomb)


def test_deeply_nested_tuple_key(tmp_path):
    # 150 deep: under the nesting limit of every object (200), over the one of keys (100)
    with pytest.raises(LimitError, match="nests deeper than 100"):
        open_bomb(tmp_path, b"\x80\x02}" + b")" + b"\x85" * 150 + b"K\x01s.")


def test_exponential_tuple_key(tmp_path):
    # each DUP + TUPLE2 doubles the tuple a hash would visit: 2**80 after 80 steps
    with pytest.raises(LimitError, match="expands to more than"):
        open_bomb(tmp_path, b"\x80\x02}" + b")" + b"2\x86" * 80 + b"K\x01s.")


def test_huge_declared_string_length(tmp_path):
    with pytest.raises(LimitError, match="declares 4,611,686,018,427,387,904 bytes"):
        open_bomb(tmp_path, b"\x80\x04\x8d" + struct.pack("<Q", 1 << 62) + b"x.")


def test_huge_declared_bytes_length(tmp_path):
    with pytest.raises(LimitError, match="declares 4,294,967,280 bytes"):
        open_bomb(tmp_path, b"\x80\x03B" + struct.pack("<I", 0xFFFFFFF0) + b"x.")


def _laughs(levels: int, leaf: bytes) -> bytes:
    """Memo 'billion laughs': level k+1 is a list holding level k ten times (memo references)."""
    out = b"\x80\x02" + leaf + b"r" + struct.pack("<I", 0)
    for level in range(1, levels + 1):
        out += b"](" + (b"j" + struct.pack("<I", level - 1)) * 10 + b"e" + b"r" + struct.pack("<I", level)
    return out + b"."


def test_memo_billion_laughs_of_tensors(tmp_path):
    # _rebuild_tensor_v2(storage ('storage', FloatStorage, '0', 'cpu', 1), 0, (1,), (1,), False, {})
    tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n((" + text("storage") + b"ctorch\nFloatStorage\n"
              + text("0") + text("cpu") + b"K\x01tQK\x00K\x01\x85K\x01\x85\x89"
              + b"ccollections\nOrderedDict\n)RtR")
    with pytest.raises(LimitError, match="names more than"):
        open_bomb(tmp_path, _laughs(9, tensor))


def test_memo_billion_laughs_of_data(tmp_path):
    ckpt = open_bomb(tmp_path, _laughs(30, b"N"))  # 10**30 leaves, one object per level
    assert len(json.dumps(ckpt.metadata)) < 200_000


def test_huge_memo_index(tmp_path):
    ckpt = open_bomb(tmp_path, b"\x80\x02}r\xff\xff\xff\xffj\xff\xff\xff\xff0.")
    assert ckpt.metadata == {}


def test_data_pkl_over_the_size_limit(tmp_path):
    path = tf.write_torch_zip(tmp_path / "big.pt", b"\x80\x02}.", {})
    blob = bytearray(path.read_bytes())
    entry = blob.index(b"PK\x01\x02")  # data.pkl is the first central directory entry
    struct.pack_into("<I", blob, entry + 24, 300 << 20)  # its uncompressed size
    path.write_bytes(bytes(blob))
    with pytest.raises(LimitError, match="data.pkl' is larger than the limit"):
        tensorloupe.open(path)


# --- random corruption of real torch files raises only our errors ---------------------------------

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    paths = tf.write_all(tmp_path_factory.mktemp("corpus"))
    return {name: paths[name].read_bytes()
            for name in ("views", "legacy", "lightning", "module", "hostile", "legacy_tar")}


def _exercise(blob: bytes, name: str) -> None:
    try:
        ckpt = tensorloupe.open(blob, name=name + ".pt")
    except TensorloupeError:
        return
    json.dumps(ckpt.metadata)
    json.dumps(ckpt.extras)
    for tensor in ckpt.tensors:
        json.dumps(tensor.to_json())
        try:
            tensorloupe.values(tensor, 0, min(tensor.numel, 64))
            tensorloupe.sample(tensor, 256)
        except TensorloupeError:
            pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_corruption_raises_only_our_errors(corpus, data):
    name = data.draw(st.sampled_from(sorted(corpus)))
    blob = bytearray(corpus[name])
    size = len(blob)
    # Bias towards the pickle (near the start) and the ZIP directory (near the end).
    where = st.one_of(st.integers(0, size - 1), st.integers(0, min(size - 1, 800)),
                      st.integers(max(0, size - 1200), size - 1))
    for _ in range(data.draw(st.integers(1, 6))):
        blob[data.draw(where)] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        blob = blob[:data.draw(st.integers(0, size))]
    _exercise(bytes(blob), name)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_truncation_raises_only_our_errors(corpus, data):
    name = data.draw(st.sampled_from(sorted(corpus)))
    _exercise(corpus[name][:data.draw(st.integers(0, len(corpus[name])))], name)


# --- the hardening audit's crafted files (fixtures/hostile_files.py, issue 10) ---------------------

import hostile_files as hf  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import zipfile  # noqa: E402

from tensorloupe.errors import FormatError  # noqa: E402
from tensorloupe.formats.pytorch import allowlist  # noqa: E402


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile")
    return {key.split("/", 1)[1]: path for key, path in hf.write_all(out).items()}


PYLIB_ENV = {**os.environ, "PYTHONPATH": str(Path(tensorloupe.__file__).resolve().parent.parent)}


def torch_runs_it(path: Path, tmp_path: Path) -> bool:
    """torch.load(weights_only=False) in a throwaway subprocess, in an empty folder: does the
    pickle torch picks create the canary (a relative path, so it lands in that folder)?"""
    folder = tmp_path / "torch_load"
    folder.mkdir()
    shutil.copy(path, folder / "f.pt")
    subprocess.run([sys.executable, "-c", "import torch; torch.load('f.pt', weights_only=False)"],
                   cwd=folder, capture_output=True, timeout=120)
    return (folder / hf.CANARY).exists()


# Which pickle torch 2.13 unpickles (checked below against torch.load itself): the evil pickle is
# written first or last, as a duplicate name or a case variant of archive/data.pkl; a pickle in
# front of a valid ZIP; an evil data.pkl with a wrong CRC-32.
TORCH_RUNS = {"dup_pickle_first.pt": False, "dup_pickle_last.pt": True,
              "case_pickle_first.pt": False, "case_pickle_last.pt": True,
              "pickle_before_zip.pt": True, "bad_crc.pt": True}


@pytest.mark.parametrize("name", sorted(TORCH_RUNS))
def test_the_report_covers_what_torch_would_unpickle(hostile, name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where our own reading would create the canary (it must not)
    ckpt = tensorloupe.open(hostile[name])
    assert not (tmp_path / hf.CANARY).exists()
    safety = ckpt.extras["safety"]
    # never a clean report: every data.pkl torch could open is in it, with a loud note
    assert "builtins.open" in safety["dangerous"]
    assert safety["notes"] and any(w.startswith("SAFETY: ") for w in ckpt.warnings)
    assert safety["calls"][0] == {"global": "builtins.open", "args": [hf.CANARY, "w"]}
    # and what is shown is what torch unpickles: the evil pickle has no tensors
    assert (ckpt.tensors == []) == TORCH_RUNS[name] == torch_runs_it(hostile[name], tmp_path)


def test_a_data_pkl_spelled_in_other_case_alone_is_found_and_noted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    members = [("archive/DATA.PKL" if name.endswith("data.pkl") else name, data)
               for name, data in hf._members(hf.benign())]
    path = tmp_path / "upper.pt"
    path.write_bytes(hf.rezip(members))
    assert torch.load(path, weights_only=True)["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    ckpt = tensorloupe.open(path)
    assert tensorloupe.values(ckpt.tensor("w")) == [0.0, 1.0, 2.0, 3.0]
    assert "named 'archive/DATA.PKL', not 'archive/data.pkl'" in ckpt.extras["safety"]["notes"][0]


def test_member_lookup_matches_torch_on_shuffled_archives(tmp_path):
    # Archives with several data.pkl spelled alike (duplicates, other case), each a pickle of a
    # different int, in random order among other members: torch.load (weights_only=True: only
    # ints) says which one torch's reader opens; tensorloupe must show the same.
    rng = random.Random(10)
    for trial in range(25):
        members = [(f"archive/data/{i}", b"") for i in range(rng.randint(0, 12))]
        members += [("archive/version", b"3\n"), ("archive/byteorder", b"little")]
        spellings = ["data.pkl", "DATA.pkl", "Data.Pkl", "data.PKL", "dAtA.pkl"]
        for value in range(rng.randint(2, 5)):
            name = "archive/" + rng.choice(spellings)
            members.append((name, pickle.dumps(1000 + value, protocol=2)))
        rng.shuffle(members)
        path = tmp_path / f"shuffled{trial}.pt"
        path.write_bytes(hf.rezip(members))
        expected = torch.load(path, weights_only=True)
        ckpt = tensorloupe.open(path)
        assert ckpt.metadata == {"root": expected}, [n for n, _ in members]


def test_a_stored_member_whose_zip64_size_lies_is_not_read(hostile):
    # archive/data/0 holds 16 bytes; the central directory's ZIP64 extra says 2**62, so the
    # tensor (2**60 floats) would read the bytes of whatever follows the member
    with zipfile.ZipFile(hostile["zip64_size_lie.pt"]) as archive:
        info = archive.getinfo("archive/data/0")
        assert (info.file_size, info.compress_size) == (1 << 62, 16)
    (tensor,) = tensorloupe.open(hostile["zip64_size_lie.pt"]).tensors
    assert "stored with 16 bytes but declares 4,611,686,018,427,387,904" in tensor.problem
    with pytest.raises(TensorloupeError):
        tensorloupe.values(tensor, 0, 4)


def test_newobj_on_a_rebuild_function_is_refused_as_torch_does(hostile):
    for weights_only in (True, False):  # the file names only torch's rebuild functions
        with pytest.raises((TypeError, pickle.UnpicklingError), match="type"):
            torch.load(hostile["newobj_tensor.pt"], weights_only=weights_only)
    with pytest.raises(FormatError, match="NEWOBJ applied to the function "
                                          "torch._utils._rebuild_tensor_v2: torch refuses"):
        tensorloupe.open(hostile["newobj_tensor.pt"])


def test_a_plain_pickle_gets_a_safety_report(hostile):
    ckpt = tensorloupe.open(hostile["plain_evil.pkl"])
    assert ckpt.format == "pickle" and ckpt.tensors == []
    assert ckpt.extras["safety"]["dangerous"] == ["builtins.open"]
    assert "unpickles its first 57 bytes" in ckpt.extras["safety"]["notes"][0]


def test_build_on_a_global_is_flagged(hostile):
    safety = tensorloupe.open(hostile["build_on_global.pt"]).extras["safety"]
    row = next(g for g in safety["globals"] if g["name"] == "torch._utils._rebuild_tensor_v2")
    assert row["verdict"] == "dangerous" and "BUILD sets its attributes" in row["reason"]
    assert "torch._utils._rebuild_tensor_v2" in safety["dangerous"]


def test_the_command_a_call_carries_is_shown(hostile):
    command = f"touch {hf.CANARY}; echo pwned"
    ckpt = tensorloupe.open(hostile["command_call.pt"])
    assert ckpt.extras["safety"]["calls"] == [{"global": "os.system", "args": [command]}]
    out = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect",
                          str(hostile["command_call.pt"])], capture_output=True, text=True,
                         env=PYLIB_ENV)
    assert f'call never made: os.system("{command}")' in out.stdout
    assert "DANGEROUS  os.system  ×1  (runs a shell command)" in out.stdout
    report = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", "--json",
                             str(hostile["command_call.pt"])], capture_output=True, text=True,
                            env=PYLIB_ENV)
    assert json.loads(report.stdout)["extras"]["safety"]["calls"][0]["args"] == [command]


def test_huge_ints_in_shapes_and_storages_give_problems_not_tracebacks(hostile):
    # 10**5000: str() of it raises ValueError (more than 4,300 digits)
    (tensor,) = tensorloupe.open(hostile["big_int_shape.pt"]).tensors
    assert "not integers in 0..2**63-1" in tensor.problem
    json.dumps(tensor.to_json())
    for args in (["inspect"], ["inspect", "--json"]):
        run = subprocess.run([sys.executable, "-m", "tensorloupe.cli", *args,
                              str(hostile["big_int_shape.pt"])], capture_output=True, text=True,
                             env=PYLIB_ENV)
        assert run.returncode == 0 and "Traceback" not in run.stderr
    with pytest.raises(FormatError, match="invalid key or element count"):
        tensorloupe.open(hostile["big_int_storage.pt"])
    with pytest.raises(FormatError, match="unknown legacy serialization version"):
        tensorloupe.open(hostile["legacy_big_version.pt"])


def test_a_deeply_nested_plain_pickle_is_refused_not_recursed(hostile):
    with pytest.raises(LimitError, match="nest deeper than 200"):
        tensorloupe.open(hostile["deep_first_pickle.pt"])


def test_hash_flooding_keys_cost_nothing(hostile):
    # 40,000 keys k*(2**61-1) all hash to 0: the dict took 9 s (80,000: 37 s) before the keys
    # whose hash a pickle can choose were wrapped
    start = time.perf_counter()
    ckpt = tensorloupe.open(hostile["hash_flood.pt"])
    assert time.perf_counter() - start < 5
    assert ckpt.metadata["…"] == "39,937 more entries" and len(ckpt.metadata) == 64
    with pytest.raises(LimitError, match="memo index"):
        tensorloupe.open(hostile["memo_flood.pt"])


def peak_rss_mb(path: Path) -> tuple[str, int]:
    """Open `path` in a fresh interpreter: (its one-line outcome, its peak RSS in MB)."""
    # VmHWM, not ru_maxrss: Linux keeps the forking parent's (pytest + torch) ru_maxrss across exec
    code = ("import re, sys, tensorloupe\n"
            "try:\n    tensorloupe.open(sys.argv[1]); out = 'opened'\n"
            "except tensorloupe.TensorloupeError as e:\n    out = str(e)\n"
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
            "print(int(hwm) // 1024, out)")
    run = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         timeout=120, env=PYLIB_ENV)
    peak, out = run.stdout.split(" ", 1)
    return out, int(peak)


def test_the_stack_bomb_stops_at_the_object_limit(hostile):
    # 15M EMPTY_LISTs in a 31 KB file (deflated): ~1 GB of lists before, 222 MB when 2.5M
    # objects were counted; now 80 MiB of objects, counted by their size as they are built
    out, peak = peak_rss_mb(hostile["stack_bomb.pt"])
    assert "builds more than 80 MiB of objects" in out
    assert peak < 160


def test_the_memo_laughs_fail_before_any_name_is_built(hostile):
    # 10**9 names from 1 KB: 194 MB were built before the limit fired
    out, peak = peak_rss_mb(hostile["laughs.pt"])
    assert "names more than 65,536 tensors" in out
    assert peak < 60


def test_a_data_pkl_over_16_mib_is_refused_before_it_is_inflated(tmp_path):
    path = tf.write_torch_zip(tmp_path / "big.pt", b"\x80\x02}.", {})
    blob = bytearray(path.read_bytes())
    struct.pack_into("<I", blob, blob.index(b"PK\x01\x02") + 24, 20 << 20)  # 20 MiB declared
    path.write_bytes(bytes(blob))
    with pytest.raises(LimitError, match="data.pkl' is larger than the limit"):
        tensorloupe.open(path)


# Memory counted as it is built (bench/fuzz.py findings, issue 10): each of these passed 200 MB
# of RSS before its limit fired (or opened after 12 s and 633 MB).
BOMBS = {"tuple_chain.pt": ("nest deeper than 200 levels", 456),   # refused as it is built
         "memo_bomb.pt": ("builds more than 80 MiB of objects", None),
         "dict_bomb.pt": ("builds more than 80 MiB of objects", 206),
         "shared_names.pt": ("names more than 65,536 tensors", 633)}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_bomb_of_small_objects_stops_before_200_mb(hostile, name):
    words, _before_mb = BOMBS[name]
    out, peak = peak_rss_mb(hostile[name])
    assert words in out
    assert peak < 160
