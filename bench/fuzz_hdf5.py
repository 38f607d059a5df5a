"""Seeds and format-aware mutators of the container formats of issue 26 for bench/fuzz.py:
hdf5 (h5py's files and Keras's .weights.h5), keras (.keras ZIPs), nemo (.nemo tars).

HDF5 inputs are mutated where its structures are: the seed is walked once with tensorloupe's own
reader (formats/hdf5), which gives every object header and message offset, and the signatures
of every B-tree, heap and chunk index; a mutation writes an interesting value (a count, a length,
an address past the end, the address of another structure: a cycle) into one of those fields.
The fixed and extensible array chunk indexes checksum every block and page (Jenkins lookup3):
reading every tensor of the seed records each checksummed region, which become anchors too (a
page has no signature), and half the mutations re-seal the regions they touched, so that the
reader's checks behind the checksum (counts, bitmaps, addresses) are reached.
Keras inputs mutate the HDF5 member (re-zipped stored), config.json or the archive; NeMo inputs
mutate model_config.yaml (YAML features the subset refuses), the torch member (its data.pkl), the
member names (escaping paths, links) or the tar bytes, plain and gzipped.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import struct
import tarfile
from pathlib import Path

from fuzz_mutators import INTERESTING, _members, bytes_edit, mutate_zip, pickle_spans, rezip

FORMATS = ("hdf5", "keras", "nemo")
FIXTURES_OUT = Path(__file__).resolve().parent.parent / "fixtures" / "out"
SIGNATURES = (b"OHDR", b"OCHK", b"TREE", b"SNOD", b"HEAP", b"GCOL", b"FRHP", b"FHDB", b"FHIB",
              b"BTHD", b"BTIN", b"BTLF", b"FAHD", b"FADB", b"EAHD", b"EAIB", b"EASB", b"EADB",
              b"\x89HDF")
FIELDS = (struct.Struct("<Q"), struct.Struct("<I"), struct.Struct("<H"), struct.Struct("<B"))
YAML_EDITS = ("a: !!python/object/apply:os.system [id]\n", "x: &a [1]\ny: *a\n", "b: |\n  t\n",
              "---\nz: 1\n", "k: 'open\n", "k: [1, [2, {a: 3}\n", "\tk: 1\n", "k: \"\\u12\"\n",
              "k:" + "\n" + "".join("  " * i + f"k{i}:\n" for i in range(80)),
              "k: " + "[" * 200 + "]" * 200 + "\n", "k: 1\nk: 2\n", "- a\nb: 1\n")


def h5_anchors(data: bytes) -> list[int]:
    """Offsets of the fields worth mutating: every message's data and object header (from
    tensorloupe's own walk of the seed), the superblock, and every signature."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "pylib"))
    from tensorloupe.formats.hdf5 import file, groups
    from tensorloupe.source.base import MemorySource
    anchors = [8, 9, 13, 24, 32, 40, 56, 64]
    h5, root, _ = file.open_file(MemorySource(data, "seed.h5"))
    for obj in groups.walk(h5, root, []):
        anchors.append(h5.base + obj.address)
        anchors += [m.at for m in obj.messages]
    for signature in SIGNATURES:
        at = data.find(signature)
        while at >= 0:
            anchors.append(at)
            at = data.find(signature, at + 1)
    anchors += [start for start, _ in checksummed(data)]
    return sorted(set(a for a in anchors if a < len(data)))


def checksummed(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every array block and page whose last 4 bytes are the lookup3 checksum of
    the rest, as tensorloupe's reader meets them reading every tensor of the seed."""
    from tensorloupe.formats.hdf5 import arrays, earray, farray
    from tensorloupe.source.base import MemorySource
    import tensorloupe
    regions, original = [], arrays.checked

    def recording(h5, address, n, what):
        regions.append((h5.base + address, h5.base + address + n))
        return original(h5, address, n, what)
    for module in (arrays, earray, farray):
        module.checked = recording
    try:
        ckpt = tensorloupe.open(MemorySource(data, "seed.h5"))
        for t in ckpt.tensors:
            try:
                tensorloupe.values(t, 0, t.numel)
            except Exception:             # a dataset the seed's reader refuses (lzf): no regions
                pass
    finally:
        for module in (arrays, earray, farray):
            module.checked = original
    return sorted(set(regions))


def reseal(out: bytearray, regions: list[tuple[int, int]], touched: list[int]) -> None:
    from tensorloupe.formats.hdf5.headers import lookup3
    for start, end in regions:
        if any(start <= at < end for at in touched) and end <= len(out):
            out[end - 4:end] = lookup3(bytes(out[start:end - 4])).to_bytes(4, "little")


def mutate_hdf5(rng: random.Random, data: bytes, anchors: list[int], donors: list[bytes],
                regions: list[tuple[int, int]] = ()) -> bytes:
    if rng.random() < 0.2:
        return bytes_edit(rng, data, donors)
    out = bytearray(data)
    touched = []
    for _ in range(rng.randint(1, 3)):
        at = rng.choice(anchors) + rng.randrange(0, 48)
        field = rng.choice(FIELDS)
        pick = rng.random()
        if pick < 0.4:
            value = rng.choice(INTERESTING)
        elif pick < 0.7:
            value = rng.choice(anchors)                   # another structure: a cycle, a confusion
        elif pick < 0.85:
            value = len(data) + rng.choice((-8, -1, 0, 1, 4096, 1 << 32))
        else:
            value = (1 << (8 * field.size)) - 1 - rng.randrange(2)   # undefined, or just below
        value %= 1 << (8 * field.size)
        if at + field.size <= len(out):
            field.pack_into(out, at, value)
            touched.append(at)
    if regions and rng.random() < 0.5:
        reseal(out, regions, touched)
    return bytes(out)


def _tar(members: list[tuple[str, bytes, bytes]], gz: bool) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, content, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.size = len(content) if kind == tarfile.REGTYPE else 0
            if kind != tarfile.REGTYPE:
                info.linkname = "../../etc/passwd"
            t.addfile(info, io.BytesIO(content) if kind == tarfile.REGTYPE else None)
    data = out.getvalue()
    return gzip.compress(data, mtime=0) if gz else data


class Seeds:
    def __init__(self, fmt: str, seeds_dir: Path):
        self.fmt = fmt
        # fixtures/make.py writes them to fixtures/out; a --seeds-dir without them falls back there
        out = Path(seeds_dir) if (Path(seeds_dir) / "hdf5").is_dir() else FIXTURES_OUT
        names = {"hdf5": ("hdf5/h5py-earliest.h5", "hdf5/h5py-latest.h5", "hdf5/h5py-dense.h5",
                          "hdf5/keras-mlp.weights.h5", "hdf5/links/h5py-links.h5",
                          "hdf5/h5py-paged.h5"),
                 "keras": ("hdf5/keras-mlp.keras",),
                 "nemo": ("nemo/tiny.nemo",)}[fmt]
        self.seeds = []
        for name in names:
            path = out / name
            if not path.exists():
                raise SystemExit(f"{path} is missing: run `python fixtures/make.py` first")
            self.seeds.append((path.name, path.read_bytes()))
        self.donors = [data for _, data in self.seeds]
        if fmt == "hdf5":
            self.anchors = [h5_anchors(data) for _, data in self.seeds]
            self.regions = [checksummed(data) for _, data in self.seeds]
        elif fmt == "keras":
            self.members = _members(self.seeds[0][1])
            h5 = dict(self.members)["model.weights.h5"]
            self.h5 = (h5, h5_anchors(h5))
        else:
            with tarfile.open(fileobj=io.BytesIO(self.seeds[0][1])) as t:
                self.members = [(m.name, t.extractfile(m).read()) for m in t.getmembers() if m.isfile()]
            ckpt = dict(self.members)["./model_weights.ckpt"]
            self.ckpt_members = _members(ckpt)
            pkl = next(d for n, d in self.ckpt_members if n.endswith("data.pkl"))
            self.spans = pickle_spans(pkl)[0]
            self.donors.append(pkl)

    def input(self, rng: random.Random) -> list[tuple[str, bytes]]:
        return getattr(self, "_" + self.fmt)(rng)

    def _hdf5(self, rng):
        i = rng.randrange(len(self.seeds))
        name, data = self.seeds[i]
        return [(name, mutate_hdf5(rng, data, self.anchors[i], self.donors, self.regions[i]))]

    def _keras(self, rng):
        name, data = self.seeds[0]
        pick = rng.random()
        if pick < 0.15:
            return [(name, bytes_edit(rng, data, self.donors))]
        members = list(self.members)
        if pick < 0.75:
            h5, anchors = self.h5
            members = [(n, mutate_hdf5(rng, h5, anchors, self.donors) if n == "model.weights.h5"
                        else d) for n, d in members]
        elif pick < 0.9:
            config = json.loads(dict(members)["config.json"])
            config["config"]["layers"] = rng.choice(([], [1, "x", None], {"a": 1}, [{"config": 5}] * 3))
            if rng.random() < 0.3:
                config = rng.choice(([], "x", 5, {"config": []}))
            members = [(n, json.dumps(config).encode() if n == "config.json" else d) for n, d in members]
        else:
            members = [m for m in members if rng.random() < 0.7] or members[:1]
        return [(name, rezip(members))]

    def _nemo(self, rng):
        name, data = self.seeds[0]
        pick = rng.random()
        gz = rng.random() < 0.15
        if pick < 0.15:
            return [(name, bytes_edit(rng, data, self.donors))]
        members = [(n, d, tarfile.REGTYPE) for n, d in self.members]
        if pick < 0.45:
            text = dict(self.members)["./model_config.yaml"].decode()
            lines = text.splitlines(keepends=True)
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(YAML_EDITS))
            members = [(n, "".join(lines).encode() if n.endswith(".yaml") else d, k)
                       for n, d, k in members]
        elif pick < 0.8:
            ckpt = mutate_zip(rng, self.ckpt_members, self.spans, self.donors)
            members = [(n, ckpt if n.endswith(".ckpt") else d, k) for n, d, k in members]
        else:
            i = rng.randrange(len(members))
            n, d, k = members[i]
            members[i] = (rng.choice(("../" + n, "/abs/" + n, "./mp_rank_00/model_weights.ckpt",
                                      n + "/", n)), d, rng.choice((k, k, tarfile.SYMTYPE, tarfile.LNKTYPE)))
        return [("tiny-gz.nemo" if gz else name, _tar(members, gz))]
