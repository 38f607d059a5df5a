"""What the page shows as "read so far" (Checkpoint.bytes_read): every byte counted once, so a
small file looked at in every way never reads more than its size, and a cache block that runs
past the end of the file counts only the bytes that exist."""

import pytest

import tensorloupe
from tensorloupe.source.cache import CachedSource
from tensorloupe.source.base import FileSource

import torch_files
import safetensors_files


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    return {**torch_files.write_all(folder), **safetensors_files.write_all(folder)}


def look_at_everything(ckpt):
    for t in ckpt.tensors:
        if t.problem or not t.numel:
            continue
        for _ in range(2):          # selecting a tensor twice reads nothing new
            tensorloupe.sample(t, 4096)
            tensorloupe.grid(t, 32, 32)
            tensorloupe.values(t, 0, 8)


@pytest.mark.parametrize("name", ["state_dict", "dtypes", "views", "lightning", "legacy",
                                  "legacy_tar", "module", "torchscript"])
def test_a_small_torch_file_reads_at_most_its_size(files, name):
    with tensorloupe.open(files[name]) as ckpt:
        look_at_everything(ckpt)
        assert ckpt.bytes_read() == ckpt.size < (1 << 16)    # the one header block held it all
        assert ckpt.reads() == 1


def test_a_small_safetensors_file_reads_at_most_its_size(files):
    small = [p for p in files.values() if str(p).endswith(".safetensors") and p.stat().st_size < 60000]
    assert small
    for path in small:
        try:
            ckpt = tensorloupe.open(path)
        except tensorloupe.TensorloupeError:
            continue    # the deliberately broken fixtures
        with ckpt:
            look_at_everything(ckpt)
            assert ckpt.bytes_read() <= ckpt.size, path.name


def test_a_block_past_the_end_of_the_file_is_not_bytes_read(tmp_path):
    path = tmp_path / "ten.bin"
    path.write_bytes(bytes(range(256)) * 40)        # 10,240 bytes, one 64 KiB cache block
    source = CachedSource(FileSource(path))
    assert source.read(10_000, 100) == (bytes(range(256)) * 40)[10_000:10_100]
    assert source.root().bytes_read == 10_240 and source.root().reads == 1
    assert source.read_data(0, 10_240) == path.read_bytes()
    assert source.root().bytes_read == 10_240 and source.root().reads == 1
