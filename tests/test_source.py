"""Byte sources: exact reads, truncation errors that say where, counters, and the block cache."""

import pytest

from tensorloupe.errors import TruncatedError, UsageError
from tensorloupe.source.cache import CachedSource
from tensorloupe.source.base import FileSource, MemorySource, SliceSource, SourceFile
from tensorloupe.source import open_source

DATA = bytes(range(256)) * 40  # 10240 bytes


def test_memory_source_reads_exactly_and_counts():
    s = MemorySource(DATA, "m")
    assert s.read(10, 5) == DATA[10:15]
    assert s.read(0, 0) == b""
    assert (s.reads, s.bytes_read) == (1, 5)


def test_truncated_read_names_offset_and_shortfall():
    s = MemorySource(DATA, "weights.bin")
    with pytest.raises(TruncatedError) as e:
        s.read(10200, 100)
    text = str(e.value)
    assert "weights.bin" in text and "60 bytes short" in text and "at byte 10,200" in text


def test_negative_read_is_a_usage_error():
    with pytest.raises(UsageError):
        MemorySource(DATA).read(-1, 4)


def test_file_source_reads_by_position(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(DATA)
    s = FileSource(path)
    assert s.size == len(DATA)
    assert s.read(1000, 24) == DATA[1000:1024]
    assert s.read(0, 3) == DATA[:3]
    assert (s.reads, s.bytes_read) == (2, 27)
    s.close()


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(UsageError, match="cannot open"):
        FileSource(tmp_path / "nope.safetensors")


def test_cache_turns_small_reads_into_block_reads():
    inner = MemorySource(DATA)
    cached = CachedSource(inner, block_size=1024, max_bytes=4096)
    for offset in range(0, 1000, 10):
        assert cached.read(offset, 10) == DATA[offset:offset + 10]
    assert inner.reads == 1 and inner.bytes_read == 1024
    assert cached.read(1020, 10) == DATA[1020:1030]  # spans a cached and a missing block
    assert inner.reads == 2


def test_cache_fetches_consecutive_missing_blocks_in_one_read():
    inner = MemorySource(DATA)
    cached = CachedSource(inner, block_size=1024, max_bytes=8192)
    assert cached.read(100, 3000) == DATA[100:3100]
    assert inner.reads == 1 and inner.bytes_read == 4096  # blocks 0-3


def test_cache_memory_is_bounded_lru():
    inner = MemorySource(DATA)
    cached = CachedSource(inner, block_size=1024, max_bytes=2048)
    cached.read(0, 1)
    cached.read(1024, 1)
    cached.read(0, 1)          # block 0 is now the most recent
    cached.read(2048, 1)       # evicts block 1
    assert len(cached._blocks) == 2 and set(cached._blocks) == {0, 2}
    reads = inner.reads
    cached.read(5, 1)
    assert inner.reads == reads  # still cached
    cached.read(1030, 1)
    assert inner.reads == reads + 1


def test_cache_last_partial_block_and_truncation():
    inner = MemorySource(DATA[:2500])
    cached = CachedSource(inner, block_size=1024, max_bytes=4096)
    assert cached.read(2400, 100) == DATA[2400:2500]
    with pytest.raises(TruncatedError):
        cached.read(2400, 101)


def test_slice_source_and_file_adapter():
    s = SliceSource(MemorySource(DATA), 100, 50)
    assert s.read(0, 4) == DATA[100:104]
    with pytest.raises(TruncatedError):
        s.read(48, 4)
    f = SourceFile(s)
    f.seek(10)
    assert f.read(5) == DATA[110:115]
    f.seek(-2, 2)
    assert f.read() == DATA[148:150]


def test_open_source_wraps_paths_in_a_cache(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(DATA)
    s = open_source(path)
    assert isinstance(s, CachedSource) and s.root().name == "f.bin"
    assert isinstance(open_source(DATA), MemorySource)


def test_a_thousands_of_files_open_together_stay_within_the_open_file_limit(tmp_path):
    # A folder of 10,000 shards must open under `ulimit -n 1024`: at most MAX_OPEN handles are
    # held, the others are opened again when read.
    from tensorloupe.source.base import OPEN_FILES
    try:
        import resource      # not in Pyodide, which runs this file too: the bound is checked there
    except ImportError:
        resource = None
    if resource:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(512, hard), hard))
    try:
        sources = []
        for i in range(2000):
            path = tmp_path / f"f{i}"
            path.write_bytes(i.to_bytes(4, "little"))
            sources.append(FileSource(path))
        assert [int.from_bytes(s.read(0, 4), "little") for s in sources] == list(range(2000))
        assert len(OPEN_FILES._open) <= OPEN_FILES.MAX_OPEN
        for s in sources:
            s.close()
    finally:
        if resource:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_file_that_changes_size_while_closed_is_refused(tmp_path):
    from tensorloupe.errors import UsageError
    from tensorloupe.source.base import OPEN_FILES
    path = tmp_path / "f"
    path.write_bytes(b"abcd")
    source = FileSource(path)
    OPEN_FILES.close(source)          # as if 128 other files had been read since
    path.write_bytes(b"abcdef")
    with pytest.raises(UsageError, match="changed while it was open"):
        source.read(0, 2)
