"""Known-answer bytes for the ONNX, .npy/.npz, DDUF and llamafile readers, built inline with
struct and zipfile (standard library only, so tests/pyodide runs them in Pyodide too): every
value read back exactly, and the packed dtypes ONNX adds (I4, U4, I2, U2)."""

import json
import struct
import zipfile

import pytest

from inline_bytes import field, npy_file, varint, zipped

import tensorloupe
from tensorloupe.dtypes.plain import DTYPES
from tensorloupe.errors import FormatError
from tensorloupe.formats.archives import dduf, llamafile
from tensorloupe.formats.numpy import header, npy, npz
from tensorloupe.formats.onnx import reader as onnx
from tensorloupe.opening import detect
from tensorloupe.source.base import MemorySource


def onnx_model(*initializers: bytes) -> bytes:
    graph = b"".join(field(5, t) for t in initializers)
    return b"\x08\x09" + field(2, b"test") + field(7, graph) + field(8, b"\x10\x15")


def onnx_tensor(name: bytes, dims, data_type: int, **typed) -> bytes:
    out = b"".join(b"\x08" + varint(d) for d in dims) + b"\x10" + varint(data_type) + field(8, name)
    for number, payload in typed.items():
        out += field(int(number[1:]), payload)
    return out


def test_onnx_raw_typed_and_packed_values():
    data = onnx_model(
        onnx_tensor(b"f", [2], 1, f9=struct.pack("<2f", 0.5, -3.0)),               # raw_data
        onnx_tensor(b"d", [2], 11, f10=struct.pack("<2d", 1.25, 2.5)),             # double_data, packed
        onnx_tensor(b"i8", [3], 3, f5=varint(1) + varint(255) + varint(2**64 - 2)),  # int32_data: -1, -2
        onnx_tensor(b"i64", [2], 7, f7=varint(2**64 - 5) + varint(7)),             # int64_data
        onnx_tensor(b"i4", [3], 22, f9=bytes([0x8F, 0x07])),                       # INT4: -1, -8, 7
        onnx_tensor(b"u2", [5], 25, f9=bytes([0b11100100, 0b11])))                 # UINT2
    ckpt = onnx.read(MemorySource(data, "m.onnx"))
    got = {t.name: tensorloupe.values(t, 0, t.numel) for t in ckpt.tensors}
    assert got == {"f": [0.5, -3.0], "d": [1.25, 2.5], "i8": [1, -1, -2], "i64": [-5, 7],
                   "i4": [-1, -8, 7], "u2": [0, 1, 2, 3, 3]}
    assert ckpt.metadata["producer_name"] == "test" and ckpt.metadata["opset_import"] == {"ai.onnx": 21}
    assert ckpt.tensor("f").known_file_offset == data.index(struct.pack("<2f", 0.5, -3.0))


def test_onnx_varint_where_a_fixed32_float_belongs():
    # fuzz finding (input 146180 of the onnx corpus): float_data (field 4) given as a varint of
    # 63 bits reached struct.pack('<I', ...) raw; it is the file's error, named
    data = onnx_model(onnx_tensor(b"f", [1], 1) + b"\x20" + varint(8386092846516015107))
    with pytest.raises(FormatError, match="does not fit a FLOAT element"):
        ckpt = onnx.read(MemorySource(data, "m.onnx"))
        tensorloupe.values(ckpt.tensor("f"), 0, 1)


def test_packed_integer_dtypes():
    assert DTYPES["I4"].decode(bytes([0x8F]), False) == [-1, -8]
    assert DTYPES["U4"].decode(bytes([0x8F]), False) == [15, 8]
    assert DTYPES["I2"].decode(bytes([0b11100100]), False) == [0, 1, -2, -1]


def test_onnx_is_sniffed_and_refuses_a_group():
    data = onnx_model()
    assert detect.read(MemorySource(data, "no-extension")).format == "onnx"
    with pytest.raises(FormatError, match="wire type 3"):
        onnx.read(MemorySource(b"\x08\x09\x3b", "m.onnx"))


def test_npy_byte_orders_and_fortran_order():
    big = npy.read(MemorySource(npy_file(">i2", "(3,)", struct.pack(">3h", 1, -2, 300)), "b.npy"))
    assert tensorloupe.values(big.tensors[0], 0, 3) == [1, -2, 300]
    fortran = npy_file("<i4", "(2, 3)", struct.pack("<6i", 0, 3, 1, 4, 2, 5), fortran=True)
    t = npy.read(MemorySource(fortran, "f.npy")).tensors[0]
    assert t.strides == (1, 2) and tensorloupe.values(t, 0, 6) == [0, 1, 2, 3, 4, 5]


def test_header_literal_parser():
    assert header.literal("{'a': (1, 2), 'b': [True, None], \"c\": 'x\\'y'}", None, 0) == \
        {"a": (1, 2), "b": [True, None], "c": "x'y"}


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_npz_stored_and_deflated(method):
    data = zipped({"a.npy": npy_file("<f8", "(2,)", struct.pack("<2d", 1.5, -0.25)),
                   "b.npy": npy_file("|u1", "(3,)", b"\x01\x02\x03")}, method)
    ckpt = npz.read(MemorySource(data, "x.npz"))
    assert [t.name for t in ckpt.tensors] == ["a", "b"]
    assert tensorloupe.values(ckpt.tensors[0], 0, 2) == [1.5, -0.25]
    assert tensorloupe.values(ckpt.tensors[1], 0, 3) == [1, 2, 3]


def safetensors_file(name: str, values) -> bytes:
    body = struct.pack(f"<{len(values)}f", *values)
    head = json.dumps({name: {"dtype": "F32", "shape": [len(values)], "data_offsets": [0, len(body)]}})
    return struct.pack("<Q", len(head)) + head.encode() + body


def test_dduf_components_and_prefixed_names():
    data = zipped({"model_index.json": json.dumps({"_class_name": "P", "unet": ["diffusers", "U"]}),
                   "unet/config.json": json.dumps({"in_channels": 4}),
                   "unet/m.safetensors": safetensors_file("w", [1.0, 2.0])})
    ckpt = dduf.read(MemorySource(data, "p.dduf"))
    assert [t.name for t in ckpt.tensors] == ["unet.w"]
    assert tensorloupe.values(ckpt.tensors[0], 0, 2) == [1.0, 2.0]
    assert ckpt.metadata["components"]["unet"]["config"] == {"in_channels": 4}


def gguf_file() -> bytes:
    """GGUF v3: one key, one F32 tensor of 2 elements, 32-byte aligned data."""
    def string(s: bytes) -> bytes:
        return struct.pack("<Q", len(s)) + s
    out = b"GGUF" + struct.pack("<IQQ", 3, 1, 1)
    out += string(b"general.architecture") + struct.pack("<I", 8) + string(b"llama")
    out += string(b"w") + struct.pack("<I", 1) + struct.pack("<Q", 2) + struct.pack("<IQ", 0, 0)
    out += b"\0" * (-len(out) % 32)
    return out + struct.pack("<2f", 0.75, -1.0)


def test_llamafile_gguf_member_in_place():
    data = zipped({"m.gguf": gguf_file()}, prefix=b"MZqFpD='\n" + b"\0" * 100)
    ckpt = llamafile.read(MemorySource(data, "x.llamafile"))
    assert ckpt.format == "gguf" and ckpt.extras["container"]["format"] == "llamafile"
    assert tensorloupe.values(ckpt.tensors[0], 0, 2) == [0.75, -1.0]
    assert detect.read(MemorySource(data, "x")).extras["container"]["member"] == "m.gguf"
