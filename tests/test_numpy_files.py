"""NumPy .npy and .npz: files written by numpy.save / savez / savez_compressed, compared with
numpy.load element for element (every descr, both byte orders, Fortran order, format versions
1-3); object arrays as pickles through the allow-list machine; bytes read at open; hand-built
attacks on the header; the CLI."""

import io
import json
import pickle
import struct
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import numpy_files as fx  # noqa: E402

import tensorloupe  # noqa: E402
from tensorloupe import cli  # noqa: E402
from tensorloupe.errors import FormatError, LimitError, TensorloupeError, TruncatedError  # noqa: E402
from tensorloupe.formats.numpy import header, npy, npz  # noqa: E402
from tensorloupe.source.base import MemorySource  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return fx.write_all(tmp_path_factory.mktemp("numpy"))


def assert_equal_to(t, expected: np.ndarray) -> None:
    assert t.problem is None, t.problem
    assert t.shape == expected.shape
    ours = np.array(tensorloupe.values(t, 0, t.numel), dtype=expected.dtype.newbyteorder("="))
    assert np.array_equal(ours.reshape(expected.shape), expected, equal_nan=expected.dtype.kind in "fc")
    if expected.dtype.kind == "f":
        assert np.array_equal(np.signbit(ours), np.signbit(expected.reshape(-1)))


def test_every_npy_equals_numpy_load(files):
    checked = 0
    for key, path in files.items():
        if path.suffix != ".npy":
            continue
        expected = np.load(path, allow_pickle=False) if key != "npy_objects" else None
        with tensorloupe.open(path) as ckpt:
            assert ckpt.format == "npy"
            (t,) = ckpt.tensors
            if expected is None or expected.dtype.kind in "UV":
                assert t.problem
                continue
            assert_equal_to(t, expected)
            assert t.numpy().tolist() == expected.tolist() or expected.dtype.kind in "fc"
            checked += 1
    assert checked >= len(fx.DESCRS) + 3


def test_fortran_order_is_strides_not_a_copy(files):
    expected = np.load(files["npy_v2"])
    assert np.isfortran(expected)
    with tensorloupe.open(files["npy_v2"]) as ckpt:
        t = ckpt.tensors[0]
        assert t.strides == (1, 4) and ckpt.metadata["npy_version"] == "2.0"
        assert_equal_to(t, expected)


@pytest.mark.parametrize("key", ["npz_arrays", "npz_compressed"])
def test_npz_equals_numpy_load(files, key):
    with np.load(files[key]) as theirs, tensorloupe.open(files[key]) as ckpt:
        assert ckpt.format == "npz"
        assert [t.name for t in ckpt.tensors] == list(theirs.keys())
        for t in ckpt.tensors:
            assert_equal_to(t, theirs[t.name])


def test_stored_npz_opens_reading_directory_and_headers_only(files):
    with tensorloupe.open(files["npz_arrays"]) as ckpt:
        assert ckpt.bytes_read() <= 64 << 10 or ckpt.bytes_read() < files["npz_arrays"].stat().st_size
        first = ckpt.tensors[0]
        raw = files["npz_arrays"].read_bytes()
        assert raw[first.offset:first.offset + first.nbytes] == np.load(files["npz_arrays"])[first.name].tobytes(order="A")


def test_deflated_npz_says_its_cost(files, tmp_path):
    with tensorloupe.open(files["npz_compressed"]) as ckpt:
        assert ckpt.extras["npz"]["deflated"] == 7
        assert any("savez_compressed" in w for w in ckpt.warnings)
        assert ckpt.tensor("big").known_file_offset is None
    # opening inflates the members' headers only: a few KiB of each, not the members
    path = tmp_path / "big.npz"
    rng = np.random.default_rng(0)
    np.savez_compressed(path, a=rng.standard_normal(1 << 18), b=rng.standard_normal(1 << 18))
    with tensorloupe.open(path) as ckpt:
        # the first 64 KiB block, the block of the directory, 4 KiB of each member
        assert ckpt.bytes_read() <= 2 * (64 << 10) + 2 * 4096 < path.stat().st_size // 10
        assert_equal_to(ckpt.tensor("b"), np.load(path)["b"])


def test_object_array_is_a_pickle_read_as_data(files):
    with tensorloupe.open(files["npy_objects"]) as ckpt:
        (t,) = ckpt.tensors
        assert t.dtype == "OBJECT" and "pickle" in t.problem
        assert ckpt.extras["safety"]["dangerous"] == []
        assert any(g["name"].endswith("_reconstruct") for g in ckpt.extras["safety"]["globals"])


class Evil:
    def __reduce__(self):
        import os
        return (os.system, ("echo owned",))


def test_object_array_naming_a_dangerous_global_is_reported():
    # an .npy whose object pickle calls os.system: numpy.load(allow_pickle=True) would run it
    body = pickle.dumps(Evil(), protocol=3)
    text = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    text += " " * (-(10 + len(text) + 1) % 64) + "\n"
    data = header.MAGIC + b"\x01\x00" + struct.pack("<H", len(text)) + text.encode() + body
    ckpt = npy.read(MemorySource(data, "evil.npy"))
    assert any("system" in name for name in ckpt.extras["safety"]["dangerous"])
    assert any("dangerous" in w for w in ckpt.warnings)


# --- hostile headers: one attack per test ---------------------------------------------------

def npy_bytes(text: str, body: bytes = b"", version: int = 1) -> bytes:
    raw = text.encode("latin-1")
    length = struct.pack("<H" if version == 1 else "<I", len(raw))
    return header.MAGIC + bytes([version, 0]) + length + raw + body


def opened(data: bytes):
    return npy.read(MemorySource(data, "x.npy"))


def test_known_answer_bytes():
    data = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n",
                     struct.pack("<2f", 1.5, -2.0))
    assert tensorloupe.values(opened(data).tensors[0], 0, 2) == [1.5, -2.0]


def test_header_is_never_evaluated():
    # a header that is Python code, not a literal: eval would run it
    with pytest.raises(FormatError, match="not a Python literal"):
        opened(npy_bytes("__import__('os').system('echo owned')\n"))


def test_header_with_other_keys():
    with pytest.raises(FormatError, match="not the dict numpy writes"):
        opened(npy_bytes("{'descr': '<f4', 'shape': (2,), 'extra': 1}\n"))


def test_header_nested_too_deep():
    with pytest.raises(LimitError, match="nests deeper"):
        opened(npy_bytes("{'descr': " + "(" * 40 + ")" * 40 + "}\n"))


def test_header_length_past_the_end():
    with pytest.raises(TruncatedError, match="header runs past the end"):
        opened(header.MAGIC + b"\x01\x00" + struct.pack("<H", 5000) + b"{}")


def test_header_longer_than_the_limit():
    with pytest.raises(LimitError, match="longer than the limit"):
        opened(header.MAGIC + b"\x02\x00" + struct.pack("<I", 1 << 30))


def test_unknown_version():
    with pytest.raises(FormatError, match="unknown .npy format version 9.0"):
        opened(header.MAGIC + b"\x09\x00" + b"\0" * 8)


def test_data_shorter_than_the_shape():
    data = npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1000,), }\n", b"\0" * 16)
    with pytest.raises(TruncatedError, match="needs 8,000 bytes"):
        opened(data)


def test_negative_dimension():
    with pytest.raises(FormatError, match="not a tuple of sizes"):
        opened(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }\n"))


def test_npz_member_encrypted_or_other_method():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_BZIP2) as z:
        z.writestr("a.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n", b"\0" * 4))
    with pytest.raises(TensorloupeError, match="method 12"):
        npz.read(MemorySource(buffer.getvalue(), "x.npz"))


def test_npz_zip_bomb_is_capped(monkeypatch):
    from tensorloupe.formats.archives import members
    monkeypatch.setattr(members, "MAX_INFLATED", 1 << 16)
    buffer = io.BytesIO()
    body = b"\0" * (1 << 20)
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.npy", npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (1048576,), }\n", body))
    ckpt = npz.read(MemorySource(buffer.getvalue(), "x.npz"))
    with pytest.raises(LimitError, match="inflated past the limit"):
        tensorloupe.values(ckpt.tensors[0], (1 << 20) - 4, 4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_corruption_raises_only_our_errors(files, data):
    path = files[data.draw(st.sampled_from(["npy_le_f4", "npy_be_c8", "npz_arrays", "npz_compressed"]))]
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 6))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(raw[:data.draw(st.integers(1, len(raw)))])
    try:
        ckpt = tensorloupe.open(raw, name=path.name)
        for t in ckpt.tensors[:4]:
            if t.problem is None:
                tensorloupe.values(t, 0, min(t.numel, 8))
    except TensorloupeError:
        pass


def test_cli_on_npz(files, capsys):
    assert cli.main(["inspect", "--json", str(files["npz_arrays"])]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "npz"
    name = report["tensors"][0]["name"]
    assert cli.main(["values", str(files["npz_arrays"]), name]) == 0
    capsys.readouterr()
    for argv in (["stats", str(files["npz_compressed"]), "big"], ["health", str(files["npz_arrays"])],
                 ["diff", str(files["npz_arrays"]), str(files["npz_arrays"])]):
        assert cli.main(argv) == 0, argv
        capsys.readouterr()
