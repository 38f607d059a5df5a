"""Seeds and format-aware mutators for bench/fuzz.py.

An input is a list of (file name, bytes): one file, or several for split models and shards. Every
input is a pure function of (format, run seed, input index), so a finding is reproduced by its
index alone (`python bench/fuzz.py --format F --replay INDEX --save DIR`).

The mutators are in fuzz_mutators.py.
"""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import fuzz_hdf5
from fuzz_mutators import (HUGE_TEXT, ST_DTYPES, _emit, _members, _raw_json, bytes_edit,
                           mutate_gguf_fields, mutate_polyglot, mutate_safetensors_json, mutate_tar,
                           mutate_zip, pickle_spans, splice_pickle)
from fuzz_containers import CONTAINER_FORMATS, load_seeds, mutate as mutate_containers



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
        elif fmt in CONTAINER_FORMATS:
            self.seeds = load_seeds(fmt, seeds_dir)
        elif fmt == "polyglot":
            import polyglot_files as pf
            # not gguf_pickle.gguf: its 22,016 forced tensors make every input a 2 s open (the
            # fewest a GGUF that unpickles can have); tests/test_polyglot.py reads it
            self.seeds = [(n, blob()) for n, blob in (
                ("safetensors_pickle.bin", pf.safetensors_pickle),
                ("tar_pickle_name.pt", pf.tar_pickle_name), ("tar_no_magic.pt", pf.tar_no_magic),
                ("tar_count_call.pt", pf.tar_count_call), ("legacy_bad_keys.pt", pf.legacy_bad_keys))]
        elif fmt in fuzz_hdf5.FORMATS:     # hdf5, keras, nemo: bench/fuzz_hdf5.py
            self.containers = fuzz_hdf5.Seeds(fmt, seeds_dir)
            return
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
        elif self.fmt == "polyglot":
            import hostile_files
            import polyglot_files as pf
            self.donors = [pf.PAYLOAD, hostile_files.evil_pickle(), hostile_files.benign(),
                           pf.evil_main(), pf.clean_main()]
        elif self.fmt in CONTAINER_FORMATS:
            self.donors = [data for files in self.seeds for _, data in files]
        else:
            self.donors = [data for files, _ in self.seeds for _, data in files]

    def input(self, run_seed: int, index: int) -> list[tuple[str, bytes]]:
        rng = random.Random(f"{self.fmt}:{run_seed}:{index}")
        if self.fmt in CONTAINER_FORMATS:
            return mutate_containers(self.fmt, rng, self.seeds, self.donors)
        if self.fmt in fuzz_hdf5.FORMATS:
            return self.containers.input(rng)
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


    def _polyglot(self, rng):
        return [mutate_polyglot(rng, self.seeds, self.donors)]


FORMATS = ("safetensors", "gguf", "split", "pytorch-zip", "pytorch-legacy", "polyglot",
           *CONTAINER_FORMATS, *fuzz_hdf5.FORMATS)
