"""A tensor whose bytes fail to read while `convert` writes: skipped with its reason (in the
report and in `__metadata__["skipped"]`), the other tensors written with a header that is right
for what the file holds; with --strict nothing is written and the exit is 3. The outputs are read
by safetensors.safe_open and compared with the source's tensors as safetensors reads them."""

import json
import os

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import tensorloupe
from tensorloupe.cli import EXIT_INVALID, EXIT_OK, main
from tensorloupe.source.base import FileSource

# Big enough that no header read's cache block holds any of their bytes: every byte of them
# is read while the file is written.
SHAPE = (256, 512)
BROKEN = "b.weight"


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory):
    """Two shards as transformers names them, with the index; the names in file order."""
    folder = tmp_path_factory.mktemp("set")
    g = torch.Generator().manual_seed(5)
    parts = [{"a.weight": torch.randn(SHAPE, generator=g), BROKEN: torch.randn(SHAPE, generator=g)},
             {"c.weight": torch.randn(SHAPE, generator=g).to(torch.bfloat16),
              "d.bias": torch.randn(7, generator=g)}]
    weight_map = {}
    for k, tensors in enumerate(parts, 1):
        name = f"model-{k:05d}-of-00002.safetensors"
        save_file(tensors, str(folder / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(tensors, name))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


def reference(folder) -> dict[str, torch.Tensor]:
    out = {}
    for path in sorted(folder.glob("model-*.safetensors")):
        with safe_open(str(path), "pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    return out


@pytest.fixture
def failing_range(monkeypatch, shard_set):
    """The first shard's bytes of BROKEN come back short, as from a file truncated after it was
    opened: the source's own TruncatedError, from the real read path."""
    path = str(shard_set / "model-00001-of-00002.safetensors")
    with open(path, "rb") as f:
        start = 8 + int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(start - 8))
    lo, hi = (start + o for o in header[BROKEN]["data_offsets"])
    real = FileSource._read

    def _read(self, offset, n):
        data = real(self, offset, n)
        if self.path == path and offset < hi and offset + n > lo:
            return data[:max(0, lo - offset) + 100]
        return data
    monkeypatch.setattr(FileSource, "_read", _read)


def loaded(path):
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def assert_rest_equal(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(n for n in want if n != BROKEN)
    for name, tensor in got.items():
        assert tensor.dtype == want[name].dtype and torch.equal(tensor, want[name]), name


def test_a_tensor_whose_read_fails_is_skipped_with_its_reason(tmp_path, shard_set, failing_range, capsys):
    want = reference(shard_set)
    out = tmp_path / "one.safetensors"
    assert main(["convert", str(shard_set), str(out)]) == EXIT_OK
    got, meta = loaded(out)
    assert_rest_equal(got, want)
    skipped = meta["skipped"]
    assert skipped.startswith("{") and BROKEN in skipped and "could not be read" in skipped
    assert "short" in skipped                         # the source's own words: the file ends short
    said = capsys.readouterr().out
    assert f"tensor '{BROKEN}' skipped: its bytes could not be read" in said
    assert "wrote 3 tensors" in said
    assert os.listdir(tmp_path) == ["one.safetensors"]     # no temporary file left behind


def test_a_shard_set_keeps_a_valid_index_without_the_tensor(tmp_path, shard_set, failing_range):
    want = reference(shard_set)
    out = tmp_path / "set"
    size = str(SHAPE[0] * SHAPE[1] * 4 + 1)           # one float32 matrix a shard
    assert main(["convert", str(shard_set), str(out), "--max-shard-size", size]) == EXIT_OK
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert BROKEN not in index["weight_map"] and "could not be read" in index["metadata"]["skipped"]
    got = {}
    for name in sorted(set(index["weight_map"].values())):
        tensors, meta = loaded(out / name)
        got.update(tensors)
    assert_rest_equal(got, want)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in got.values())
    assert sorted(p.name for p in out.iterdir() if ".tmp-" in p.name) == []


def test_strict_writes_nothing_and_exits_3(tmp_path, shard_set, failing_range, capsys):
    out = tmp_path / "one.safetensors"
    assert main(["convert", str(shard_set), str(out), "--strict"]) == EXIT_INVALID
    assert os.listdir(tmp_path) == []
    assert "ends" in capsys.readouterr().err           # the read's own error, one sentence


def test_a_file_truncated_after_it_was_opened_skips_the_tensors_past_its_end(tmp_path):
    source = tmp_path / "src.safetensors"
    g = torch.Generator().manual_seed(6)
    tensors = {"first": torch.randn(SHAPE, generator=g), "last": torch.randn(SHAPE, generator=g)}
    save_file(tensors, str(source))
    out = tmp_path / "out.safetensors"
    with tensorloupe.open(source) as ckpt:
        os.truncate(source, os.path.getsize(source) - 1000)   # the last tensor loses its end
        with pytest.raises(tensorloupe.errors.TruncatedError):
            tensorloupe.write_safetensors(ckpt, out)           # strict, as the API's default
        assert not out.exists()
        tensorloupe.write_safetensors(ckpt, out, strict=False)
    got, meta = loaded(out)
    assert list(got) == ["first"] and torch.equal(got["first"], tensors["first"])
    assert "'last'" not in meta["skipped"] and '"last"' in meta["skipped"]


def test_an_io_error_reading_the_source_is_a_skipped_tensor_not_a_write_failure(tmp_path, monkeypatch, capsys):
    import errno
    from tensorloupe.source import base
    source = tmp_path / "src.safetensors"
    g = torch.Generator().manual_seed(7)
    tensors = {"a.ok": torch.randn(SHAPE, generator=g), "b.bad": torch.randn(SHAPE, generator=g)}
    save_file(tensors, str(source))
    with open(source, "rb") as f:
        start = 8 + int.from_bytes(f.read(8), "little")
        lo = start + json.loads(f.read(start - 8))["b.bad"]["data_offsets"][0]
    real = base.OPEN_FILES.get

    class Failing:   # the OS's answer to a read of a bad sector: EIO
        def __init__(self, handle):
            self.handle, self.at = handle, 0

        def seek(self, offset, whence=0):
            self.at = self.handle.seek(offset, whence)
            return self.at

        def read(self, n):
            if self.at <= lo < self.at + n:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            data = self.handle.read(n)
            self.at += len(data)
            return data

        def __getattr__(self, name):
            return getattr(self.handle, name)
    monkeypatch.setattr(base.OPEN_FILES, "get", lambda s: Failing(real(s)))
    out = tmp_path / "out.safetensors"
    assert main(["convert", str(source), str(out)]) == EXIT_OK
    got, meta = loaded(out)
    assert list(got) == ["a.ok"] and torch.equal(got["a.ok"], tensors["a.ok"])
    assert "Input/output error" in meta["skipped"] and "cannot write" not in capsys.readouterr().err


def test_when_every_read_fails_nothing_is_written_and_it_says_so(tmp_path):
    source = tmp_path / "src.safetensors"
    g = torch.Generator().manual_seed(8)
    save_file({"a": torch.randn(SHAPE, generator=g), "b": torch.randn(SHAPE, generator=g)}, str(source))
    out = tmp_path / "out.safetensors"
    with tensorloupe.open(source) as ckpt:
        os.truncate(source, 8 + ckpt.extras["header_bytes"])   # the header only: no tensor is left
        with pytest.raises(tensorloupe.errors.UnsupportedError, match="no tensor could be written: 'b'"):
            tensorloupe.write_safetensors(ckpt, out, strict=False)
    assert sorted(os.listdir(tmp_path)) == ["src.safetensors"]
