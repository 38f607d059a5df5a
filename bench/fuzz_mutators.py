"""Format-aware mutators for bench/fuzz.py (the seeds and formats are in fuzz_inputs.py).

safetensors JSON edits (shapes, offsets, dtypes, huge and 5,000-digit integers, dims bombs,
duplicates, deep nesting, a lying header length), GGUF field edits (every integer field the seed
writer laid down, set to boundary values), pickle opcode splicing (delete, repeat, transplant and
re-argument opcodes) with torch ZIPs and tars re-packed so CRCs and checksums stay valid, and plain
byte edits for everything. Each takes a random.Random, so an input is a function of its seed.
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


ST_DTYPES = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F64": 8, "I64": 8,
             "F8_E4M3": 1, "I32": 4}

INTERESTING = (0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 33, 63, 64, 127, 128, 255, 256, 1023, 1024,
               1025, 4095, 4096, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**53,
               2**61 - 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1)


HUGE_TEXT = ("1" + "0" * 5000, "-" + "9" * 4400, "1e999", "-1", "1.5", "NaN", "Infinity", "true",
             "null", '"7"', "[]", "{}", str(2**64), str(2**128))


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


def pickle_spans(data: bytes, start: int = 0) -> tuple[list[tuple[int, int]], int]:
    """(start, end) of every opcode of the pickle beginning at `start`, and where it ends."""
    ops = [pos for _, _, pos in pickletools.genops(io.BytesIO(data[start:]))]
    ends = ops[1:] + [ops[-1] + 1]  # STOP is one byte
    return [(start + a, start + b) for a, b in zip(ops, ends)], start + ends[-1]


# The largest opcode repeat a splice makes: polyglot input 762,606 of seed 1 repeated an already
# repeated piece 3,000 times and the harness itself ran out of memory making it.
MAX_REPEAT_BYTES = 4 << 20


def splice_pickle(rng: random.Random, data: bytes, spans, donors: list[bytes]) -> bytes:
    """1-4 opcode-level edits: delete, repeat, transplant from another pickle, or re-argument."""
    pieces = [data[a:b] for a, b in spans]
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(pieces))
        op = rng.randrange(6)
        if op == 0:
            del pieces[i]
        elif op == 1:   # repeated, up to MAX_REPEAT_BYTES (a repeat of a repeat grew past memory)
            times = rng.choice((1, 2, 50, 3000))
            pieces.insert(i, pieces[i] * max(1, min(times, MAX_REPEAT_BYTES // max(1, len(pieces[i])))))
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


# --- polyglots: bytes valid for two readers (fixtures/polyglot_files.py's tricks, re-made) -----

POLYGLOT_NAMES = ("model.bin", "model.pt", "model.safetensors", "model.gguf", "model.pkl", "x")


def mutate_polyglot(rng: random.Random, seeds: list[tuple[str, bytes]], payloads: list[bytes]) -> tuple[str, bytes]:
    """A polyglot re-made around another payload (a donor pickle, spliced), a seed polyglot with
    byte edits, or either under another name (the name decides torch.load's path)."""
    import polyglot_files as pf
    op = rng.randrange(4)
    payload = rng.choice(payloads)
    if rng.random() < 0.5:
        try:
            spans, _ = pickle_spans(payload)
        except Exception:   # pickletools' own text parsing refuses some donors: not spliced
            spans = None
        if spans:
            payload = splice_pickle(rng, payload, spans, payloads)
    if op == 0:     # safetensors whose 'V' line ends at the header's last byte
        entry = {"p": {"dtype": "U8", "shape": [len(payload)], "data_offsets": [0, len(payload)]}}
        text = json.dumps(entry, separators=(",", ":"))
        header = text.ljust(0x55).encode()[:0x55] + b"\n"
        name, data = "model.bin", struct.pack("<Q", 0x56) + header + payload
    elif op == 1:   # a tar whose first member's name is a pickle, then torch's members
        members = pf._torch_tar_members(rng.choice((pf.evil_main(), pf.clean_main(), payload)))
        first = payload[:rng.choice((4, 20, 99))].decode("latin-1")
        name, data = "model.pt", pf._tar([(first, b"")] + members, v7=rng.random() < 0.3)
    else:
        name, data = rng.choice(seeds)
        data = bytes_edit(rng, data, payloads)
    if rng.random() < 0.3:
        name = rng.choice(POLYGLOT_NAMES)
    return name, data
