"""ONNX reader: files written by torch.onnx.export and onnx.helper, compared with onnx's own loader
(onnx.load(load_external_data=True) + numpy_helper.to_array), element for element; the graph's
metadata; bytes read at open; hand-built protobuf attacks, one per test; the CLI."""

import json
import math
import struct

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import numpy_helper

import onnx_files as fx  # noqa: E402
from inline_bytes import field, varint  # noqa: E402

import tensorloupe  # noqa: E402
from tensorloupe import cli  # noqa: E402
from tensorloupe.errors import FormatError, LimitError, TensorloupeError, TruncatedError  # noqa: E402
from tensorloupe.formats.onnx import reader  # noqa: E402
from tensorloupe.source.base import MemorySource  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return fx.write_all(tmp_path_factory.mktemp("onnx"))


def as_compared(values: np.ndarray) -> np.ndarray:
    """Values as float64 / complex128 / int, for an exact comparison with NaNs equal."""
    if values.dtype.kind == "c":
        return values.astype(np.complex128).reshape(-1)
    if values.dtype.kind in "iub":
        return values.astype(object if values.dtype == np.uint64 else np.int64).reshape(-1)
    return values.astype(np.float64).reshape(-1)


def assert_same_values(ours: list, theirs: np.ndarray, name: str) -> None:
    expected = as_compared(theirs)
    got = np.array(ours, dtype=expected.dtype)
    assert got.shape == expected.shape, name
    if expected.dtype.kind == "f":
        assert np.array_equal(got, expected, equal_nan=True), name
        numbers = ~np.isnan(expected)     # -0.0 stays -0.0 (a NaN's sign is no value)
        assert np.array_equal(np.signbit(got[numbers]), np.signbit(expected[numbers])), name
    else:
        assert got.tolist() == expected.tolist(), name


def assert_matches_onnx(path) -> tensorloupe.Checkpoint:
    model = onnx.load(str(path), load_external_data=True)
    ckpt = tensorloupe.open(path)
    theirs = {t.name: t for t in model.graph.initializer}
    assert [t.name for t in ckpt.tensors] == list(theirs)
    for t in ckpt.tensors:
        proto = theirs[t.name]
        assert t.shape == tuple(proto.dims), t.name
        assert t.info["onnx_type"] == onnx.TensorProto.DataType.Name(proto.data_type)
        if proto.data_type == onnx.TensorProto.STRING:
            assert t.problem and "strings" in t.problem
            continue
        array = numpy_helper.to_array(proto)
        assert t.problem is None, (t.name, t.problem)
        assert_same_values(tensorloupe.values(t, 0, t.numel), array, t.name)
    return ckpt


@pytest.mark.parametrize("key", ["onnx_exported", "onnx_exported_external", "onnx_types",
                                 "onnx_typed", "onnx_external", "onnx_strings"])
def test_every_value_equals_onnx(files, key):
    with assert_matches_onnx(files[key]) as ckpt:
        assert ckpt.format == "onnx"


def test_every_data_type_is_mapped(files):
    """Every numeric TensorProto.DataType is an initializer of types.onnx, with our dtype."""
    with tensorloupe.open(files["onnx_types"]) as ckpt:
        got = {t.info["onnx_type"]: t.dtype for t in ckpt.tensors}
    numeric = {n for n, code in onnx.TensorProto.DataType.items() if code not in (0, 8)}
    assert numeric <= set(got)
    assert got["INT4"] == "I4" and got["FLOAT4E2M1"] == "F4" and got["BFLOAT16"] == "BF16"


def test_numpy_method_equals_onnx(files):
    model = onnx.load(str(files["onnx_types"]))
    with tensorloupe.open(files["onnx_types"]) as ckpt:
        for proto in model.graph.initializer:
            if proto.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64,
                                   onnx.TensorProto.COMPLEX64, onnx.TensorProto.FLOAT16):
                assert np.array_equal(ckpt.tensor(proto.name).numpy(), numpy_helper.to_array(proto))


def test_metadata_is_the_graph(files):
    with tensorloupe.open(files["onnx_exported"]) as ckpt:
        meta = ckpt.metadata
    model = onnx.load(str(files["onnx_exported"]))
    assert meta["ir_version"] == model.ir_version
    assert meta["producer_name"] == model.producer_name == "pytorch"
    assert meta["opset_import"] == {"ai.onnx": model.opset_import[0].version}
    assert meta["op_counts"] == {"Gemm": 2, "Relu": 1}
    assert meta["inputs"] == [{"name": "x", "type": "FLOAT", "shape": [1, 8]}]
    assert meta["outputs"] == [{"name": "y", "type": "FLOAT", "shape": [1, 4]}]


def test_raw_data_is_pointed_at_in_place(files):
    """A raw_data tensor's offset is where its bytes are in the .onnx file."""
    data = files["onnx_exported"].read_bytes()
    array = numpy_helper.to_array(onnx.load(str(files["onnx_exported"])).graph.initializer[0])
    with tensorloupe.open(files["onnx_exported"]) as ckpt:
        t = ckpt.tensors[0]
        assert data[t.offset:t.offset + t.nbytes] == array.tobytes()


def test_external_data_is_read_by_range_beside_the_model(files):
    with tensorloupe.open(files["onnx_exported_external"]) as ckpt:
        assert ckpt.bytes_read() <= files["onnx_exported_external"].stat().st_size
        assert ckpt.extras["onnx"]["external_files"] == ["model.onnx.data"]
        assert {t.file for t in ckpt.tensors} == {"model.onnx.data"}
        tensorloupe.values(ckpt.tensors[0], 0, 4)
        assert len(ckpt.sources) == 2


def test_external_data_missing_is_a_problem_not_a_crash(files, tmp_path):
    lone = tmp_path / "model.onnx"
    lone.write_bytes(files["onnx_exported_external"].read_bytes())
    with tensorloupe.open(lone) as ckpt:
        assert all("not beside the model" in t.problem for t in ckpt.tensors)
        assert any("model.onnx.data" in w and "cannot be opened" in w for w in ckpt.warnings)


def test_model_and_data_given_together_open_as_one(files):
    folder = files["onnx_exported_external"].parent
    with tensorloupe.open([folder / "model.onnx", folder / "model.onnx.data"]) as ckpt:
        assert len(ckpt.tensors) == 4 and all(t.problem is None for t in ckpt.tensors)
    with tensorloupe.open(folder) as ckpt:          # the folder: the model and its data
        assert len(ckpt.tensors) == 4


def test_bytes_given_with_their_data_file_by_name(files):
    """Sources without a folder (bytes): the data file given beside it is found by name."""
    from tensorloupe.opening import shards
    folder = files["onnx_exported_external"].parent
    sources = [MemorySource((folder / n).read_bytes(), n) for n in ("model.onnx", "model.onnx.data")]
    ckpt = shards.open_all(sources)
    assert [round(v, 6) for v in tensorloupe.values(ckpt.tensors[-1], 0, 2)] == \
        [round(float(v), 6) for v in numpy_helper.to_array(
            onnx.load(str(files["onnx_exported"])).graph.initializer[-1])[:2]]


# --- hostile inputs: one attack per test -----------------------------------------------------

def model(graph: bytes) -> bytes:
    return b"\x08\x09" + field(7, graph)


def tensor_proto(name=b"w", dims=(2,), data_type=1, raw=None, external=None) -> bytes:
    out = b"".join(b"\x08" + varint(d) for d in dims) + b"\x10" + varint(data_type)
    out += field(8, name)
    if raw is not None:
        out += field(9, raw)
    for key, value in (external or {}).items():
        out += field(13, field(1, key.encode()) + field(2, value.encode()))
    if external:
        out += b"\x70\x01"
    return out


def opened(data: bytes, name="m.onnx"):
    return reader.read(MemorySource(data, name))


def test_known_answer_bytes():
    data = model(field(5, tensor_proto(raw=struct.pack("<2f", 1.5, -2.0))))
    ckpt = opened(data)
    assert tensorloupe.values(ckpt.tensors[0], 0, 2) == [1.5, -2.0]
    assert reader.sniff(data, len(data), "m.onnx")


def test_truncated_varint():
    # a varint whose every byte says "more follows", cut by the end of the file
    with pytest.raises(TruncatedError, match="varint runs past the end"):
        opened(b"\x08\xff\xff")


def test_overlong_varint():
    with pytest.raises(FormatError, match="longer than 10 bytes"):
        opened(b"\x08" + b"\xff" * 11 + b"\x01")


def test_length_past_the_end():
    # the graph field claims 1,000 bytes in a file of 8
    with pytest.raises(TruncatedError, match="past the end of its message"):
        opened(b"\x08\x09\x3a" + varint(1000) + b"abc")


def test_raw_data_longer_than_its_tensor_message():
    inner = tensor_proto(raw=b"\0" * 8)
    graph = field(5, inner)[:-4]       # the initializer's length says 4 bytes less than its raw_data
    with pytest.raises(TruncatedError):
        opened(model(graph))


def test_group_wire_type_is_refused():
    with pytest.raises(FormatError, match="wire type 3"):
        opened(b"\x08\x09\x3b")


def test_raw_data_of_the_wrong_size():
    with pytest.raises(FormatError, match="needs 8 bytes but raw_data holds 4"):
        opened(model(field(5, tensor_proto(raw=b"\0" * 4))))


def test_too_many_dims():
    with pytest.raises(LimitError, match="more than 64 dims"):
        opened(model(field(5, tensor_proto(dims=(1,) * 65, raw=b"\0" * 4))))


@pytest.mark.parametrize("location", ["../../etc/passwd", "/etc/passwd", "a/../../b",
                                      "C:\\Windows\\win.ini", "..\\secret", ""])
def test_location_that_escapes_the_folder_is_refused(location):
    data = model(field(5, tensor_proto(external={"location": location, "offset": "0",
                                                  "length": "8"})))
    with pytest.raises(FormatError, match="not a file name inside the model's folder"):
        opened(data)


def test_external_data_past_the_end_of_its_file(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\0" * 12)
    data = model(field(5, tensor_proto(external={"location": "w.bin", "offset": "8",
                                                  "length": "8"})))
    (tmp_path / "m.onnx").write_bytes(data)
    with pytest.raises(TruncatedError, match="runs past the end of 'w.bin'"):
        tensorloupe.open(tmp_path / "m.onnx")


def test_external_offset_not_a_number():
    data = model(field(5, tensor_proto(external={"location": "w.bin", "offset": "1e3"})))
    with pytest.raises(FormatError, match="not a number"):
        opened(data)


def test_duplicate_initializer_names():
    one = field(5, tensor_proto(raw=b"\0" * 8))
    with pytest.raises(FormatError, match="used twice"):
        opened(model(one + one))


def test_not_onnx_without_ir_version():
    with pytest.raises(FormatError, match="no ir_version"):
        opened(field(7, b""))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_corruption_raises_only_our_errors(files, data):
    raw = bytearray(files["onnx_types"].read_bytes())
    for _ in range(data.draw(st.integers(1, 6))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(1, len(raw)))
    try:
        ckpt = opened(bytes(raw[:cut]))
        for t in ckpt.tensors[:8]:
            if t.problem is None:
                tensorloupe.values(t, 0, min(t.numel, 8))
    except TensorloupeError:
        pass


# --- the CLI ----------------------------------------------------------------------------------

def test_cli_inspect_json_and_values(files, capsys):
    assert cli.main(["inspect", "--json", str(files["onnx_exported_external"])]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "onnx" and len(report["tensors"]) == 4
    assert report["metadata"]["op_counts"] == {"Gemm": 2, "Relu": 1}
    assert cli.main(["values", str(files["onnx_types"]), "i4"]) == 0
    expected = numpy_helper.to_array(next(t for t in onnx.load(str(files["onnx_types"])).graph.initializer
                                          if t.name == "i4")).reshape(-1).tolist()
    out = capsys.readouterr().out
    assert [int(line.split()[-1]) for line in out.splitlines()[1:]] == expected
    for argv in (["stats", str(files["onnx_types"]), "f32"], ["health", str(files["onnx_exported"])],
                 ["diff", str(files["onnx_exported"]), str(files["onnx_exported_external"])]):
        assert cli.main(argv) == 0, argv
        capsys.readouterr()


def test_cli_convert_to_safetensors(files, tmp_path, capsys):
    import safetensors.numpy
    out = tmp_path / "model.safetensors"
    assert cli.main(["convert", str(files["onnx_exported_external"]), str(out)]) == 0
    capsys.readouterr()
    written = safetensors.numpy.load_file(str(out))
    for proto in onnx.load(str(files["onnx_exported_external"]), load_external_data=True).graph.initializer:
        assert np.array_equal(written[proto.name], numpy_helper.to_array(proto))
    assert math.isfinite(float(written["0.weight"].sum()))
