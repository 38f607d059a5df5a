"""HDF5 attributes in dense storage (a fractal heap and its v2 B-tree name index, a huge heap
object for a big attribute) and soft and external links, as h5py writes them with
libver="latest" (fixtures/hdf5_files.py write_links). Oracle: h5py (every attribute, every
dataset reached through a soft link, what each link names); hand-edited bytes for the attacks."""

import struct
from pathlib import Path

import h5py
import numpy as np
import pytest

import hdf5_files

import tensorloupe
from tensorloupe.errors import TensorloupeError
from tensorloupe.formats.hdf5 import links as links_module
from tensorloupe.source.base import MemorySource
from tensorloupe.formats.hdf5 import reader
from tensorloupe.formats.hdf5.headers import lookup3

from test_hdf5 import attributes, same

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures" / "out" / "hdf5" / "links"


@pytest.fixture(scope="module")
def path():
    if not (OUT / "h5py-links.h5").exists():
        hdf5_files.write_links(OUT)
    return OUT / "h5py-links.h5"


@pytest.fixture(scope="module")
def ckpt(path):
    return tensorloupe.open(path)


def test_dense_attributes_equal_h5py(path, ckpt):
    expected = attributes(path)
    assert set(ckpt.metadata) == set(expected)
    assert len([k for k in expected if k.startswith("/@")]) == 14     # past the 8 kept in a header
    for key, value in expected.items():
        got = ckpt.metadata[key]
        if isinstance(value, np.ndarray) and value.size > 64:       # listed, not read (MAX_VALUES)
            assert got == f"(F64 of shape {list(value.shape)}: not read)"
        elif isinstance(value, np.ndarray):
            assert got == value.tolist() if value.ndim else got == value.item(), key
        else:
            assert got == (value.item() if hasattr(value, "item") else value), key
    assert not [w for w in ckpt.warnings if "dense storage" in w]


def test_soft_links_to_datasets_read_their_target(path, ckpt):
    with h5py.File(path) as f:
        for name in ("soft_w", "g/rel", "through"):
            t = ckpt.tensor(name)
            target = f[name]
            assert f[t.info["soft link to"]] == target     # the object h5py reaches (h5py: same id)
            same(t.numpy(), target[()])
            assert tensorloupe.values(t, 0, t.numel) == pytest.approx(target[()].ravel().tolist())


def test_every_link_is_described_as_h5py_reads_it(path, ckpt):
    described = ckpt.extras["hdf5"]["links"]
    with h5py.File(path) as f:
        expected = {}
        for name in ("soft_w", "g/rel", "soft_group", "through", "dangling", "loop_a", "loop_b",
                     "ext", "ext_out"):
            link = f.get(name, getlink=True)
            expected[name] = link
        assert set(described) == set(expected)
        for name, link in expected.items():
            entry = described[name]
            if isinstance(link, h5py.ExternalLink):
                assert {k: entry[k] for k in ("kind", "file", "path")} == \
                    {"kind": "external", "file": link.filename, "path": link.path}
                assert entry["followed"] == (name == "ext")
                continue
            assert entry["kind"] == "soft" and entry["path"] == link.path
            if name in ("dangling", "loop_a", "loop_b"):
                with pytest.raises((KeyError, RuntimeError)):   # h5py cannot open them either
                    f[name]
                assert "problem" in entry and "resolved" not in entry
            else:
                assert f[entry["resolved"]] == f[name]
                assert entry.get("group", False) == isinstance(f[name], h5py.Group)
    assert "the links loop (/loop_a → /loop_b → /loop_a)" in described["loop_a"]["problem"]
    assert "dangling" in described["dangling"]["problem"]


def test_external_links_are_followed_only_inside_the_folder(path, ckpt):
    # target.h5 is beside the file: its dataset is read from it, as h5py reads f["ext"];
    # ../../etc/elsewhere.h5 is not, and is never opened
    assert [s.root().name for s in ckpt.sources] == [path.name, "target.h5"]
    t = ckpt.tensor("ext")
    assert t.info["external link to"] == "target.h5:/inner/w" and t.file == "target.h5"
    with h5py.File(path) as f:
        same(t.numpy(), f["ext"][()])
    assert "ext_out" not in {t.name for t in ckpt.tensors}
    said = [w for w in ckpt.warnings if "external link" in w]
    assert len(said) == 1 and "'ext_out'" in said[0] and "is not inside the folder" in said[0]


def test_a_file_reached_by_an_external_link_does_not_follow_its_own(tmp_path):
    # a.h5 -> b.h5 -> a.h5: followed one file deep, never round the loop
    with h5py.File(tmp_path / "a.h5", "w", libver="latest") as f:
        f["w"] = np.arange(3, dtype="f4")
        f["to_b"] = h5py.ExternalLink("b.h5", "/back")
    with h5py.File(tmp_path / "b.h5", "w", libver="latest") as f:
        f["back"] = h5py.ExternalLink("a.h5", "/w")
        f["v"] = np.ones(2, "f4")
    ckpt = tensorloupe.open(tmp_path / "a.h5")
    assert [t.name for t in ckpt.tensors] == ["w"]
    assert "'b.h5' has no dataset at '/back'" in ckpt.extras["hdf5"]["links"]["to_b"]["problem"]


def test_an_external_link_from_bytes_is_said_not_followed(path):
    ckpt = reader.read(MemorySource(path.read_bytes(), "links.h5"))
    assert "cannot be opened" in ckpt.extras["hdf5"]["links"]["ext"]["problem"]


def test_a_group_link_lists_no_second_copy(ckpt):
    names = [t.name for t in ckpt.tensors]
    assert not [n for n in names if n.startswith("soft_group/")]
    assert sorted(names) == sorted(["g/chunked", "g/v", "g/w", "soft_w", "g/rel", "through", "ext",
                                    "unlimited/plain", "unlimited/deflated", "unlimited/sparse",
                                    "growing/rows", "growing/cols", "growing/holes"])


@pytest.mark.parametrize("index, names", [
    ("btree2", ("unlimited/plain", "unlimited/deflated", "unlimited/sparse")),       # 2 unlimited
    ("extensible-array", ("growing/rows", "growing/cols", "growing/holes"))])        # 1 unlimited
def test_unlimited_dimensions_chunk_indexes_equal_h5py(path, ckpt, index, names):
    with h5py.File(path) as f:
        for name in names:
            t = ckpt.tensor(name)
            assert t.problem is None and t.info["index"] == index, (name, t.problem)
            same(t.numpy(), f[name][()])
            assert tensorloupe.values(t, 0, t.numel) == pytest.approx(f[name][()].ravel().tolist())


# --- the resolution on its own, and attacks ------------------------------------------------

class _Obj:
    def __init__(self, dataset: bool):
        self.is_dataset = dataset


def _soft(target: str):
    from tensorloupe.formats.hdf5.messages import Link
    return Link("x", None, "soft", target)


def test_a_long_chain_of_soft_links_stops_at_hdf5s_limit():
    # each link names the next: resolving must stop after MAX_HOPS, not recurse or hang
    n = links_module.MAX_HOPS + 5
    found = [(f"l{i}", _soft(f"/l{i + 1}")) for i in range(n)] + [(f"l{n}", _soft("/d"))]
    resolved, described, _ = links_module.resolve({"": _Obj(False), "d": _Obj(True)}, found)
    assert f"more than {links_module.MAX_HOPS} soft links deep" in described["l0"]["problem"]
    assert described[f"l{n}"]["resolved"] == "/d"


def test_a_link_through_itself_is_a_loop():
    found = [("g", _soft("/g/x"))]
    _, described, warnings = links_module.resolve({"": _Obj(False)}, found)
    assert "the links loop (/g → /g)" in described["g"]["problem"] and warnings


def test_a_corrupt_huge_object_id_is_our_error(path):
    data = bytearray(path.read_bytes())
    # The name-index records of the root's attributes start with their 8-byte heap IDs; a huge
    # object's ID (type bits 01) names object 1: make it name one the huge-object tree lacks.
    huge = b"\x10" + (1).to_bytes(7, "little")      # version 0, type 1 (huge), object 1
    hits = 0
    at = data.find(b"BTLF")
    while at >= 0:
        found = data.find(huge, at, at + 512)
        if found >= 0:
            data[found + 1:found + 8] = (99).to_bytes(7, "little")
            hits += 1
        at = data.find(b"BTLF", at + 1)
    assert hits == 1
    ckpt = reader.read(MemorySource(bytes(data), "edited.h5"))     # the datasets still open
    said = [w for w in ckpt.warnings if w.startswith("/: its attributes in dense storage cannot be read")]
    assert said and "names huge object 99" in said[0]
    assert len(ckpt.tensors) == 12


def test_a_v2_btree_chunk_outside_its_grid_is_our_error(path):
    # a record's scaled offsets are a chunk's place on the grid: one past it would be read
    # into no element, or (unchecked) beside the dataset's bytes
    data = bytearray(path.read_bytes())
    at = data.find(b"BTLF")
    while at >= 0 and data[at + 5] != 10:      # the leaf of the unfiltered chunk index (type 10)
        at = data.find(b"BTLF", at + 1)
    assert at >= 0
    first = at + 6 + 8                          # its first record: the address, then offsets
    data[first:first + 8] = (99).to_bytes(8, "little")
    ckpt = reader.read(MemorySource(bytes(data), "edited.h5"))
    t = ckpt.tensor("unlimited/plain")
    with pytest.raises(TensorloupeError, match=r"has a chunk at \[99, .*outside its grid \[5, 4\]"):
        t.numpy()


def test_a_huge_attribute_costs_its_head_not_its_bytes(tmp_path):
    # a 10 MB attribute (a huge heap object): its name, type and shape are read, not its values
    big = tmp_path / "big-attribute.h5"
    with h5py.File(big, "w", libver="latest") as f:
        f["d"] = np.zeros(3, "f4")
        f["d"].attrs["big"] = np.arange(1_250_000, dtype="f8")
    ckpt = tensorloupe.open(big)
    assert ckpt.metadata["d@big"] == "(F64 of shape [1250000]: not read)"
    assert big.stat().st_size > 10_000_000 and ckpt.bytes_read() <= 3 * 65536


def test_an_extensible_array_of_another_client_is_our_error(path):
    # client 0 holds bare addresses, 1 adds a size and a filter mask: read as the other, every
    # chunk's address would be wrong (the header's checksum re-sealed, so the client is what lies)
    data = bytearray(path.read_bytes())
    at = data.find(b"EAHD")
    while at >= 0:
        data[at + 5] = 7
        end = at + 12 + 6 * 8 + 8                   # the header's fields (8-byte lengths, offsets)
        data[end:end + 4] = lookup3(bytes(data[at:end])).to_bytes(4, "little")
        at = data.find(b"EAHD", at + 1)
    ckpt = reader.read(MemorySource(bytes(data), "edited.h5"))
    first = next(t for t in ckpt.tensors if t.info.get("index") == "extensible-array")
    with pytest.raises(TensorloupeError, match="entries of client 7, not this dataset's"):
        first.numpy()
