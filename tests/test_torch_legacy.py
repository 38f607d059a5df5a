"""Pre-1.6 PyTorch checkpoints (`_use_new_zipfile_serialization=False`) against torch.load."""

import io
import json
import pickle
import tarfile

import pytest
import torch

import tensorloupe
from tensorloupe.opening import detect
from tensorloupe.errors import FormatError, LimitError, TruncatedError
from tensorloupe.formats.pytorch import legacy as torch_legacy
from tensorloupe.source.base import MemorySource

import torch_files as tf  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tf.write_all(tmp_path_factory.mktemp("torch"))


def check_against(source, expected):
    ckpt = tensorloupe.open(source)
    assert [t.name for t in ckpt.tensors] == list(expected)
    for tensor in ckpt.tensors:
        want = expected[tensor.name]
        assert tensor.shape == tuple(want.shape) and tensor.dtype == tf.TABLE_NAMES[want.dtype]
        got = tensorloupe.values(tensor, 0, tensor.numel)
        assert tf.same_values(got, tf.python_values(want)), tensor.name
    json.dumps(ckpt.metadata)
    json.dumps(ckpt.extras)
    return ckpt


class Recording(MemorySource):
    def __init__(self, data, name):
        super().__init__(data, name)
        self.ranges: list[tuple[int, int]] = []

    def _read(self, offset, n):
        self.ranges.append((offset, offset + n))
        return super()._read(offset, n)


def test_legacy_file_matches_torch(files):
    expected = tf.expected_tensors(torch.load(files["legacy"], weights_only=True))
    ckpt = check_against(files["legacy"], expected)
    assert ckpt.format == "pytorch-legacy" and not ckpt.warnings
    assert ckpt.tensor("tied_b").info["same_as"] == "tied_a"
    assert ckpt.tensor("narrow").strides == (8, 1)
    assert ckpt.extras["legacy"]["type_sizes"] == {"short": 2, "int": 4, "long": 4}


def test_storage_offsets_are_computed_without_reading_storages(tmp_path):
    tensors = {f"w{i}": torch.full((64, 256), float(i)) for i in range(8)}
    path = tf.save(tensors, tmp_path / "big_legacy.pt", _use_new_zipfile_serialization=False)
    source = Recording(path.read_bytes(), "big_legacy.pt")
    ckpt = tensorloupe.open(source)
    start = ckpt.extras["legacy"]["storage_start"]
    # The pickles are read in one window (which may reach into the storages); after them only
    # the 8-byte count prefixes are read (torch.load checks them too), no storage.
    prefixes = {ckpt.tensor(name).offset - 8 for name in tensors}
    assert all(begin < start or (begin in prefixes and end - begin == 8)
               for begin, end in source.ranges)
    assert ckpt.bytes_read() <= torch_legacy.FIRST_READ + detect.HEAD_BYTES + 8 * len(tensors)
    for name, tensor in tensors.items():
        assert tensorloupe.values(ckpt.tensor(name), 0, 3) == [float(name[1:])] * 3


def test_a_wrong_layout_falls_back_to_the_count_prefixes(files):
    data = files["legacy"].read_bytes() + b"trailing junk"
    ckpt = tensorloupe.open(data, name="junk.pt")
    assert any("count prefixes" in w for w in ckpt.warnings)
    assert tensorloupe.values(ckpt.tensor("tail")) == [5.0, 6.0, 7.0, 8.0, 9.0]


@pytest.mark.parametrize("which, delta", [(0, 1), (2, -1), (7, 1 << 40)])
def test_a_count_prefix_that_lies_is_refused_as_torch_refuses_it(tmp_path, which, delta):
    # The pickle's sizes account for the file exactly, so the layout needs no prefix; but
    # torch.load reads each one and refuses a storage whose count is not its pickle's. It used
    # to open with no warning and the right-looking values.
    tensors = {f"w{i}": torch.full((4, 8), float(i)) for i in range(8)}
    path = tf.save(tensors, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    ckpt = tensorloupe.open(path)
    offset = ckpt.tensor(f"w{which}").offset - 8
    key = ckpt.tensor(f"w{which}").info["storage"]
    data = bytearray(path.read_bytes())
    assert int.from_bytes(data[offset:offset + 8], "little") == 32
    data[offset:offset + 8] = (32 + delta).to_bytes(8, "little", signed=True)
    patched = tmp_path / "lying.pt"
    patched.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="storage has wrong byte size"):
        torch.load(patched, weights_only=True)
    with pytest.raises(FormatError) as e:
        tensorloupe.open(patched)
    message = str(e.value)
    assert f"is declared with 32 elements in the pickle but its count prefix in the file says " \
           f"{32 + delta:,}" in message and f"at byte {offset:,}" in message
    assert f'storage "{key}" is declared' in message


def test_truncated_legacy_file(files):
    data = files["legacy"].read_bytes()
    with pytest.raises(TruncatedError):
        tensorloupe.open(data[:-100], name="cut.pt")
    with pytest.raises(TruncatedError):
        tensorloupe.open(data[:300], name="cut.pt")


def test_magic_and_version_are_checked():
    bad = pickle.dumps(torch_legacy.MAGIC_NUMBER, protocol=2) + pickle.dumps(999, protocol=2)
    with pytest.raises(FormatError, match="unknown legacy serialization version"):
        torch_legacy.read(MemorySource(bad, "v.pt"))
    assert torch_legacy.sniff(bad, len(bad), "v.pt")
    assert torch_legacy.sniff(pickle.dumps(torch_legacy.MAGIC_NUMBER, protocol=0), 0, "x")
    # any other binary pickle is what torch.load's legacy path would unpickle: read for its report
    plain = pickle.dumps(12345, protocol=2)
    assert torch_legacy.sniff(plain, 0, "x")
    ckpt = torch_legacy.read(MemorySource(plain, "x.pt"))
    assert ckpt.format == "pickle" and ckpt.tensors == [] and ckpt.metadata == {"root": 12345}
    assert "torch.load(weights_only=False) unpickles its first 6 bytes" in ckpt.warnings[0]


# Protocol 0 cannot carry torch's tuple persistent ids (pickle writes str(tuple)): torch.load
# refuses such files too.
@pytest.mark.parametrize("protocol", [1, 2, 3, 4, 5])
def test_every_binary_pickle_protocol(tmp_path, protocol):
    tensors = {"a": torch.arange(6.0).reshape(2, 3).t(), "b": torch.tensor([True, False])}
    buffer = io.BytesIO()
    torch.save(tensors, buffer, _use_new_zipfile_serialization=False, pickle_protocol=protocol)
    check_against(MemorySource(buffer.getvalue(), "p.pt"), tensors)


# --- the tar format (before torch 0.4): HAND-BUILT by fixtures/torch_files.write_legacy_tar ------

def test_hand_built_tar_matches_torch(files):
    with pytest.raises(RuntimeError, match="legacy .tar format"):
        torch.load(files["legacy_tar"], weights_only=True)  # torch refuses it without pickle
    expected = tf.expected_tensors(torch.load(files["legacy_tar"], weights_only=False))
    ckpt = check_against(files["legacy_tar"], expected)
    assert ckpt.format == "pytorch-tar" and not ckpt.warnings
    assert ckpt.tensor("narrow").info["storage_offset"] == 10
    verdicts = {g["name"]: g["verdict"] for g in ckpt.extras["safety"]["globals"]}
    assert verdicts["torch.FloatTensor"] == verdicts["torch.FloatStorage"] == "allowed"


def test_tar_storages_are_located_without_reading_them(tmp_path):
    tensors = {f"w{i}": torch.full((128, 128), float(i)) for i in range(4)}
    path = tf.write_legacy_tar(tmp_path / "old.tar", tensors)
    source = Recording(path.read_bytes(), "old.tar")
    ckpt = tensorloupe.open(source)
    interiors = [(t.offset + 4096, t.offset + t.nbytes) for t in ckpt.tensors]
    assert not [r for r in source.ranges for lo, hi in interiors if r[0] < hi and r[1] > lo]
    for name in tensors:
        assert tensorloupe.values(ckpt.tensor(name), 100, 2) == [float(name[1:])] * 2


def test_tar_header_declaring_a_huge_size(tmp_path):
    # A PAX extended header claiming 8 GiB: tarfile asks for all of them in one read, which
    # io.RawIOBase would allocate before reading.
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, 0o77777777777
    blob = header.tobuf(format=tarfile.USTAR_FORMAT) + b"\0" * 2048
    with pytest.raises(tensorloupe.TensorloupeError):
        tensorloupe.open(blob, name="huge.tar")


def _tar(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, blob in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return out.getvalue()


@pytest.mark.parametrize("root_key", ["huge", "deep"])
def test_a_pickle_value_in_an_error_is_quoted_bounded(root_key):
    # A storage view naming a root storage by a 5,000-digit int or a tuple nested 150 deep (the
    # unpickler refuses more than 200 levels of anything; 100,000 was found by the audit):
    # the KeyError's str() raised ValueError, and hashing the tuple recurses in C. Keys are
    # checked before they are hashed, and pickle values in messages are quoted bounded.
    views = pickle.dumps([(1, 10 ** 5000, 0, 1)], protocol=2) if root_key == "huge" else \
        b"\x80\x02](K\x01)" + b"\x85" * 150 + b"K\x00K\x01ta."
    blob = _tar({"sys_info": pickle.dumps({}, protocol=2), "pickle": pickle.dumps({}, protocol=2),
                 "tensors": pickle.dumps(0, protocol=2),
                 "storages": pickle.dumps(0, protocol=2) + views})
    with pytest.raises(FormatError, match="key is not a string or a 64-bit integer") as info:
        tensorloupe.open(blob, name="views.pt")
    assert len(str(info.value)) < 400


def _parsed(monkeypatch) -> list[int]:
    """Record the bytes each pickle parse of the tar reader is given."""
    from tensorloupe.formats.pytorch import tar
    sizes: list[int] = []
    real = tar.load_pickle

    def counting(data, persistent_load, *, start=0, **kw):
        sizes.append(len(data) - start)
        return real(data, persistent_load, start=start, **kw)
    monkeypatch.setattr(tar, "load_pickle", counting)
    return sizes


def test_a_small_tar_pickle_that_never_ends_costs_at_most_a_mib_of_parsing(monkeypatch):
    # Found by bench/fuzz.py (pytorch-legacy inputs 306553, 333073, ...: 18 MB `storages`
    # members whose count pickle is a spliced opcode repeated millions of times): the reader
    # parsed windows of 4 KB, 16 KB, ... 16 MiB from the start each time (21 MB, 2.5-3.5 s,
    # hangs on a loaded machine) before refusing.
    sizes = _parsed(monkeypatch)
    never_ends = b"\x80\x02" * (3 << 20)
    blob = _tar({"sys_info": pickle.dumps({}, protocol=2), "pickle": pickle.dumps({}, protocol=2),
                 "tensors": pickle.dumps(0, protocol=2), "storages": never_ends})
    with pytest.raises(LimitError, match="pickle in the tar archive is larger than the limit"):
        tensorloupe.open(blob, name="never_ends.pt")
    assert sum(sizes) < 1.5 * (1 << 20)


def test_a_tar_object_pickle_over_the_limit_is_refused_unparsed(monkeypatch):
    # The last pickle of a member (the object; the storage views) runs to the member's end: one
    # longer than the 16 MiB limit is refused by its size, as the ZIP reader refuses data.pkl
    # (fuzz input 422399: a 18 MB `pickle` member parsed for 2.9 s first).
    sizes = _parsed(monkeypatch)
    huge = b"\x80\x02" * (17 << 19) + b"N."
    blob = _tar({"sys_info": pickle.dumps({}, protocol=2), "pickle": huge,
                 "tensors": pickle.dumps(0, protocol=2), "storages": pickle.dumps(0, protocol=2)
                 + pickle.dumps([], protocol=2)})
    with pytest.raises(LimitError, match="larger than the limit") as info:
        tensorloupe.open(blob, name="huge_object.pt")
    assert "found 17,825,794" in str(info.value)
    assert max(sizes) < 4096


def test_a_deeply_nested_count_is_quoted_bounded():
    # Found by bench/fuzz.py (pytorch-legacy input 74285): a count pickle that is a list nested
    # thousands deep; repr() of it in the error raised RecursionError. Deeper than 200 levels
    # the unpickler refuses it (test_unpickle.py); here it is as deep as is read.
    deep = b"\x80\x02" + b"]" * 199 + b"a" * 198 + b"."
    blob = _tar({"sys_info": pickle.dumps({}, protocol=2), "pickle": pickle.dumps({}, protocol=2),
                 "tensors": pickle.dumps(0, protocol=2), "storages": deep})
    with pytest.raises(FormatError, match="count in the tar archive does not fit") as info:
        tensorloupe.open(blob, name="deep_count.pt")
    assert len(str(info.value)) < 400


# --- the tar format's storage views (view_key, root_key, offset, numel) --------------------------

def view_tar(path, offset, numel):
    """A tar checkpoint whose tensor 'b' (2 elements) lies in view 2000 of storage 1000
    (arange(8), 'a')."""
    return tf.write_legacy_tar(path, {"a": torch.arange(8.0), "b": torch.zeros(2)},
                               views=[(2000, 1000, offset, numel)], storage_of={"b": 2000})


@pytest.mark.parametrize("offset, numel", [(2, 3), (6, 3), (6, 2), (0, 8), (8, 0), (-1, 2), (7, 5)])
def test_tar_storage_views_are_cut_as_torch_cuts_them(tmp_path, offset, numel):
    # torch slices the root's bytes with Python's rules: a view past the end is cut short, and
    # a tensor that needs more than its view holds is refused by torch, a problem here.
    path = view_tar(tmp_path / "v.tar", offset, numel)
    ckpt = tensorloupe.open(path)
    try:
        want = torch.load(path, weights_only=False)["b"]
    except RuntimeError as e:
        assert "not resizable" in str(e)
        assert ckpt.tensor("b").problem and "needs bytes" in ckpt.tensor("b").problem
        return
    assert not ckpt.tensor("b").problem
    assert tensorloupe.values(ckpt.tensor("b")) == want.tolist()
    assert ckpt.tensor("b").info["storage_numel"] == want.untyped_storage().nbytes() // 4


@pytest.mark.parametrize("offset, numel, found", [
    (10 ** 5000, 2, "offset an integer of 16,610 bits (~5,001 digits), 2 elements"),
    (0, -(10 ** 5000), "offset 0, an integer of 16,610 bits (~5,001 digits) elements"),
    (1 << 63, 2, "offset 9,223,372,036,854,775,808, 2 elements"),
], ids=["5001-digit offset", "5001-digit count", "2**63 offset"])
@pytest.mark.parametrize("command", ["inspect", "health", "diff"])
def test_a_tar_view_beyond_64_bits_is_one_clear_error(tmp_path, capsys, offset, numel, found,
                                                      command):
    # inspect, health and diff ended in ValueError: Exceeds the limit (4300 digits).
    from tensorloupe.cli import main
    path = view_tar(tmp_path / "v.tar", offset, numel)
    with pytest.raises(RuntimeError):
        torch.load(path, weights_only=False)
    argv = [command, str(path)] + ([str(view_tar(tmp_path / "ok.tar", 2, 3))] if command == "diff" else [])
    assert main(argv) == 3
    out, err = capsys.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "storage view 2000 in the tar member 'storages' has an offset or element count " \
           "beyond 64 bits" in err and found in err, err


@pytest.mark.parametrize("views, storage_of, words", [
    ([(2000, 1000, 2)], {}, "a storage view's (view key, root key, offset, numel) is not a 4-tuple"),
    ({"a": 1}, {}, "the storage views of the tar member 'storages' are not a list"),
    ([(2000, 4242, 0, 1)], {}, "storage view refers to storage 4242, which the tar member "
                                "'storages' does not hold"),
    ([], {"b": 4242}, "tensor 1 refers to storage 4242, which the tar member 'storages' does "
                      "not hold"),
])
def test_a_tar_record_torch_would_not_read_says_what_is_wrong(tmp_path, views, storage_of, words):
    # These ended in "malformed tar checkpoint: ValueError ..." / "KeyError 4242".
    path = tf.write_legacy_tar(tmp_path / "bad.tar", {"a": torch.arange(8.0), "b": torch.zeros(2)},
                               views=views, storage_of=storage_of)
    with pytest.raises(Exception):
        torch.load(path, weights_only=False)
    with pytest.raises(FormatError) as e:
        tensorloupe.open(path)
    assert words in str(e.value) and "Error" not in str(e.value).replace("FormatError", ""), str(e.value)
