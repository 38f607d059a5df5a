"""Seeds and format-aware mutators for ONNX, NumPy (.npy/.npz), DDUF and llamafile (bench/fuzz.py).

Seeds are fixtures/make.py's files (out/onnx, out/numpy, out/containers). Each mutator knows its
format's structure: ONNX inputs are re-encoded protobuf trees with one field changed (a varint, a
length, a field dropped or repeated, an external_data location or offset); .npy inputs get their
header dict rewritten (descr, shape, fortran_order, syntax, version, length field); ZIP-based
inputs (.npz, .dduf, llamafile) are re-zipped with one member, name or method changed.
"""

from __future__ import annotations

import io
import json
import random
import struct
import warnings
import zipfile
from pathlib import Path

from fuzz_mutators import INTERESTING, bytes_edit, mutate_safetensors_json
from inline_bytes import varint

CONTAINER_FORMATS = ("onnx", "numpy", "dduf", "llamafile")
SEEDS = {
    "onnx": ["onnx/types.onnx", "onnx/typed.onnx", "onnx/strings.onnx", "onnx/exported/model.onnx",
             "onnx/sparse.onnx", "onnx/constants.onnx", "onnx/exported_constants/model.onnx",
             ("onnx/exported_external/model.onnx", "onnx/exported_external/model.onnx.data"),
             ("onnx/external/types.onnx", "onnx/external/types.onnx.data")],
    "numpy": ["numpy/le_f4.npy", "numpy/be_c8.npy", "numpy/v3.npy", "numpy/objects.npy",
              "numpy/records.npy", "numpy/arrays.npz", "numpy/compressed.npz"],
    "dduf": ["containers/tiny.dduf"],
    "llamafile": ["containers/tiny.llamafile"],
}
# ModelProto.graph, GraphProto.initializer/node/input, TensorProto.external_data,
# GraphProto.sparse_initializer, AttributeProto.sparse_tensor: descended into
MESSAGES = {7, 5, 1, 11, 12, 13, 2, 15, 22}
LOCATIONS = ("../../etc/passwd", "/etc/passwd", "C:\\x", "", "model.onnx.data", "a/../b", "x" * 300,
             "missing.bin", "\x00")
NUMBERS = ("0", "-1", "18446744073709551615", "99999999999999999999999", "1e3", "", " 4", "0x10")
DESCRS = ("<f4", ">c16", "|O", "<U3", "<M8[s]", "x", "<f3", "|V8", "<f16", "=i2", "|b1", "<c8", "")
SHAPES = ("(-1,)", f"({1 << 63},)", "(" + "1, " * 70 + ")", "((1,),)", "()", "(0,)", "(3, 4)",
          "[2]", "(2**8,)", "(1" + "0" * 50 + ",)")


def load_seeds(fmt: str, seeds_dir: Path) -> list[list[tuple[str, bytes]]]:
    out = []
    for entry in SEEDS[fmt]:
        paths = entry if isinstance(entry, tuple) else (entry,)
        files = []
        for rel in paths:
            path = Path(seeds_dir) / rel
            if not path.exists():
                raise SystemExit(f"{path} is missing: run `python fixtures/make.py` first")
            files.append((path.name, path.read_bytes()))
        out.append(files)
    return out


def mutate(fmt: str, rng: random.Random, seeds, donors: list[bytes]) -> list[tuple[str, bytes]]:
    files = list(rng.choice(seeds))
    name, data = files[0]
    if rng.random() < 0.2:
        data = bytes_edit(rng, data, donors)
    elif fmt == "onnx":
        data = mutate_onnx(rng, data)
    elif fmt == "numpy":
        data = mutate_npy(rng, data) if name.endswith(".npy") else mutate_zip_members(rng, data, donors)
    else:
        data = mutate_zip_members(rng, data, donors)
    files[0] = (name, data)
    if len(files) > 1 and rng.random() < 0.3:   # the external data file, cut or grown
        other, blob = files[1]
        files[1] = (other, blob[:rng.randrange(len(blob) + 1)] if rng.random() < 0.7 else blob * 2)
    return files


# --- protobuf ---------------------------------------------------------------------------------

def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def parse_fields(data: bytes, depth: int = 0) -> list:
    """[(number, wire, value)], LENGTH values of MESSAGES fields parsed into lists (best effort:
    a payload that is no message stays bytes)."""
    out, at = [], 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 1:
            value, at = data[at:at + 8], at + 8
        elif wire == 5:
            value, at = data[at:at + 4], at + 4
        elif wire == 2:
            n, at = _varint(data, at)
            value, at = data[at:at + n], at + n
            if number in MESSAGES and depth < 4:
                try:
                    value = parse_fields(value, depth + 1)
                except IndexError:
                    pass
        else:
            raise IndexError("group")
        out.append([number, wire, value])
    return out


def encode_fields(fields: list) -> bytes:
    out = bytearray()
    for number, wire, value in fields:
        out += varint(number << 3 | wire)
        if wire == 0:
            out += varint(value)
        elif wire == 2:
            payload = encode_fields(value) if isinstance(value, list) else value
            out += varint(len(payload)) + payload
        else:
            out += value
    return bytes(out)


def _all_fields(fields: list, found: list) -> list:
    for f in fields:
        found.append((fields, f))
        if isinstance(f[2], list):
            _all_fields(f[2], found)
    return found


def mutate_onnx(rng: random.Random, data: bytes) -> bytes:
    try:
        tree = parse_fields(data)
    except IndexError:
        return bytes_edit(rng, data, [data])
    every = _all_fields(tree, [])
    if not every:
        return data
    parent, field = rng.choice(every)
    op = rng.randrange(7)
    if op == 0 and field[1] == 0:                 # a varint: dims, data_type, location, versions
        field[2] = rng.choice(INTERESTING + (1 << 63, (1 << 64) - 1, 29, 8, 0))
    elif op == 1:                                 # dropped
        parent.remove(field)
    elif op == 2:                                 # repeated
        parent.insert(parent.index(field), [field[0], field[1], field[2]])
    elif op == 3 and field[1] == 2 and not isinstance(field[2], list):   # a string or a payload
        choice = rng.random()
        field[2] = (rng.choice(LOCATIONS).encode("utf-8", "surrogatepass") if choice < 0.4 else
                    rng.choice(NUMBERS).encode() if choice < 0.7 else
                    field[2][:rng.randrange(len(field[2]) + 1)])
    elif op == 4:                                 # a wire type or number changed
        field[rng.randrange(2)] = rng.choice((0, 1, 2, 3, 4, 5, 7, 9, 13, 14, 15, 536870911))
        if field[1] == 0 and not isinstance(field[2], int):
            field[2] = len(field[2]) if hasattr(field[2], "__len__") else 0
        elif field[1] in (1, 5) and not isinstance(field[2], bytes):
            field[2] = b"\0" * (8 if field[1] == 1 else 4)
        elif field[1] == 2 and isinstance(field[2], int):
            field[2] = b"x" * min(field[2], 64)
        elif field[1] not in (0, 1, 2, 5):
            field[1] = 2
            field[2] = b""
    elif op == 5:                                 # a length that lies: re-encode, then patch it
        out = encode_fields(tree)
        at = rng.randrange(len(out))
        return out[:at] + varint(rng.choice(INTERESTING + (1 << 31, 1 << 40))) + out[at + 1:]
    else:                                         # external data pointing elsewhere
        tensors = [f for _, f in every if f[0] == 5 and isinstance(f[2], list)]
        if tensors:
            tensor = rng.choice(tensors)[2]
            key = rng.choice(("location", "offset", "length"))
            value = rng.choice(LOCATIONS if key == "location" else NUMBERS)
            tensor.append([13, 2, [[1, 2, key.encode()], [2, 2, value.encode("utf-8", "surrogatepass")]]])
            tensor.append([14, 0, 1])
    return encode_fields(tree)


# --- .npy ------------------------------------------------------------------------------------

def mutate_npy(rng: random.Random, data: bytes) -> bytes:
    if not data.startswith(b"\x93NUMPY") or len(data) < 10:
        return data
    major = data[6]
    size = 2 if major == 1 else 4
    (n,) = struct.unpack_from("<H" if size == 2 else "<I", data, 8)
    start = 8 + size
    text = data[start:start + n].decode("latin-1")
    body = data[start + n:]
    op = rng.randrange(6)
    if op == 0:
        text = f"{{'descr': '{rng.choice(DESCRS)}', 'fortran_order': False, 'shape': (2, 3), }}"
    elif op == 1:
        text = text.replace("'shape': (", "'shape': " + rng.choice(SHAPES) + " and (", 1) \
            if rng.random() < 0.2 else _replace_shape(text, rng.choice(SHAPES))
    elif op == 2:
        text = text.replace("False", rng.choice(("True", "1", "None", "'x'", "Fals"))) \
                   .replace("True", rng.choice(("False", "0")))
    elif op == 3:
        at = rng.randrange(len(text) + 1)
        text = text[:at] + rng.choice(("{", "}", "(", ")", "'", ",", ":", "\\", "[" * 30, "\x00",
                                       "__import__('os')", "1" * 60)) + text[at:]
    elif op == 4:
        major = rng.choice((1, 2, 3, 4, 0))
    else:
        body = body[:rng.randrange(len(body) + 1)] if rng.random() < 0.6 else body + body
    raw = text.encode("latin-1", "replace")
    if op == 5 and rng.random() < 0.3:
        raw = raw[:rng.randrange(len(raw) + 1)]
    length = struct.pack("<H", len(raw) & 0xFFFF) if major == 1 else struct.pack("<I", len(raw))
    return b"\x93NUMPY" + bytes([major, 0]) + length + raw + body


def _replace_shape(text: str, shape: str) -> str:
    start = text.find("'shape': ")
    end = text.find(")", start)
    return text if start < 0 or end < 0 else text[:start + 9] + shape + text[end + 1:]


# --- ZIP containers ---------------------------------------------------------------------------

def _members(data: bytes):
    prefix = b""
    start = data.find(b"PK\x03\x04")
    if start > 0:
        prefix = data[:start]
    with zipfile.ZipFile(io.BytesIO(data[start if start > 0 else 0:])) as z:
        return prefix, [(i.filename, i.compress_type, z.read(i)) for i in z.infolist()]


def mutate_zip_members(rng: random.Random, data: bytes, donors: list[bytes]) -> bytes:
    try:
        prefix, members = _members(data)
    except (zipfile.BadZipFile, ValueError, EOFError, OSError):
        return bytes_edit(rng, data, donors)
    if not members:
        return data
    i = rng.randrange(len(members))
    name, method, blob = members[i]
    op = rng.randrange(6)
    if op == 0:
        if name.endswith(".npy"):
            blob = mutate_npy(rng, blob)
        elif name.endswith(".safetensors"):
            blob = mutate_safetensors_json(rng, blob)
        elif name.endswith(".json"):
            blob = rng.choice((b"[]", b"{", b'{"unet": 5}', b'{"_class_name": {"a": []}}',
                               json.dumps({"x" * 100: ["a", "b"]}).encode(), blob[:5]))
        else:
            blob = bytes_edit(rng, blob, donors)
    elif op == 1:
        name = rng.choice(("../" + name, "a/b/" + name, name.upper(), name + "\\x", "/" + name,
                           name.replace(".npy", ""), name.replace(".gguf", ".txt")))
    elif op == 2:
        method = zipfile.ZIP_DEFLATED if method == zipfile.ZIP_STORED else zipfile.ZIP_STORED
    elif op == 3:
        members.insert(i, (name, method, blob))           # the same name twice
    elif op == 4:
        blob = blob[:rng.randrange(len(blob) + 1)] if rng.random() < 0.5 else blob + blob[:64]
    else:
        del members[i]
        if not members:
            return prefix
    if op not in (3, 5):
        members[i] = (name, method, blob)
    out = io.BytesIO()
    out.write(prefix if rng.random() < 0.9 else prefix[:rng.randrange(len(prefix) + 1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with zipfile.ZipFile(out, "w") as z:
            for member, how, content in members:
                z.writestr(zipfile.ZipInfo(member, (1980, 1, 1, 0, 0, 0)), content, compress_type=how)
    return out.getvalue()
