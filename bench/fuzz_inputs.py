"""Seeds and format-aware mutators for bench/fuzz.py.

An input is a list of (file name, bytes): one file, or several for split models and shards. Every
input is a pure function of (format, run seed, input index), so a finding is reproduced by its
index alone (`python bench/fuzz.py --format F --replay INDEX --save DIR`).

Mutators edit what each format's reader trusts, not just random bytes, so that inputs get past the
first check: safetensors JSON edits (shapes, offsets, dtypes, huge and 5,000-digit integers, dims
bombs, duplicates, deep nesting, a lying header length), GGUF field edits (every integer field the
writer laid down, set to boundary values), pickle opcode splicing (delete, repeat, transplant and
re-argument opcodes) with torch ZIPs and tars re-packed so CRCs and checksums stay valid, split
pairs whose split.* fields disagree, and plain byte edits for everything.
"""

from __future__ import annotations

import io
import json
import pickletools
import random
import struct
import tarfile
import warnings
import zipfile
from pathlib import Path

INTERESTING = (0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 33, 63, 64, 127, 128, 255, 256, 1023, 1024,
               1025, 4095, 4096, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**53,
               2**61 - 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1)
HUGE_TEXT = ("1" + "0" * 5000, "-" + "9" * 4400, "1e999", "-1", "1.5", "NaN", "Infinity", "true",
             "null", '"7"', "[]", "{}", str(2**64), str(2**128))


# --- safetensors ----------------------------------------------------------------------------------

ST_DTYPES = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F64": 8, "I64": 8,
             "F8_E4M3": 1, "I32": 4}


def safetensors_file(tensors: list[tuple[str, str, list[int]]], metadata: dict | None = None,
                     pad: int = 0) -> bytes:
    header, data, position = {}, bytearray(), 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = ST_DTYPES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [position, position + n]}
        data += bytes((i * 37 + 11) % 251 for i in range(n))
        position += n
    text = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(text)) + text + bytes(data)


def safetensors_seeds() -> list[list[tuple[str, bytes]]]:
    one = safetensors_file([("a.weight", "F32", [4, 3]), ("a.bias", "F16", [3]),
                            ("b", "BF16", [2, 2, 2]), ("c", "I8", [5]), ("e", "BOOL", [0]),
                            ("f", "F8_E4M3", [6])], {"format": "pt", "note": "x"}, pad=3)
    two = safetensors_file([("x", "F64", [2]), ("y", "I64", [1, 1]), ("z", "U8", [])])
    return [[("model.safetensors", one)], [("m.safetensors", two)]]


def _raw_json(value, raws: list[str]):
    """A placeholder that `_emit` swaps for raw JSON text (json.dumps cannot write 10**5000)."""
    raws.append(value)
    return f"@@RAW{len(raws) - 1}@@"


def _emit(obj, raws: list[str]) -> str:
    text = json.dumps(obj)
    for i, raw in enumerate(raws):
        text = text.replace(f'"@@RAW{i}@@"', raw)
    return text


def mutate_safetensors_json(rng: random.Random, data: bytes) -> bytes:
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    raws: list[str] = []
    names = [k for k in header if k != "__metadata__"] or ["t"]
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        name = rng.choice(names)
        entry = header.setdefault(name, {})
        if not isinstance(entry, dict):
            entry = header[name] = {}
        op = rng.randrange(16)
        if op >= 12:  # edits that keep the file valid, so later checks and the sampler run too
            shape = entry.get("shape")
            if isinstance(shape, list):
                entry["shape"] = shape[::-1] if op < 14 else [*shape, 1] if op == 14 else [1, *shape]
        elif op == 0:
            shape = list(entry.get("shape", [1]))
            if shape:
                shape[rng.randrange(len(shape))] = rng.choice(INTERESTING)
            entry["shape"] = shape
        elif op == 1:
            entry["shape"] = [1] * rng.choice((5, 64, 65, 1000, 70000, 200000))
        elif op == 2:
            offsets = list(entry.get("data_offsets", [0, 0]))
            offsets[rng.randrange(2)] = rng.choice(INTERESTING)
            entry["data_offsets"] = offsets
        elif op == 3:
            key = rng.choice(("shape", "data_offsets", "dtype"))
            entry[key] = _raw_json(rng.choice(HUGE_TEXT), raws)
        elif op == 4:
            shape = entry.get("shape")
            entry["shape"] = [_raw_json(rng.choice(HUGE_TEXT), raws)] + (shape if isinstance(shape, list) else [])
        elif op == 5:
            entry["dtype"] = rng.choice(list(ST_DTYPES) + ["F4", "I4", "Q4_0", "", "f32", "F8_E5M2", "C64"])
        elif op == 6:
            entry.pop(rng.choice(("shape", "data_offsets", "dtype")), None)
        elif op == 7:
            header["__metadata__"] = rng.choice(({"a": 1}, [], {"k": "v" * 1000}, None,
                                                 {"x": _raw_json("1" + "0" * 5000, raws)}))
        elif op == 8:
            header[name] = _raw_json("[" * rng.choice((100, 5000, 50000)) + "]" * 3, raws)
        elif op == 9:
            header[f"{name}.copy"] = dict(entry)
        elif op == 10:
            entry["data_offsets"] = [_raw_json(rng.choice(HUGE_TEXT), raws), 8]
        else:
            header[rng.choice(("", "__metadata__ ", "\u00e9" * 3, "x" * 70000))] = dict(entry)
    text = _emit(header, raws).encode()
    length = len(text)
    pick = rng.random()
    if pick < 0.1:
        length += rng.choice((-2, -1, 1, 2, 1000, 2**63))
    elif pick < 0.2:
        body = body[:rng.randrange(len(body) + 1)] if body else b"\x00" * 7
    return struct.pack("<Q", length % 2**64) + text + body


# --- GGUF -----------------------------------------------------------------------------------------

class GGUFWriter:
    """A tiny stdlib GGUF v3 (or v1/v2) writer that remembers where it put every integer field, so
    the mutator can set any of them to a boundary value."""

    TYPES = {"u8": (0, "B"), "u16": (2, "H"), "i32": (5, "i"), "u32": (4, "I"), "f32": (6, "f"),
             "bool": (7, "B"), "u64": (10, "Q"), "f64": (12, "d")}

    def __init__(self, big_endian: bool = False, version: int = 3):
        self.o = ">" if big_endian else "<"
        self.version = version
        self.buf = bytearray()
        self.fields: list[tuple[int, str]] = []

    def num(self, code: str, value) -> None:
        if code in "BHIQbhiq":
            self.fields.append((len(self.buf), self.o + code))
        self.buf += struct.pack(self.o + code, value)

    def length(self, n: int) -> None:
        self.num("I" if self.version == 1 else "Q", n)

    def string(self, s: str) -> None:
        raw = s.encode()
        self.length(len(raw))
        self.buf += raw

    def build(self, kv: list[tuple[str, str, object]], tensors: list[tuple[str, int, list[int], int]],
              data_size: int) -> bytes:
        self.buf += b"GGUF"
        self.num("I", self.version)
        count = "I" if self.version == 1 else "Q"
        self.num(count, len(tensors))
        self.num(count, len(kv))
        for key, kind, value in kv:
            self.string(key)
            if kind == "str":
                self.num("I", 8)
                self.string(value)
            elif kind.startswith("arr:"):
                self.num("I", 9)
                etype = kind[4:]
                if etype == "str":
                    self.num("I", 8)
                    self.length(len(value))
                    for s in value:
                        self.string(s)
                else:
                    tid, code = self.TYPES[etype]
                    self.num("I", tid)
                    self.length(len(value))
                    for v in value:
                        self.num(code, v)
            else:
                tid, code = self.TYPES[kind]
                self.num("I", tid)
                self.num(code, value)
        for name, ggml_type, ne, offset in tensors:
            self.string(name)
            self.num("I", len(ne))
            for d in ne:
                self.num("I" if self.version == 1 else "Q", d)
            self.num("I", ggml_type)
            self.num("Q", offset)
        self.buf += b"\x00" * (-len(self.buf) % 32)
        self.buf += bytes((i * 29 + 3) % 256 for i in range(data_size))
        return bytes(self.buf)


# (name, ggml type id, ne, data offset); F32=0, F16=1, Q8_0=8 (34-byte blocks of 32), Q4_K=12
# (144-byte blocks of 256).
GGUF_TENSORS = [("tok_embd.weight", 0, [4, 2], 0), ("norm.weight", 1, [8], 32),
                ("q.weight", 8, [32, 2], 64), ("k.weight", 12, [256], 160)]
GGUF_KV = [("general.architecture", "str", "llama"), ("general.alignment", "u32", 32),
           ("llama.block_count", "u32", 2), ("llama.rope.freq_base", "f32", 10000.0),
           ("general.flag", "bool", 1), ("tokenizer.ggml.tokens", "arr:str", ["a", "bb", "<s>"]),
           ("tokenizer.ggml.scores", "arr:f32", [0.5, -1.0, 2.0]),
           ("big.array", "arr:u8", list(range(256)) * 5), ("general.size", "u64", 123)]


def gguf_seeds() -> list[tuple[list[tuple[str, bytes]], list[list[tuple[int, str]]]]]:
    seeds = []
    for big, version in ((False, 3), (True, 3), (False, 1), (False, 2)):
        w = GGUFWriter(big, version)
        seeds.append(([("model.gguf", w.build(GGUF_KV, GGUF_TENSORS, 304))], [w.fields]))
    return seeds


def gguf_split_seeds():
    parts, fields = [], []
    for no, tensors in enumerate((GGUF_TENSORS[:2], [("q.weight", 8, [32, 2], 0)])):
        kv = (GGUF_KV[:3] if no == 0 else []) + [("split.no", "u16", no), ("split.count", "u16", 2),
                                                ("split.tensors.count", "i32", 3)]
        w = GGUFWriter()
        parts.append((f"tiny-0000{no + 1}-of-00002.gguf", w.build(kv, tensors, 96)))
        fields.append(w.fields)
    return [(parts, fields)]


def mutate_gguf_fields(rng: random.Random, data: bytes, fields: list[tuple[int, str]]) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at, code = rng.choice(fields)
        st = struct.Struct(code)
        (old,) = st.unpack_from(out, at)
        bits = st.size * 8
        value = rng.choice(INTERESTING + (old + 1, old - 1, old * 2, old + 32, old // 2))
        st.pack_into(out, at, value % (1 << bits) if code[-1] in "BHIQ" else
                     (value % (1 << bits)) - ((1 << bits) if (value % (1 << bits)) >> (bits - 1) else 0))
    return bytes(out)


# --- pickles, torch ZIPs and tars -----------------------------------------------------------------

def pickle_spans(data: bytes, start: int = 0) -> tuple[list[tuple[int, int]], int]:
    """(start, end) of every opcode of the pickle beginning at `start`, and where it ends."""
    ops = [pos for _, _, pos in pickletools.genops(io.BytesIO(data[start:]))]
    ends = ops[1:] + [ops[-1] + 1]  # STOP is one byte
    return [(start + a, start + b) for a, b in zip(ops, ends)], start + ends[-1]


def splice_pickle(rng: random.Random, data: bytes, spans, donors: list[bytes]) -> bytes:
    """1-4 opcode-level edits: delete, repeat, transplant from another pickle, or re-argument."""
    pieces = [data[a:b] for a, b in spans]
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(pieces))
        op = rng.randrange(6)
        if op == 0:
            del pieces[i]
        elif op == 1:
            pieces.insert(i, pieces[i] * rng.choice((1, 2, 50, 3000)))
        elif op == 2:
            donor = rng.choice(donors)
            a = rng.randrange(len(donor))
            pieces.insert(i, donor[a:a + rng.randint(1, 40)])
        elif op == 3 and len(pieces[i]) > 1:
            p = bytearray(pieces[i])
            j = rng.randrange(1, len(p))
            p[j] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, p[j] ^ (1 << rng.randrange(8))))
            pieces[i] = bytes(p)
        elif op == 4:
            if rng.random() < 0.2:  # LONG with 5,000 digits: str() of it raises ValueError
                pieces.insert(i, b"L1" + b"0" * 5000 + b"L\n")
            else:
                value = rng.choice(INTERESTING) % 2**64
                pieces.insert(i, b"\x8a\x08" + value.to_bytes(8, "little"))
        else:
            pieces.insert(i, bytes([rng.choice(b"().0l}]tbRsuNeMXKJ\x85\x86\x87\x93\x94hjqr")]))
    return b"".join(pieces)


def _members(data: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(info.filename, z.read(info)) for info in z.infolist()]


def rezip(members: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names are a mutation on purpose
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
            for name, data in members:
                z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    return out.getvalue()


def mutate_zip(rng: random.Random, members, spans, donors) -> bytes:
    members = list(members)
    pkl = next(i for i, (n, _) in enumerate(members) if n.endswith("data.pkl"))
    pick = rng.random()
    if pick < 0.6:
        name, data = members[pkl]
        members[pkl] = (name, splice_pickle(rng, data, spans, donors))
    elif pick < 0.7:
        name, data = members[pkl]
        members.insert(rng.randrange(len(members) + 1), (rng.choice((name, name.upper(), name + "x")),
                                                          splice_pickle(rng, data, spans, donors)))
    elif pick < 0.85:
        i = rng.randrange(len(members))
        name, data = members[i]
        members[i] = (name, data[:rng.randrange(len(data) + 1)] if rng.random() < 0.5
                      else data + data[:rng.randint(1, 64)])
    else:
        del members[rng.randrange(len(members))]
    return rezip(members)


def mutate_tar(rng: random.Random, data: bytes, donors) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        members = [(m.name, t.extractfile(m).read()) for m in t.getmembers() if m.isfile()]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, content in members:
            if name == "pickle" or rng.random() < 0.2:
                try:
                    spans, _ = pickle_spans(content)
                    content = splice_pickle(rng, content, spans, donors)
                except Exception:
                    content = bytes_edit(rng, content, donors)
            info = tarfile.TarInfo(name)
            info.size = len(content)
            t.addfile(info, io.BytesIO(content))
    return out.getvalue()


def bytes_edit(rng: random.Random, data: bytes, donors: list[bytes]) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        at = rng.randrange(len(out) + 1)
        if op == 0 and out:
            at = min(at, len(out) - 1)
            out[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            st = rng.choice((struct.Struct("<I"), struct.Struct("<Q"), struct.Struct(">I"), struct.Struct("<H")))
            value = rng.choice(INTERESTING) % (1 << (8 * st.size))
            out[at:at + st.size] = st.pack(value)
        elif op == 2:
            del out[at:at + rng.choice((1, 2, 4, 8, 100))]
        elif op == 3:
            donor = rng.choice(donors)
            a = rng.randrange(len(donor))
            out[at:at] = donor[a:a + rng.randint(1, 64)]
        elif op == 4:
            del out[at:]
        else:
            out[at:at] = out[at:at + rng.randint(1, 16)] * rng.randint(1, 8)
    return bytes(out)


# --- the formats ----------------------------------------------------------------------------------

class Corpus:
    """Seeds and the mutator of one fuzzed format."""

    def __init__(self, fmt: str, seeds_dir: Path):
        self.fmt = fmt
        self.seeds: list = []
        if fmt == "safetensors":
            self.seeds = safetensors_seeds()
        elif fmt == "gguf":
            self.seeds = gguf_seeds()
        elif fmt == "split":
            self.seeds = gguf_split_seeds()
            st = safetensors_seeds()[0][0][1]
            shards = [("model-00001-of-00002.safetensors", st),
                      ("model-00002-of-00002.safetensors",
                       safetensors_file([("other", "F32", [2])]))]
            index = json.dumps({"metadata": {"total_size": 100}, "weight_map": {
                "a.weight": shards[0][0], "a.bias": shards[0][0], "other": shards[1][0]}}).encode()
            self.shards = shards + [("model.safetensors.index.json", index)]
        elif fmt in ("pytorch-zip", "pytorch-legacy"):
            names = (("state_dict.pt", "views.pt", "module.pt", "dtypes.pt", "big_endian.pt",
                      "lightning.ckpt", "hostile.pt") if fmt == "pytorch-zip" else
                     ("legacy.pt", "legacy_tar.pt"))
            for name in names:
                path = Path(seeds_dir) / name
                if not path.exists():
                    raise SystemExit(f"{path} is missing: run `python fixtures/make.py` first")
                self.seeds.append((name, path.read_bytes()))
        else:
            raise SystemExit(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
        self._prepare()

    def _prepare(self) -> None:
        self.donors: list[bytes] = []
        self.parsed = []
        if self.fmt == "pytorch-zip":
            for name, data in self.seeds:
                members = _members(data)
                pkl = next(d for n, d in members if n.endswith("data.pkl"))
                self.donors.append(pkl)
                self.parsed.append((name, data, members, pickle_spans(pkl)[0]))
        elif self.fmt == "pytorch-legacy":
            for name, data in self.seeds:
                if name.endswith("tar.pt"):
                    self.parsed.append((name, data, None, None))
                    continue
                spans, position = [], 0
                for _ in range(5):  # magic, protocol, sys info, the object, storage keys
                    more, position = pickle_spans(data, position)
                    spans += more
                self.donors.append(data[:position])
                self.parsed.append((name, data, position, spans))
        elif self.fmt == "safetensors":
            self.donors = [files[0][1] for files in self.seeds]
        else:
            self.donors = [data for files, _ in self.seeds for _, data in files]

    def input(self, run_seed: int, index: int) -> list[tuple[str, bytes]]:
        rng = random.Random(f"{self.fmt}:{run_seed}:{index}")
        return getattr(self, "_" + self.fmt.replace("-", "_"))(rng)

    def _safetensors(self, rng):
        name, data = rng.choice(self.seeds)[0]
        if rng.random() < 0.7:
            data = mutate_safetensors_json(rng, data)
        else:
            data = bytes_edit(rng, data, self.donors)
        return [(name, data)]

    def _gguf(self, rng):
        files, fields = rng.choice(self.seeds)
        name, data = files[0]
        if rng.random() < 0.65:
            data = mutate_gguf_fields(rng, data, fields[0])
        else:
            data = bytes_edit(rng, data, self.donors)
        return [(name, data)]

    def _split(self, rng):
        if rng.random() < 0.6:
            files, fields = self.seeds[0]
            files = list(files)
            i = rng.randrange(len(files))
            name, data = files[i]
            files[i] = (name, mutate_gguf_fields(rng, data, fields[i]) if rng.random() < 0.8
                        else bytes_edit(rng, data, self.donors))
            if rng.random() < 0.15:
                files[i] = (rng.choice(("x.gguf", "tiny-00002-of-00002.gguf", name)), files[i][1])
            return files
        files = [f for f in self.shards if rng.random() < 0.85] or self.shards[:1]
        i = rng.randrange(len(files))
        name, data = files[i]
        if name.endswith(".json"):
            index = json.loads(data)
            raws: list[str] = []
            op = rng.randrange(4)
            if op == 0:
                index["metadata"]["total_size"] = _raw_json(rng.choice(HUGE_TEXT), raws)
            elif op == 1:
                index["weight_map"][rng.choice(("a.weight", "zz"))] = rng.choice(
                    ("nope.safetensors", "../model-00002-of-00002.safetensors", "", 5))
            elif op == 2:
                index = rng.choice(([], {"weight_map": []}, {"metadata": 5}, "x"))
            else:
                index["weight_map"][_raw_json('"k"', raws)] = _raw_json("1" + "0" * 5000, raws)
            data = _emit(index, raws).encode()
        else:
            data = mutate_safetensors_json(rng, data) if rng.random() < 0.7 else \
                bytes_edit(rng, data, self.donors)
        files[i] = (name, data)
        return files

    def _pytorch_zip(self, rng):
        name, data, members, spans = rng.choice(self.parsed)
        if rng.random() < 0.8:
            return [(name, mutate_zip(rng, members, spans, self.donors))]
        return [(name, bytes_edit(rng, data, self.donors))]

    def _pytorch_legacy(self, rng):
        name, data, position, spans = rng.choice(self.parsed)
        if position is None:
            return [(name, mutate_tar(rng, data, self.donors) if rng.random() < 0.7
                     else bytes_edit(rng, data, self.donors))]
        if rng.random() < 0.7:
            return [(name, splice_pickle(rng, data[:position], spans, self.donors) + data[position:])]
        return [(name, bytes_edit(rng, data, self.donors))]


FORMATS = ("safetensors", "gguf", "split", "pytorch-zip", "pytorch-legacy")
