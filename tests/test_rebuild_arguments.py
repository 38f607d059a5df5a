"""Allow-listed rebuild functions called with arguments torch would not take (issue 25): each is
refused with a sentence saying what in the file is wrong, never the interpreter's words
(`TypeError "'int' object is not subscriptable"` from a hostile _rebuild_qtensor)."""

import re
import struct

import pytest
import torch

import tensorloupe
from tensorloupe.errors import TensorloupeError

import torch_files as tf  # noqa: E402


class Global:
    def __init__(self, full: str):
        self.module, _, self.name = full.rpartition(".")


class Storage:
    """A persistent id ('storage', torch.FloatStorage, key, 'cpu', numel): data/<key>."""

    def __init__(self, key: str = "0", numel: int = 4):
        self.key, self.numel = key, numel


class Call:
    def __init__(self, function: str, *args):
        self.function, self.args = function, args


def encode(value) -> bytes:
    """Protocol 2 opcodes for the values these tests need."""
    if value is None:
        return b"N"
    if value is True or value is False:
        return b"\x88" if value else b"\x89"
    if type(value) is int:
        if value.bit_length() <= 31:
            return b"J" + struct.pack("<i", value)
        raw = value.to_bytes(value.bit_length() // 8 + 1, "little", signed=True)
        return b"\x8b" + struct.pack("<I", len(raw)) + raw     # LONG4: no decimal digits
    if type(value) is float:
        return b"G" + struct.pack(">d", value)
    if type(value) is str:
        return b"X" + struct.pack("<I", len(value.encode())) + value.encode()
    if type(value) is tuple:
        return b"(" + b"".join(map(encode, value)) + b"t"
    if type(value) is list:
        return b"](" + b"".join(map(encode, value)) + b"e"
    if type(value) is dict:
        return b"}(" + b"".join(encode(k) + encode(v) for k, v in value.items()) + b"u"
    if isinstance(value, Global):
        return b"c" + value.module.encode() + b"\n" + value.name.encode() + b"\n"
    if isinstance(value, Storage):
        return encode(("storage", Global("torch.FloatStorage"), value.key, "cpu",
                       value.numel)) + b"Q"
    if isinstance(value, Call):
        return encode(Global(value.function)) + encode(value.args) + b"R"
    raise AssertionError(type(value))


def open_pickled(tmp_path, obj):
    data_pkl = b"\x80\x02" + encode({"t": obj}) + b"."
    path = tf.write_torch_zip(tmp_path / "m.pt", data_pkl,
                              {"byteorder": b"little", "data/0": struct.pack("<4f", 0, 1, 2, 3)})
    return tensorloupe.open(path)


S = Storage()
QINT = Global("torch.per_tensor_affine")
QCHANNEL = Global("torch.per_channel_affine")
V2 = "torch._utils._rebuild_tensor_v2"
V3 = "torch._utils._rebuild_tensor_v3"
Q = "torch._utils._rebuild_qtensor"
META = "torch._utils._rebuild_meta_tensor_no_storage"
PARAM = "torch._utils._rebuild_parameter"
FROM_TYPE = "torch._tensor._rebuild_from_type_v2"
WRAP = "torch._utils._rebuild_wrapper_subclass"
F32, TENSOR = Global("torch.float32"), Global("torch.Tensor")
GOOD = Call(V2, S, 0, (4,), (1,), False, {})

# (function, arguments, words the refusal must hold)
MALFORMED = [
    (V2, (S, 0, (4,)), "with 3 arguments; it takes 6 to 7"),
    (V2, (7, 0, (4,), (1,), False, {}), "first argument that is not a storage"),
    (V2, (S, "0", (4,), (1,), False, {}), "storage offset that is not an integer"),
    (V2, (S, 0, 4, (1,), False, {}), "size that is not a sequence of integers"),
    (V2, (S, 0, (4,), 1, False, {}), "stride that is not a sequence of integers"),
    (V2, (S, 0, (4, 1.5), (1, 1), False, {}), "size that is not a sequence of integers"),
    (V2, (S, 0, (4, 1), (1,), False, {}), "2 sizes but 1 strides"),
    ("torch._utils._rebuild_tensor", (S, 0), "with 2 arguments; it takes 4"),
    (V3, (S, 0, (4,), (1,), False, {}, 5), "a dtype that is no torch dtype"),
    (V3, (S, 0, (4,), (1,), False, {}), "with 6 arguments; it takes 7 to 8"),
    # the case: the quantizer parameters are an int, not a tuple
    (Q, (S, 0, (4,), (1,), 5, False, {}), "quantizer parameters that are not a tuple"),
    (Q, (S, 0, (4,), (1,), (), False, {}), "quantizer parameters that are not a tuple"),
    (Q, (S, 0, (4,), (1,), (QINT, 0.5), False, {}), "not (qscheme, scale, zero_point)"),
    (Q, (S, 0, (4,), (1,), (QINT, "x", 3), False, {}), "not (qscheme, scale, zero_point)"),
    (Q, (S, 0, (4,), (1,), (QINT, 0.5, 1 << 70), False, {}), "not (qscheme, scale, zero_point)"),
    (Q, (S, 0, (4,), (1,), (QCHANNEL, 0.5, 3, 0), False, {}),
     "not (qscheme, scales, zero_points, axis)"),
    (Q, (S, 0, (4,), (1,), (QCHANNEL, GOOD, GOOD, 1), False, {}),
     "not (qscheme, scales, zero_points, axis)"),
    (Q, (S, 0, (4,), (1,), (Global("torch.strided"), 0.5, 3), False, {}),
     "a qscheme torch cannot rebuild"),
    (Q, (S, 0, 4, (1,), (QINT, 0.5, 3), False, {}), "size that is not a sequence of integers"),
    (Q, (S, 0, (4,)), "with 3 arguments; it takes 5 to 7"),
    (META, (Global("torch.float32"), 4, (1,)), "size that is not a sequence of integers"),
    (META, (3, (4,), (1,)), "a dtype that is no torch dtype"),
    (META, (Global("torch.float32"),), "with 1 arguments; it takes 3 to 4"),
    (PARAM, (), "with 0 arguments; it takes 1 to 4"),
    (FROM_TYPE, (Global(V2), Global("torch.Tensor"), 5, {}), "arguments for " + V2),
    (FROM_TYPE, (Global(V2), Global("torch.Tensor")), "with 2 arguments; it takes 4"),
    (FROM_TYPE, (Global(Q), Global("torch.Tensor"), (S, 0, (4,), (1,), 5, False, {}), {}),
     Q + " with quantizer parameters that are not a tuple"),   # the inner call is named
    (WRAP, (TENSOR, F32, (4,)), "with 3 arguments; it takes 8"),
    (WRAP, (TENSOR, 5, (4,), (1,), 0, None, None, False), "a dtype that is no torch dtype"),
    (WRAP, (TENSOR, F32, 4, (1,), 0, None, None, False), "size that is not a sequence of integers"),
    (WRAP, (TENSOR, F32, (4, 1), (1,), 0, None, None, False), "2 sizes but 1 strides"),
    ("collections.OrderedDict", ([1, 2],), "not (key, value) pairs"),
    ("_codecs.encode", (), "with 0 arguments; it takes 1 to 2"),
    ("_codecs.encode", (5, "latin1"), "other arguments than a str"),
    ("torch.Size", (4,), "arguments it does not take"),
    ("builtins.complex", (1 << 2000,), "a value it cannot hold"),
    ("builtins.complex", (1, 2, 3), "arguments it does not take"),
    ("builtins.slice", (), "a value it cannot hold"),
    ("numpy.core.multiarray.scalar", (), "with 0 arguments; it takes 1 to 2"),
]
# A Python exception's class name (TypeError, IndexError, struct.error, ...) in a message.
PYTHON_ERROR = re.compile(r"\b[A-Z][a-z]+(Error|Exception)\b|struct\.error|object is not|"
                          r"not subscriptable|not iterable|unpack")


@pytest.mark.parametrize("function, args, words", MALFORMED,
                         ids=[f"{f.rpartition('.')[2]}-{i}" for i, (f, _, _) in enumerate(MALFORMED)])
def test_a_rebuild_call_torch_would_not_take_says_what_is_wrong(tmp_path, function, args, words):
    with pytest.raises(TensorloupeError) as e:
        open_pickled(tmp_path, Call(function, *args))
    message = str(e.value)
    assert (function in message or function == FROM_TYPE) and words in message, message
    assert not PYTHON_ERROR.search(message), message


def test_a_storage_class_that_is_no_class_says_so(tmp_path):
    # ('storage', 5, '0', 'cpu', 4): was "malformed pickle at opcode BINPERSID: TypeError ..."
    data_pkl = b"\x80\x02" + encode({"t": Call(V2, 0, 0, (4,), (1,), False, {})}).replace(
        b"J\x00\x00\x00\x00", encode(("storage", 5, "0", "cpu", 4)) + b"Q", 1) + b"."
    path = tf.write_torch_zip(tmp_path / "m.pt", data_pkl, {"byteorder": b"little",
                                                            "data/0": bytes(16)})
    with pytest.raises(TensorloupeError) as e:
        tensorloupe.open(path)
    assert "an int is given where torch writes a dtype or storage class" in str(e.value)
    assert not PYTHON_ERROR.search(str(e.value)), str(e.value)


def test_the_table_holds_every_allowed_rebuild_function():
    from tensorloupe.formats.pytorch import allowlist
    assert set(allowlist._TENSOR_BUILDERS) <= {f for f, _, _ in MALFORMED} | {
        "torch._utils._rebuild_parameter_with_state"}   # the same builder as _rebuild_parameter


def test_well_formed_calls_still_open_as_torch_reads_them(tmp_path):
    ckpt = open_pickled(tmp_path, Call(Q, S, 0, (2, 2), (2, 1), (QINT, 0.25, 3), False, {}))
    t = ckpt.tensor("t")
    assert t.shape == (2, 2) and t.info["quantizer"] == {"qscheme": "per_tensor_affine",
                                                         "scale": 0.25, "zero_point": 3}
    # A per-channel quantized tensor written by torch: axis and codes as torch has them.
    x = torch.tensor([[-1.0, 0.0, 0.5], [2.0, 1.0, -0.5]])
    q = torch.quantize_per_channel(x, torch.tensor([0.5, 0.25]), torch.tensor([1, 2]), 0, torch.qint8)
    path = tf.save({"q": q}, tmp_path / "q.pt")
    t = tensorloupe.open(path).tensor("q")
    assert t.info["quantizer"] == {"qscheme": "per_channel_affine", "axis": q.q_per_channel_axis()}
    assert tensorloupe.values(t) == q.int_repr().flatten().tolist()
