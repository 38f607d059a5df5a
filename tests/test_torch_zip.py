"""PyTorch ZIP checkpoints against torch.load: names, dtypes, shapes and values of every tensor.

Every file here is written by torch 2.13's own writer (torch.save or PyTorchFileWriter), except
the >4 GiB ZIP64 archive, which is written with struct around a sparse hole so it costs no disk.
"""

import io
import json
import pickle
import struct
import zipfile
import zlib
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

import tensorloupe
from tensorloupe.formats.pytorch import allowlist
from tensorloupe.errors import UnsupportedError
from tensorloupe.formats.pytorch import zipped
from tensorloupe.source.base import MemorySource

import torch_files as tf  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tf.write_all(tmp_path_factory.mktemp("torch"))


def check_against(path, expected: dict, **open_kw):
    """Every tensor's name, dtype, shape and values equal `expected` (name -> torch tensor)."""
    ckpt = tensorloupe.open(path, **open_kw)
    assert [t.name for t in ckpt.tensors] == list(expected)
    for tensor in ckpt.tensors:
        want = expected[tensor.name]
        assert tensor.shape == tuple(want.shape), tensor.name
        assert tensor.dtype == tf.TABLE_NAMES[want.dtype], tensor.name
        got = tensorloupe.values(tensor, 0, tensor.numel)
        assert tf.same_values(got, tf.python_values(want)), tensor.name
    json.dumps([t.to_json() for t in ckpt.tensors])
    json.dumps(ckpt.metadata)
    json.dumps(ckpt.extras)
    return ckpt


def torch_load(path, **kw):
    return tf.expected_tensors(torch.load(path, weights_only=True, **kw))


def test_every_dtype_torch_can_save(files):
    ckpt = check_against(files["dtypes"], torch_load(files["dtypes"]))
    assert ckpt.format == "pytorch-zip" and not ckpt.warnings
    assert {t.dtype for t in ckpt.tensors} >= set(tf.TABLE_NAMES.values())
    scalar, empty = ckpt.tensor("scalar"), ckpt.tensor("empty")
    assert scalar.shape == () and tensorloupe.values(scalar) == [3.5]
    assert empty.shape == (0, 3) and empty.nbytes == 0 and tensorloupe.values(empty) == []
    # float8 and uint16..64 are saved as an untyped byte storage plus a dtype (_rebuild_tensor_v3)
    assert ckpt.tensor("float8_e5m2").info["storage_dtype"] == "uint8"


def test_views_shared_storages_and_offsets(files):
    ckpt = check_against(files["views"], torch_load(files["views"]))
    base, narrow = ckpt.tensor("base"), ckpt.tensor("narrow")
    assert ckpt.tensor("transposed").strides == (1, 8)
    assert narrow.info["storage_offset"] == 10 and narrow.offset == base.offset + 40
    assert narrow.strides == (8, 1) and narrow.nbytes == (1 + 2 * 8 + 3) * 4
    assert ckpt.tensor("row").strides is None and ckpt.tensor("row").offset == base.offset + 96
    assert ckpt.tensor("broadcast").strides == (0, 1)
    assert ckpt.tensor("tied_b").info["same_as"] == "tied_a"
    storages = {t.info["storage"] for t in ckpt.tensors if t.name.startswith(("chunk", "tied"))}
    assert len(storages) == 1  # four tensors, one storage in the file


def test_sampling_and_grids_of_views_read_torch_s_elements(tmp_path):
    gen = torch.Generator().manual_seed(5)
    big = torch.randn(300, 700, generator=gen)
    views = {"t": big.t(), "narrow": big[17:290:3, 5:600], "perm": big.view(30, 10, 700).permute(2, 0, 1)}
    path = tf.save(views, tmp_path / "sample.pt")
    ckpt = tensorloupe.open(path)
    for name, want in views.items():
        tensor = ckpt.tensor(name)
        sample = tensorloupe.sample(tensor, 5000)
        # a sample's windows lie in the storage's order (sampler/layout.py): largest stride outermost
        order = sorted(range(want.dim()), key=lambda d: (want.stride(d) != 0, -want.stride(d)))
        flat = want.permute(order).reshape(-1)
        expected = [v for start, count in sample.windows for v in flat[start:start + count].tolist()]
        assert sample.values == expected
    grid = tensorloupe.grid(ckpt.tensor("t"), rows=16, cols=16)
    want = views["t"]
    assert grid.values == [want[r, c].item() for r in grid.row_index for c in grid.col_index]


def test_plain_state_dict(files):
    ckpt = check_against(files["state_dict"], torch_load(files["state_dict"]))
    assert ckpt.extras["prefix"] == ""  # lm_head.weight is outside model.*
    assert ckpt.extras["safety"]["dangerous"] == []
    verdicts = {g["name"]: g["verdict"] for g in ckpt.extras["safety"]["globals"]}
    assert verdicts == {"torch._utils._rebuild_tensor_v2": "allowed", "torch.FloatStorage": "allowed",
                        "collections.OrderedDict": "allowed"}


def test_lightning_checkpoint(files):
    ckpt = check_against(files["lightning"], torch_load(files["lightning"]))
    assert ckpt.extras["prefix"] == "state_dict.model."
    names = [t.name for t in ckpt.tensors]
    assert "state_dict.model.0.weight" in names
    assert "optimizer_states.0.state.0.exp_avg_sq" in names
    assert "callbacks.ModelCheckpoint{'monitor': 'val_loss'}.best_model_score" in names
    meta = ckpt.metadata
    assert meta["epoch"] == 3 and meta["global_step"] == 120
    assert meta["hyper_parameters"] == {"lr": 1e-3, "hidden": 8, "layers": [4, 8, 3], "name": "tiny",
                                        "betas": [0.9, 0.999]}
    assert meta["state_dict"] == {"tensors": 6, "tree": "state_dict.model."}
    assert meta["optimizer_states"][0]["param_groups"][0]["params"] == [0, 1, 2, 3, 4, 5]
    assert meta["optimizer_states"][0]["state"]["0"]["exp_avg"]["tensor"] == \
        "optimizer_states.0.state.0.exp_avg"


def test_pickled_module_names_tensors_like_its_state_dict(files):
    model = torch.load(files["module"], weights_only=False)  # our own fixture: trusted
    ckpt = check_against(files["module"], dict(model.state_dict()))
    assert ckpt.metadata["root"]["global"] == "torch.nn.modules.container.Sequential"
    verdicts = {g["name"]: g["verdict"] for g in ckpt.extras["safety"]["globals"]}
    # torch.nn module classes are on the short list of names known not to run code
    assert verdicts["torch.nn.modules.batchnorm.BatchNorm1d"] == "inert"
    assert not ckpt.extras["safety"]["dangerous"]


def test_big_endian_checkpoint(files):
    original = {k: v for k, v in tf.dtype_tensors().items() if v.numel()}
    ckpt = check_against(files["big_endian"], original)
    assert all(t.big_endian for t in ckpt.tensors)
    assert ckpt.extras["archive"]["byteorder"] == "big"
    assert ckpt.extras["archive"]["root"] == "big_endian"  # PyTorchFileWriter names it after the file
    # torch.load byte-swaps storages saved with a typed storage class; for the dtypes saved as
    # untyped bytes + dtype (uint16/32/64) torch 2.13 swaps nothing and returns wrong values.
    loaded = torch_load(files["big_endian"])
    for name in ("float32", "bfloat16", "int64", "complex64", "complex128", "float16"):
        assert tf.same_values(tf.python_values(loaded[name]), tf.python_values(original[name]))
    assert loaded["uint16"].tolist() != original["uint16"].tolist()


def rezip(source: Path, target: Path, deflate=lambda name: False, keep=lambda name: True) -> Path:
    """Copy a torch ZIP member by member, deflating the members `deflate(name)` picks."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            method = zipfile.ZIP_DEFLATED if deflate(info.filename) else zipfile.ZIP_STORED
            if keep(info.filename):
                new.writestr(zipfile.ZipInfo(info.filename), old.read(info), compress_type=method)
    return target


def test_missing_byteorder_record_means_little_endian(files, tmp_path):
    # checkpoints from torch < 1.12 have no byteorder record
    path = rezip(files["dtypes"], tmp_path / "old.pt", keep=lambda n: not n.endswith("byteorder"))
    ckpt = check_against(path, torch_load(path))
    assert "byteorder" not in ckpt.extras["archive"] and not ckpt.tensors[0].big_endian


def test_deflated_data_pkl_is_inflated(files, tmp_path):
    path = rezip(files["views"], tmp_path / "deflated.pt", lambda n: n.endswith("data.pkl"))
    ckpt = check_against(path, torch_load(path))
    assert ckpt.tensor("narrow").info["storage_offset"] == 10


def test_compressed_storages_open_with_a_problem(files, tmp_path):
    path = rezip(files["views"], tmp_path / "allzip.pt", lambda n: True)
    ckpt = tensorloupe.open(path)
    assert len(ckpt.tensors) == 14 and all("compressed" in t.problem for t in ckpt.tensors)
    with pytest.raises(UnsupportedError, match="compressed"):
        tensorloupe.values(ckpt.tensors[0])


def test_a_missing_storage_is_a_problem(files, tmp_path):
    path = rezip(files["state_dict"], tmp_path / "missing.pt", keep=lambda n: n != "archive/data/0")
    ckpt = tensorloupe.open(path)
    assert "missing from the archive" in ckpt.tensors[0].problem
    assert ckpt.tensors[1].problem is None
    assert any("missing from the archive" in w for w in ckpt.warnings)


def test_opening_reads_the_directory_and_never_storage_bytes(tmp_path):
    path = tf.save({f"layer{i}": torch.full((256, 1024), float(i)) for i in range(64)}, tmp_path / "m.pt")
    size = path.stat().st_size
    reads: list[tuple[int, int]] = []

    class Recording(MemorySource):
        def _read(self, offset, n):
            reads.append((offset, n))
            return super()._read(offset, n)

    ckpt = tensorloupe.open(Recording(path.read_bytes(), name="m.pt"))
    at_open = list(reads)
    # the 64 storages' local headers are read when their bytes are first needed, not at open
    assert all(t.known_file_offset is None for t in ckpt.tensors) and len(at_open) < 20  # not 64+
    spans = [(t.locate() + 64, t.locate() + t.nbytes - 64) for t in ckpt.tensors]  # interiors
    assert not [r for r in reads for lo, hi in spans if r[0] < hi and r[0] + r[1] > lo]
    assert all(t.known_file_offset == t.locate() for t in ckpt.tensors)
    assert ckpt.bytes_read() < size / 100
    with tensorloupe.open(path) as on_disk:
        assert on_disk.bytes_read() < size / 20  # the block cache rounds reads up to 64 KiB


@pytest.mark.filterwarnings("ignore::UserWarning")  # quantized and complex32 are "experimental"
def test_unknown_and_quantized_dtypes(tmp_path):
    qtensor = torch.quantize_per_tensor(torch.tensor([-1.0, 0.0, 0.5, 2.0]), 0.25, 3, torch.qint8)
    packed_fp4 = torch.tensor([0x21, 0xF3], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    path = tf.save({"fp4_pairs": packed_fp4, "q": qtensor,
                    "e8m0": torch.tensor([0.25, 1.0, 4.0]).to(torch.float8_e8m0fnu)}, tmp_path / "odd.pt")
    ckpt = tensorloupe.open(path)
    odd = ckpt.tensor("fp4_pairs")      # (complex32 has a decoder: tests/test_complex32.py)
    # two e2m1 codes a byte, low nibble first (tests/test_fp4.py): 0x21 -> 0.5, 1.0; 0xF3 -> 1.5, -6.0
    assert odd.dtype == "F4" and odd.problem is None and odd.shape == (4,)
    assert tensorloupe.values(odd) == [0.5, 1.0, 1.5, -6.0]
    q = ckpt.tensor("q")
    assert q.dtype == "I8" and tensorloupe.values(q) == qtensor.int_repr().tolist()
    assert q.info["quantizer"] == {"qscheme": "per_tensor_affine", "scale": 0.25, "zero_point": 3}
    assert tensorloupe.values(ckpt.tensor("e8m0")) == [0.25, 1.0, 4.0]


def test_sniff_and_detection(files, tmp_path):
    head = files["views"].read_bytes()[:1024]
    assert zipped.sniff(head, 0, "anything")
    plain = io.BytesIO()
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("readme.txt", "hello")
    # any ZIP goes to the torch reader, whose members decide (and name a ZIP of something else)
    assert zipped.sniff(plain.getvalue(), 0, "notes.zip")
    for suffix in (".bin", ".ckpt", ".pth"):
        renamed = tmp_path / f"pytorch_model{suffix}"
        renamed.write_bytes(files["state_dict"].read_bytes())
        assert tensorloupe.open(renamed).format == "pytorch-zip"
    with pytest.raises(tensorloupe.TensorloupeError, match="ZIP archive but not a PyTorch"):
        tensorloupe.open(plain.getvalue(), name="model.pt")


# --- ZIP64: a >4 GiB archive built around a sparse hole -------------------------------------------

class _Storage:
    def __init__(self, key, cls, numel):
        self.key, self.cls, self.numel = key, cls, numel


class _View:
    """Pickles exactly as torch pickles a tensor (torch/_tensor.py __reduce_ex__)."""

    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride, False, OrderedDict())

    def __reduce__(self):
        return torch._utils._rebuild_tensor_v2, self.args


class _TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None


def _write_zip64(path: Path, members: list[tuple[str, int, dict[int, bytes]]]) -> None:
    """A stored ZIP64 archive as miniz writes it: data 64-byte aligned with an "FB" padding extra.
    Each member is (name, size, {offset: bytes}); everything not given is a sparse hole."""
    central = b""
    with open(path, "wb") as f:
        for name, size, chunks in members:
            header = f.tell()
            name_b = f"archive/{name}".encode()
            big = size >= 0xFFFFFFFF
            extra = struct.pack("<HHQQ", 1, 16, size, size) if big else b""
            pad = -(header + 30 + len(name_b) + len(extra) + 4) % 64
            extra += struct.pack("<HH", 0x4246, pad) + b"Z" * pad
            crc = zlib.crc32(chunks.get(0, b"")) if not big else 0  # the big CRC is never checked
            f.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 45, 0, 0, 0, 0, crc,
                                0xFFFFFFFF if big else size, 0xFFFFFFFF if big else size,
                                len(name_b), len(extra)) + name_b + extra)
            start = f.tell()
            for offset, data in chunks.items():
                f.seek(start + offset)
                f.write(data)
            f.truncate(start + size)
            f.seek(start + size)
            fields = ([size, size] if big else []) + ([header] if header >= 0xFFFFFFFF else [])
            cextra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
            central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 45, 45, 0, 0, 0, 0, crc,
                                   0xFFFFFFFF if big else size, 0xFFFFFFFF if big else size,
                                   len(name_b), len(cextra), 0, 0, 0, 0,
                                   min(header, 0xFFFFFFFF)) + name_b + cextra
        cd_offset = f.tell()
        f.write(central)
        eocd64 = f.tell()
        n = len(members)
        f.write(struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, len(central), cd_offset))
        f.write(struct.pack("<4sIQI", b"PK\x06\x07", 0, eocd64, 1))
        f.write(struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n, n, len(central), 0xFFFFFFFF, 0))


def test_zip64_archive_over_4_gib(tmp_path):
    numel = (1 << 32) + 4096
    head, tail = bytes(range(1, 17)), bytes(range(200, 216))
    big = _Storage("0", torch.ByteStorage, numel)
    after = _Storage("1", torch.FloatStorage, 4)
    state = {"big": _View(big, 0, (numel,), (1,)),
             "tail": _View(big, numel - 16, (4, 4), (1, 4)),
             "after": _View(after, 1, (3,), (1,))}
    buffer = io.BytesIO()
    _TorchPickler(buffer, protocol=2).dump(state)
    path = tmp_path / "zip64.pt"
    _write_zip64(path, [("data.pkl", len(buffer.getvalue()), {0: buffer.getvalue()}),
                        ("byteorder", 6, {0: b"little"}),
                        ("data/0", numel, {0: head, numel - 16: tail}),
                        ("data/1", 16, {0: struct.pack("<4f", 1.5, -2.0, 3.25, 7.0)}),
                        ("version", 2, {0: b"3\n"})])
    assert path.stat().st_size > numel and path.stat().st_blocks * 512 < 1 << 20  # sparse

    ckpt = tensorloupe.open(path)
    loaded = torch.load(path, mmap=True, weights_only=True)
    big_t, tail_t, after_t = (ckpt.tensor(n) for n in ("big", "tail", "after"))
    assert big_t.shape == (numel,) and big_t.locate() % 64 == 0 and after_t.locate() > 1 << 32
    assert tensorloupe.values(big_t, 0, 16) == loaded["big"][:16].tolist() == list(head)
    assert tensorloupe.values(big_t, numel - 16, 16) == loaded["big"][-16:].tolist() == list(tail)
    assert tensorloupe.values(tail_t, 0, 16) == loaded["tail"].reshape(-1).tolist()
    assert tensorloupe.values(after_t) == loaded["after"].tolist() == [-2.0, 3.25, 7.0]
    assert ckpt.bytes_read() < 1 << 20


def test_numpy_values_are_read_as_data(tmp_path):
    import numpy as np
    path = tf.save({"w": torch.ones(2), "np_scalar": np.float64(1.5), "np_int": np.int32(-3),
                    "np_array": np.arange(6.0).reshape(2, 3)}, tmp_path / "np.pt")
    ckpt = tensorloupe.open(path)
    meta = ckpt.metadata
    assert meta["np_scalar"] == 1.5 and meta["np_int"] == -3
    assert meta["np_array"] == {"numpy": "ndarray", "shape": [2, 3], "dtype": "f8", "bytes": 48}
    assert ckpt.extras["safety"]["dangerous"] == [] and [t.name for t in ckpt.tensors] == ["w"]


def test_unknown_storage_class_and_dtype_open_with_a_problem(tmp_path):
    # A newer torch's storage class or dtype: the tensors say why they cannot be read.
    storage = (b"(X\x07\x00\x00\x00storagectorch\nFloat6Storage\nX\x01\x00\x00\x000"
               b"X\x03\x00\x00\x00cpuK\x04tQ")  # ('storage', torch.Float6Storage, '0', 'cpu', 4)
    args = b"K\x00K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)R"
    data_pkl = (b"\x80\x02}(X\x01\x00\x00\x00ac" + b"torch._utils\n_rebuild_tensor_v2\n(" + storage + args
                + b"tRX\x01\x00\x00\x00bctorch._utils\n_rebuild_tensor_v3\n(" + storage + args
                + b"ctorch\nfloat6_e3m2\ntRu.")
    path = tf.write_torch_zip(tmp_path / "future.pt", data_pkl, {"data/0": bytes(4)})
    ckpt = tensorloupe.open(path)
    a, b = ckpt.tensors
    assert a.dtype == "torch.Float6Storage" and "no decoder" in a.problem
    assert b.dtype == "torch.float6_e3m2" and "no decoder" in b.problem
    # not allow-listed, so (honestly) "may execute code": torch.load would look it up and call it
    assert {(g["verdict"], g["reason"]) for g in ckpt.extras["safety"]["globals"]
            if g["name"].startswith("torch.Float6")} == {("dangerous", allowlist.MAY_EXECUTE)}


def test_a_broken_local_header_is_found_when_the_storage_is_needed(tmp_path):
    # Storages are positioned on first use: a broken local header is reported then, on that tensor,
    # and a full listing (inspect) turns it into a problem and a warning instead of failing.

    from tensorloupe import report
    from tensorloupe.errors import TensorloupeError
    path = tf.save({"good": torch.arange(4.0), "bad": torch.ones(3)}, tmp_path / "m.pt")
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        bad = next(i for i in z.infolist() if i.filename.endswith("data/1"))
    raw[bad.header_offset:bad.header_offset + 4] = b"XXXX"
    ckpt = tensorloupe.open(bytes(raw), name="m.pt")
    assert tensorloupe.values(ckpt.tensor("good")) == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(TensorloupeError, match="has no local header where the central directory says"):
        tensorloupe.values(ckpt.tensor("bad"))
    listing = report.inspect_json(ckpt)
    entry = next(t for t in listing["tensors"] if t["name"] == "bad")
    assert "cannot be located" in entry["problem"] and entry["offset"] is None
    assert any("'bad'" in w for w in listing["warnings"])
