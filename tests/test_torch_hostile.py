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
    assert set(sys.modules) == modules  # nothing imported, not even argparse or subprocess
    assert set(dangerous) <= set(ckpt.extras["safety"]["dangerous"])
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


def test_unregistered_extension_code_is_an_inert_unknown(tmp_path):
    ckpt = tensorloupe.open(evil_zip(tmp_path, b"\x80\x02\x82\xf2" + text("x") + b"\x85R."))
    (entry,) = ckpt.extras["safety"]["globals"]
    assert entry["verdict"] == "unknown" and "unregistered_code_242" in entry["name"]


# --- resource bombs: one per test, each with its own clear error ------------------------------------

def open_bomb(tmp_path, data_pkl: bytes):
    start = time.perf_counter()
    try:
        return tensorloupe.open(evil_zip(tmp_path, data_pkl))
    finally:
        assert time.perf_counter() - start < 10


def test_deep_mark_nesting(tmp_path):
    with pytest.raises(LimitError, match="MARKs nest deeper than 1000"):
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
    with pytest.raises(LimitError, match="nests deeper than 100"):
        open_bomb(tmp_path, b"\x80\x02}" + b")" + b"\x85" * 5000 + b"K\x01s.")


def test_exponential_tuple_key(tmp_path):
    # each DUP + TUPLE2 doubles the tuple a hash would visit: 2**80 after 80 steps
    with pytest.raises(LimitError, match="expands to more than"):
        open_bomb(tmp_path, b"\x80\x02}" + b")" + b"2\x86" * 80 + b"K\x01s.")


def test_huge_declared_string_length(tmp_path):
    with pytest.raises(LimitError, match="declares 4611686018427387904 bytes"):
        open_bomb(tmp_path, b"\x80\x04\x8d" + struct.pack("<Q", 1 << 62) + b"x.")


def test_huge_declared_bytes_length(tmp_path):
    with pytest.raises(LimitError, match="declares 4294967280 bytes"):
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
