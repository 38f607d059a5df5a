"""Vectored reads (`ByteSource.read_many`) return exactly what single reads return, from every
source, and count every byte once; over HTTP the requests really are in flight together."""

import random
import threading

import pytest

import build
import tensorloupe
from tensorloupe.errors import TruncatedError, UsageError
from tensorloupe.source import ByteSource
from tensorloupe.source.cache import CachedSource
from tensorloupe.source.base import FileSource, MemorySource, SliceSource
from tensorloupe.source.remote import HttpSource

DATA = bytes(random.Random(7).randrange(256) for _ in range(300_000))


class Plain(ByteSource):
    """A source with only `_read`: read_many is the base class's loop (the fallback)."""

    def __init__(self, data):
        super().__init__()
        self.data, self.size, self.name = data, len(data), "plain"

    def _read(self, offset, n):
        return self._count(self.data[offset:offset + n])


def ranges(seed, size=len(DATA), count=40):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.choice([0, 1, 7, 100, 4096, 70_000])
        offset = rng.randrange(0, size - n + 1)
        out.append((offset, n))
    out += [(0, 10), (10, 10), (5, 20), (size - 3, 3)]  # touching, overlapping, the last bytes
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    (folder / "data.bin").write_bytes(DATA)
    server = build.make_server(folder, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def makers(site):
    folder, base = site
    return {
        "plain (fallback loop)": lambda: Plain(DATA),
        "memory": lambda: MemorySource(DATA),
        "file": lambda: FileSource(folder / "data.bin"),
        "cached file": lambda: CachedSource(FileSource(folder / "data.bin"), 4096, 1 << 16),
        "slice of cached file": lambda: SliceSource(
            CachedSource(FileSource(folder / "data.bin")), 1000, len(DATA) - 2000),
        "http": lambda: HttpSource(f"{base}/data.bin"),
        "cached http": lambda: CachedSource(HttpSource(f"{base}/data.bin")),
    }


KINDS = ["plain (fallback loop)", "memory", "file", "cached file", "slice of cached file", "http",
         "cached http"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_read_many_equals_single_reads(kind, seed, site):
    make = makers(site)[kind]
    single, many = make(), make()
    asked = ranges(seed, single.size)
    expected = [single.read_data(o, n) for o, n in asked]
    assert many.read_many(asked) == expected
    assert many.root().bytes_read <= single.root().bytes_read
    single.close(), many.close()
    if "http" not in kind:
        # Every byte counted once, at every layer: the same counts as the single reads (an empty
        # read is none; CachedSource.read_data counts one, which read_many does not copy).
        single, many = make(), make()
        asked = [(o, n) for o, n in asked if n]
        [single.read_data(o, n) for o, n in asked]
        many.read_many(asked)
        assert (many.reads, many.bytes_read) == (single.reads, single.bytes_read)
        assert (many.root().reads, many.root().bytes_read) == (
            single.root().reads, single.root().bytes_read)


@pytest.mark.parametrize("kind", KINDS)
def test_read_many_past_the_end_is_the_single_reads_error(kind, site):
    source = makers(site)[kind]()
    with pytest.raises(TruncatedError) as single:
        source.read_data(source.size - 5, 10)
    with pytest.raises(TruncatedError) as many:
        source.read_many([(0, 4), (source.size - 5, 10)])
    assert str(many.value) == str(single.value)
    with pytest.raises(UsageError, match="invalid read"):
        source.read_many([(-1, 4)])
    source.close()


def test_http_merges_only_touching_ranges(site):
    source = HttpSource(f"{site[1]}/data.bin")
    head = source.bytes_read
    asked = [(100_000, 10), (100_010, 10), (100_005, 10), (200_000, 10), (200_021, 5)]
    assert source.read_many(asked) == [DATA[o:o + n] for o, n in asked]
    # (100000..100019) is one request; 200000 and 200021 leave a gap, so they are two
    assert source.reads == 1 + 3 and source.bytes_read - head == 20 + 10 + 5
    # ranges inside the first request's header bytes cost nothing more
    assert source.read_many([(0, 8), (60_000, 100)]) == [DATA[:8], DATA[60_000:60_100]]
    assert source.reads == 4
    source.close()


class Gate:
    """A server hook that holds each request until another one is in flight (or 5 s pass): one
    request at a time can never see two in flight."""

    def __init__(self):
        self.lock = threading.Condition()
        self.inflight = self.most = 0

    def __call__(self):
        with self.lock:
            self.inflight += 1
            self.most = max(self.most, self.inflight)
            self.lock.notify_all()
            self.lock.wait_for(lambda: self.most >= 2, timeout=5)
        return self

    def done(self):
        with self.lock:
            self.inflight -= 1


def gated_server(folder, gate, range_only_first=False):
    class Handler(build.Handler):
        def send_head(self):
            if range_only_first and self.headers.get("Range", "").startswith("bytes=0-") is False:
                del self.headers["Range"]  # a server that "forgets" Range after the first reply
            return super().send_head()

        def handle_one_request(self):
            gate()
            try:
                super().handle_one_request()
            finally:
                gate.done()

    server = build.Server(("127.0.0.1", 0), lambda *a, **k: Handler(*a, directory=str(folder), **k))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_http_vectored_reads_are_in_flight_together(site):
    gate = Gate()
    server, base = gated_server(site[0], gate)
    try:
        gate.most = 2  # the probe alone is not held (it would wait the gate's 5 s on a busy machine)
        source = HttpSource(f"{base}/data.bin")
        gate.most = 0
        asked = [(70_000 + 20_000 * i, 100) for i in range(8)]
        assert source.read_many(asked) == [DATA[o:o + n] for o, n in asked]
        assert gate.most >= 2
        source.close()
    finally:
        server.shutdown()
        server.server_close()


def test_http_shards_open_side_by_side(tmp_path):
    src = build.ROOT / "fixtures" / "out" / "sharded-moe"
    names = sorted(p.name for p in src.glob("model*"))
    for name in names:
        (tmp_path / name).write_bytes((src / name).read_bytes())
    gate = Gate()
    server, base = gated_server(tmp_path, gate)
    try:
        with tensorloupe.open([f"{base}/{n}" for n in names]) as remote, \
                tensorloupe.open([str(src / n) for n in names]) as local:
            assert [t.name for t in remote.tensors] == [t.name for t in local.tensors]
            assert remote.warnings == local.warnings
        assert gate.most >= 2
    finally:
        server.shutdown()
        server.server_close()


def test_http_later_reads_without_range_are_refused(site):
    gate = Gate()
    gate.most = 2  # no holding
    server, base = gated_server(site[0], gate, range_only_first=True)
    try:
        source = HttpSource(f"{base}/data.bin")
        with pytest.raises(UsageError, match="does not answer HTTP Range"):
            source.read_many([(100_000, 10), (200_000, 10)])
        source.close()
    finally:
        server.shutdown()
        server.server_close()


def test_cached_data_reads_fetch_only_what_the_cache_lacks(site):
    # Header reads leave blocks in the cache; a planned read over them takes those bytes from the
    # cache and fetches only the rest, exactly (not rounded up to blocks), in one vectored read.
    source = CachedSource(FileSource(site[0] / "data.bin"), 4096, 1 << 16)
    source.read(0, 10_000)  # blocks 0-2 (0..12287): one inner read
    root = source.root()
    reads, read = root.reads, root.bytes_read
    asked = [(100, 50), (11_000, 3_000), (20_000, 100), (0, 0)]
    assert source.read_many(asked) == [DATA[o:o + n] for o, n in asked]
    # (100, 50) from the cache; 11000..12287 from block 2, 12288..13999 fetched; 20000.. fetched
    assert (root.reads - reads, root.bytes_read - read) == (2, 1_712 + 100)
    assert source.read_data(4_000, 200) == DATA[4_000:4_200] and root.reads - reads == 2


def test_cached_http_data_reads_send_only_the_missing_requests(site):
    # The same over HTTP, counted at the server: one request for the one range the cache lacks.
    asked_of_server = []

    class Counting(build.Handler):
        def send_head(self):
            asked_of_server.append(self.headers.get("Range"))
            return super().send_head()

    server = build.Server(("127.0.0.1", 0),
                          lambda *a, **k: Counting(*a, directory=str(site[0]), **k))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        source = CachedSource(HttpSource(f"{base}/data.bin"))
        source.read(70_000, 10)  # the header's block 1 (65536..131071): one request
        before = len(asked_of_server)
        asked = [(70_010, 10), (66_000, 5), (131_000, 100), (140_000, 10)]
        assert source.read_many(asked) == [DATA[o:o + n] for o, n in asked]
        # 131000..131071 came from block 1: only 131072..131099 and 140000.. were asked for
        assert sorted(asked_of_server[before:]) == ["bytes=131072-131099", "bytes=140000-140009"]
        assert source.root().bytes_read == 65_536 + 65_536 + 28 + 10
        source.close()
    finally:
        server.shutdown()
        server.server_close()
