"""Hostile HDF5 files: each attack is an h5py-written file with bytes changed where the spec
puts a structure, and the exact refusal asserted (one attack per test). The file is refused
only where nothing of it can be trusted; a dataset that cannot be read gets a problem."""

import random
import struct
import zlib

import h5py
import numpy as np
import pytest

import tensorloupe
from tensorloupe.errors import FormatError, LimitError, TensorloupeError, TruncatedError, UnsupportedError


def written(path, libver="earliest", **datasets):
    with h5py.File(path, "w", libver=libver) as f:
        for name, (data, options) in datasets.items():
            f.create_dataset(name, data=data, **options)
    return bytearray(path.read_bytes())


def opened(tmp_path, data, name="bad.h5"):
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return tensorloupe.open(path)


def test_truncated_file_names_the_superblock_length(tmp_path):
    data = written(tmp_path / "a.h5", w=(np.ones((64, 64), "f4"), {}))
    with pytest.raises(TruncatedError, match="the superblock says the file is .* bytes long"):
        opened(tmp_path, data[:len(data) // 2])


def test_unknown_superblock_version(tmp_path):
    data = written(tmp_path / "a.h5", w=(np.ones(3, "f4"), {}))
    data[8] = 7
    with pytest.raises(UnsupportedError, match="superblock version 7"):
        opened(tmp_path, data)


def test_a_group_linking_to_its_parent_is_a_cycle(tmp_path):
    """A symbol table entry of group 'g' names the root group's header: walking it would
    never end."""
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["g/x"] = np.ones(2, "f4")
    data = bytearray((tmp_path / "a.h5").read_bytes())
    root = struct.unpack_from("<Q", data, 64)[0]      # superblock v0: the root entry's header
    nodes = [i for i in range(len(data)) if data[i:i + 4] == b"SNOD"]
    inner = nodes[-1]                                      # the symbol table node of group g
    struct.pack_into("<Q", data, inner + 8 + 8, root)      # its first entry's object header
    with pytest.raises(FormatError, match="the group graph has a cycle"):
        opened(tmp_path, data)


def root_btree(tmp_path) -> tuple[bytearray, int]:
    """An h5py file of one dataset, and where its root group's B-tree node is."""
    data = written(tmp_path / "a.h5", x=(np.ones(2, "f4"), {}))
    return data, data.index(b"TREE")


def test_a_btree_node_pointing_at_itself_is_refused(tmp_path):
    data, tree = root_btree(tmp_path)
    data[tree + 5] = 1                                     # level 1: its children are nodes
    struct.pack_into("<Q", data, tree + 8 + 16 + 8, tree)  # first child: itself
    with pytest.raises(FormatError, match="points at one of its nodes twice"):
        opened(tmp_path, data)


def test_a_contiguous_dataset_past_the_end_gets_a_problem_not_the_file(tmp_path):
    data = written(tmp_path / "a.h5", w=(np.arange(16, dtype="f4"), {}), ok=(np.ones(2, "f4"), {}))
    at = next(i for i in range(len(data) - 18) if data[i] == 3 and data[i + 1] == 1
              and struct.unpack_from("<Q", data, i + 10)[0] == 64)
    struct.pack_into("<Q", data, at + 2, 1 << 40)
    ck = opened(tmp_path, data)
    assert "lies outside the file" in ck.tensor("w").problem
    assert ck.tensor("ok").numpy().tolist() == [1.0, 1.0]


def test_a_chunk_that_inflates_past_its_size_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    data = written(tmp_path / "a.h5", w=(rng.standard_normal((64, 64)).astype("f4"),
                                         {"chunks": (64, 64), "compression": "gzip"}))
    stored = zlib.compress(rng.standard_normal((64, 64)).astype("f4").tobytes(), 4)
    with h5py.File(tmp_path / "a.h5") as f:
        offset = f["w"].id.get_chunk_info(0).byte_offset
    bomb = zlib.compress(bytes(10_000_000), 9)
    assert len(bomb) < len(stored) - 1000
    data[offset:offset + len(bomb)] = bomb
    ck = opened(tmp_path, data)
    with pytest.raises(LimitError, match="inflates to more than the chunk's 16,384 bytes"):
        ck.tensor("w").numpy()


def test_a_corrupted_fletcher32_chunk_is_refused(tmp_path):
    data = written(tmp_path / "a.h5", w=(np.arange(12, dtype="f8"), {"chunks": (4,), "fletcher32": True}))
    with h5py.File(tmp_path / "a.h5") as f:
        offset = f["w"].id.get_chunk_info(1).byte_offset
    data[offset + 3] ^= 0xFF
    ck = opened(tmp_path, data)
    assert tensorloupe.values(ck.tensor("w"), 0, 4) == [0.0, 1.0, 2.0, 3.0]   # chunk 0 is intact
    with pytest.raises(FormatError, match=r"chunk \[1\] of dataset 'w' fails its Fletcher-32"):
        ck.tensor("w").numpy()


def test_a_v2_object_header_that_fails_its_checksum(tmp_path):
    data = written(tmp_path / "a.h5", "latest", w=(np.ones(3, "f4"), {}))
    headers = [i for i in range(len(data)) if data[i:i + 4] == b"OHDR"]
    data[headers[-1] + 12] ^= 0x01
    with pytest.raises(FormatError, match="fails its checksum"):
        opened(tmp_path, data)


def test_lying_btree_entry_count(tmp_path):
    data, tree = root_btree(tmp_path)
    struct.pack_into("<H", data, tree + 6, 60000)
    with pytest.raises(TruncatedError, match="a B-tree node of group '/' lies outside the file"):
        opened(tmp_path, data)


def test_unsupported_filter_is_the_datasets_problem(tmp_path):
    data = written(tmp_path / "a.h5", w=(np.ones((4, 4), "f4"), {"chunks": (2, 2), "compression": "lzf"}))
    ck = opened(tmp_path, data)
    assert "lzf (HDF5 filter 32000)" in ck.tensor("w").problem


def test_random_corruption_raises_only_our_errors(tmp_path):
    """A few hundred seeded corruptions of a file with every structure the reader knows: opening
    and reading every value raises nothing but TensorloupeError (bench/fuzz.py runs millions)."""
    rng = np.random.default_rng(1)
    base = {}
    for libver in ("earliest", "latest"):
        with h5py.File(tmp_path / f"{libver}.h5", "w", libver=libver) as f:
            f.attrs["s"] = "text"
            f["a/c"] = rng.standard_normal((6, 5)).astype("f4")
            f.create_dataset("a/z", data=rng.standard_normal((9, 7)), chunks=(4, 4),
                             compression="gzip", shuffle=True)
            for i in range(10):
                f[f"m/x{i}"] = np.float32(i)
        base[libver] = (tmp_path / f"{libver}.h5").read_bytes()
    chooser = random.Random(7)
    for n in range(300):
        data = bytearray(base["earliest" if n % 2 else "latest"])
        for _ in range(chooser.randint(1, 4)):
            at = chooser.randrange(len(data))
            data[at:at + 8] = bytes(chooser.getrandbits(8) for _ in range(chooser.randint(1, 8)))
        try:
            ck = opened(tmp_path, data, f"fuzz{n % 4}.h5")
            for t in ck.tensors:
                if not t.problem:
                    tensorloupe.values(t, 0, min(t.numel, 4096))
        except TensorloupeError:
            pass
