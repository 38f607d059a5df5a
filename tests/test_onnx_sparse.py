"""ONNX sparse initializers (shown dense) and Constant nodes (listed under their node's name),
compared element for element with onnx's own readings: numpy_helper.to_array of the values and
indices placed into zeros, and onnx.reference.ReferenceEvaluator running each Constant node;
hand-built protobuf attacks, one per test."""

import struct
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnx_files as fx  # noqa: E402
from inline_bytes import field, varint  # noqa: E402

import tensorloupe  # noqa: E402
from tensorloupe.errors import FormatError, LimitError  # noqa: E402
from tensorloupe.formats.onnx import constants, reader  # noqa: E402
from tensorloupe.source.base import MemorySource  # noqa: E402
from test_onnx import assert_same_values, tensor_proto  # noqa: E402


OUT = Path(__file__).resolve().parents[1] / "fixtures" / "out" / "onnx"
USED = {"onnx_sparse": "sparse.onnx", "onnx_constants": "constants.onnx",
        "onnx_exported_constants": "exported_constants/model.onnx"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """fixtures/out/onnx (fixtures/make.py writes it: onnx_files.py), else written here."""
    if all((OUT / name).exists() for name in USED.values()):
        return {key: OUT / name for key, name in USED.items()}
    return fx.write_all(tmp_path_factory.mktemp("onnx_sparse"))


def dense_of(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """onnx's own reading of a sparse tensor's parts, placed into a dense array."""
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices)
    dims = tuple(sparse.dims)
    dense = np.zeros(int(np.prod(dims)), dtype=values.dtype)
    linear = (np.ravel_multi_index(tuple(indices.T), dims) if indices.ndim == 2 and len(dims) != 1
              else indices.reshape(-1))
    dense[linear] = values
    return dense.reshape(dims)


def test_sparse_initializers_equal_their_dense_values(files):
    model = onnx.load(str(files["onnx_sparse"]))
    ckpt = tensorloupe.open(files["onnx_sparse"])
    assert not ckpt.warnings
    by_name = {t.name: t for t in ckpt.tensors}
    assert list(by_name) == ["dense"] + [s.values.name for s in model.graph.sparse_initializer]
    for sparse in model.graph.sparse_initializer:
        t = by_name[sparse.values.name]
        expected = dense_of(sparse)
        assert t.problem is None and t.shape == expected.shape
        assert t.info["sparse"]["nonzero"] == numpy_helper.to_array(sparse.values).size
        assert_same_values(tensorloupe.values(t, 0, t.numel), expected, t.name)
        assert np.array_equal(t.numpy(), expected)
        # a range inside the tensor: zeros and listed values, element for element
        assert_same_values(tensorloupe.values(t, 3, min(5, t.numel - 3)),
                           expected.reshape(-1)[3:3 + min(5, t.numel - 3)], t.name)
    assert {p.name for p in by_name["sparse_linear"].parts} == {"sparse_linear (values)",
                                                                "sparse_linear (indices)"}


def constant_outputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """onnx.reference's value of every Constant node of the graph, by its output name (a
    sparse_value's is its parts placed into zeros: onnx.reference cannot return it)."""
    nodes = [n for n in model.graph.node if n.op_type == "Constant"
             and n.attribute[0].name != "sparse_value"]
    sparse = {n.output[0]: dense_of(n.attribute[0].sparse_tensor) for n in model.graph.node
              if n.op_type == "Constant" and n.attribute[0].name == "sparse_value"}
    outputs = [helper.make_empty_tensor_value_info(n.output[0]) for n in nodes]
    graph = helper.make_graph(nodes, "constants", [], outputs)
    only = helper.make_model(graph, opset_imports=list(model.opset_import))
    return {**dict(zip([n.output[0] for n in nodes], ReferenceEvaluator(only).run(None, {}))), **sparse}


@pytest.mark.parametrize("key", ["onnx_constants", "onnx_exported_constants"])
def test_constant_nodes_equal_onnx_reference(files, key):
    model = onnx.load(str(files[key]))
    theirs = constant_outputs(model)
    assert theirs
    ckpt = tensorloupe.open(files[key])
    listed = {t.info.get("output"): t for t in ckpt.tensors if t.info.get("onnx") == "Constant node"}
    assert set(listed) == set(theirs)
    for node in (n for n in model.graph.node if n.op_type == "Constant"):
        t = listed[node.output[0]]
        assert t.name == (node.name or node.output[0])
        expected = np.asarray(theirs[node.output[0]])
        if expected.dtype.kind in "OUS":     # value_string(s)
            assert t.problem and "strings" in t.problem
            continue
        if node.attribute[0].name == "value":
            assert np.array_equal(expected, numpy_helper.to_array(node.attribute[0].t))
        assert t.problem is None, (t.name, t.problem)
        assert t.shape == expected.shape, t.name
        assert_same_values(tensorloupe.values(t, 0, t.numel), expected, t.name)
    assert ckpt.metadata["constants"] == len(theirs)
    assert [t.name for t in ckpt.tensors][:len(model.graph.initializer)] == \
        [i.name for i in model.graph.initializer]


def test_constant_types_follow_onnx(files):
    ckpt = tensorloupe.open(files["onnx_constants"])
    dtypes = {t.name: (t.dtype, t.shape) for t in ckpt.tensors}
    assert dtypes["value_float"] == ("F32", ())
    assert dtypes["value_ints"] == ("I64", (4,))
    assert dtypes["value_int"] == ("I64", ())
    assert dtypes["c_unnamed"] == ("I8", (5,))    # a node without a name: its output's


def test_cli_lists_sparse_and_constants(files, capsys):
    from tensorloupe import cli
    import json
    assert cli.main(["inspect", "--json", str(files["onnx_sparse"])]) == 0
    out = json.loads(capsys.readouterr().out)
    tensors = {t["name"]: t for t in out["tensors"]}
    assert tensors["sparse_coords"]["shape"] == [3, 4, 2]
    assert tensors["sparse_coords"]["info"]["sparse"]["indices"] == "coordinates"


# --- hostile inputs: one attack per test -----------------------------------------------------

def model(graph: bytes) -> bytes:
    return b"\x08\x09" + field(7, graph)


def i64_tensor(name: bytes, values, dims) -> bytes:
    return tensor_proto(name=name, dims=dims, data_type=7, raw=struct.pack(f"<{len(values)}q", *values))


def sparse_graph(indices, index_dims=None, dense=(2, 3), values=(1.0, 2.0)) -> bytes:
    v = tensor_proto(name=b"s", dims=(len(values),), raw=struct.pack(f"<{len(values)}f", *values))
    i = i64_tensor(b"s_i", indices, index_dims or (len(indices),))
    body = field(1, v) + field(2, i) + b"".join(b"\x18" + varint(d) for d in dense)
    return model(field(15, body))


def dense_values(data: bytes):
    ckpt = reader.read(MemorySource(data, "m.onnx"))
    t = ckpt.tensor("s")
    return t, (lambda: tensorloupe.values(t, 0, t.numel))


def test_known_answer_sparse_bytes():
    t, values = dense_values(sparse_graph([1, 5]))
    assert t.shape == (2, 3) and values() == [0.0, 1.0, 0.0, 0.0, 0.0, 2.0]


def test_sparse_index_outside_the_shape():
    # index 6 of a 2x3 tensor would write past the dense buffer
    _, values = dense_values(sparse_graph([1, 6]))
    with pytest.raises(FormatError, match="index 6 .* outside its 6 elements"):
        values()


def test_sparse_indices_out_of_order():
    # onnx's checker requires ascending indices; a reader that sorted would show another tensor
    _, values = dense_values(sparse_graph([4, 1]))
    with pytest.raises(FormatError, match="not after index 4"):
        values()


def test_sparse_index_repeated():
    # two values for one element: which one is meant is not said
    _, values = dense_values(sparse_graph([2, 2]))
    with pytest.raises(FormatError, match="ascending indices, no repeats"):
        values()


def test_sparse_coordinate_outside_the_shape():
    _, values = dense_values(sparse_graph([0, 1, 2, 0], index_dims=(2, 2)))
    with pytest.raises(FormatError, match=r"coordinate \[2, 0\] is outside"):
        values()


def test_sparse_indices_of_the_wrong_shape_are_a_problem_not_values():
    t, _ = dense_values(sparse_graph([0, 1, 2], index_dims=(3,)))
    assert t.problem.startswith("sparse: its indices have shape [3] for 2 values")


def test_sparse_indices_not_int64_are_a_problem():
    v = tensor_proto(name=b"s", dims=(1,), raw=struct.pack("<f", 1.0))
    i = tensor_proto(name=b"s_i", dims=(1,), data_type=6, raw=struct.pack("<i", 0))
    t = reader.read(MemorySource(model(field(15, field(1, v) + field(2, i) + b"\x18\x02")), "m.onnx")).tensor("s")
    assert t.problem == "sparse: its indices are INT32, not INT64"


def constant_node(name: bytes, attribute: bytes) -> bytes:
    return model(field(1, field(2, b"out") + field(3, name) + field(4, b"Constant") + field(5, attribute)))


def test_known_answer_constant_value_floats_packed():
    attr = field(1, b"value_floats") + field(7, struct.pack("<2f", 0.5, -1.0)) + b"\xa0\x01\x06"
    ckpt = reader.read(MemorySource(constant_node(b"c", attr), "m.onnx"))
    t = ckpt.tensor("c")
    assert t.shape == (2,) and tensorloupe.values(t, 0, 2) == [0.5, -1.0]


def test_constant_packed_floats_of_a_partial_value():
    # 6 bytes of float32s: one and a half values
    attr = field(1, b"value_floats") + field(7, b"\x00" * 6)
    with pytest.raises(FormatError, match="needs 4 bytes but its typed field holds 6"):
        reader.read(MemorySource(constant_node(b"c", attr), "m.onnx"))


def test_constant_ints_over_the_limit(monkeypatch):
    monkeypatch.setattr(constants, "MAX_LISTED_VALUES", 3)
    attr = field(1, b"value_ints") + field(8, b"\x01\x02\x03\x04")
    with pytest.raises(LimitError, match="more values than the limit"):
        reader.read(MemorySource(constant_node(b"c", attr), "m.onnx"))


def test_constant_named_like_an_initializer_takes_its_output_name():
    attr = field(1, b"value_int") + b"\x18\x05"
    graph = field(5, tensor_proto(name=b"c", raw=struct.pack("<2f", 1, 2)))
    graph += field(1, field(2, b"out") + field(3, b"c") + field(4, b"Constant") + field(5, attr))
    ckpt = reader.read(MemorySource(model(graph), "m.onnx"))
    assert [t.name for t in ckpt.tensors] == ["c", "out"]
    assert tensorloupe.values(ckpt.tensor("out"), 0, 1) == [5]
