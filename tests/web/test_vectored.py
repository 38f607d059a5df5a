"""The page's vectored reads, tested in CPython with the JavaScript transports replaced: a mounted
File's slices all at once (web/blobs.py) and a URL's Range requests all at once (web/remote.py)
return exactly what one-at-a-time reads return, count every byte once, and fall back to single
reads where the browser cannot suspend (no JSPI)."""

import random
from types import SimpleNamespace

import pytest

from tensorloupe.errors import FormatError, UsageError
from tensorloupe.web import blobs, remote

DATA = bytes(random.Random(3).randrange(256) for _ in range(200_000))


def asked(seed):
    rng = random.Random(seed)
    out = [(rng.randrange(0, len(DATA) - 5000), rng.choice([0, 1, 100, 4096])) for _ in range(30)]
    return out + [(0, 8), (len(DATA) - 3, 3)]


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "m.bin"
    p.write_bytes(DATA)
    return str(p)


def file_slices(calls):
    def slices(path, ranges):
        calls.append(len(ranges))
        with open(path, "rb") as f:
            return [(f.seek(o), f.read(n))[1] for o, n in ranges]
    return slices


@pytest.mark.parametrize("seed", [1, 2])
def test_blob_slices_at_once_equal_single_reads(path, seed):
    calls = []
    vectored = blobs.BlobSource(path, slices=file_slices(calls))
    single = blobs.BlobSource(path, slices=lambda *a: None)   # no JSPI: the fallback
    got = vectored.read_many(asked(seed))
    assert got == single.read_many(asked(seed)) == [DATA[o:o + n] for o, n in asked(seed)]
    assert calls == [sum(1 for _, n in asked(seed) if n)] and vectored.batches == 1
    assert single.batches == 0
    assert (vectored.reads, vectored.bytes_read) == (single.reads, single.bytes_read)


def test_blob_without_pyodide_reads_one_at_a_time(path):
    source = blobs.open_blob(path)        # js_slices: None in CPython
    assert source.read_many([(5, 10), (100, 3)]) == [DATA[5:15], DATA[100:103]]
    assert source.inner.batches == 0 and source.root().reads == 2


def http_transport(log):
    def one(url, first, last):
        log.append((first, last))
        return remote.Reply(206, "Partial Content", f"bytes {first}-{last}/{len(DATA)}",
                            DATA[first:last + 1])
    return one


def probe_with_head(n=1 << 16):
    return {"status": 206, "reason": "Partial Content", "total": len(DATA), "head": DATA[:n]}


@pytest.mark.parametrize("seed", [1, 2])
def test_url_ranges_at_once_equal_single_reads(seed):
    singles, batches = [], []
    one = http_transport(singles)

    def many(url, ranges):
        batches.append(len(ranges))
        return [one(url, a, b) for a, b in ranges]

    vectored = remote.XhrSource("http://x/m.bin", probe_with_head(), transport=one, many=many)
    fallback = remote.XhrSource("http://x/m.bin", probe_with_head(), transport=one,
                                many=lambda *a: None)
    want = [DATA[o:o + n] for o, n in asked(seed)]
    assert vectored.read_many(asked(seed)) == want == fallback.read_many(asked(seed))
    beyond = sum(1 for o, n in asked(seed) if n and o + n > 1 << 16)
    assert batches == [beyond] and vectored.bytes_read == fallback.bytes_read


def test_probe_head_serves_header_reads_without_requests():
    log = []
    source = remote.XhrSource("http://x/m.bin", probe_with_head(), transport=http_transport(log))
    assert source.read(0, 1000) == DATA[:1000] and log == []
    assert (source.reads, source.bytes_read) == (1, 1 << 16)      # the probe's one request
    assert source.read(65_000, 1000) == DATA[65_000:66_000]      # only the rest is requested
    assert log == [(1 << 16, 65_999)]


def test_url_ranges_at_once_are_checked_like_single_ones():
    def wrong(url, ranges):
        return [remote.Reply(206, "", f"bytes {a + 1}-{b + 1}/{len(DATA)}", DATA[a + 1:b + 2])
                for a, b in ranges]
    source = remote.XhrSource("http://x/m.bin", probe_with_head(0), many=wrong)
    with pytest.raises(FormatError, match="another range"):
        source.read_many([(10, 5), (20, 5)])

    def refused(url, ranges):
        return [remote.Reply(200, "OK", None, DATA[:10]) for _ in ranges]
    source = remote.XhrSource("http://x/m.bin", probe_with_head(0), many=refused)
    with pytest.raises(UsageError, match="does not answer HTTP Range"):
        source.read_many([(10, 5), (20, 5)])

    def down(url, ranges):
        return [remote.NetworkFailure("TypeError") for _ in ranges]
    source = remote.XhrSource("http://x/m.bin", probe_with_head(0), many=down)
    with pytest.raises(UsageError, match="cannot fetch"):
        source.read_many([(10, 5), (20, 5)])


def joined_slices(calls):
    """The worker's transport as it is: one buffer of every slice back to back, cut by `split`."""
    def slices(path, ranges):
        calls.append(len(ranges))
        with open(path, "rb") as f:
            joined = b"".join((f.seek(o), f.read(n))[1] for o, n in ranges)
        return blobs.split(joined, [n for _, n in ranges])
    return slices


@pytest.mark.parametrize("seed", [1, 2])
def test_blob_slices_in_one_buffer_equal_single_reads(path, seed):
    calls = []
    joined = blobs.BlobSource(path, slices=joined_slices(calls))
    single = blobs.BlobSource(path, slices=lambda *a: None)
    assert joined.read_many(asked(seed)) == single.read_many(asked(seed)) == [DATA[o:o + n] for o, n in asked(seed)]
    assert calls == [sum(1 for _, n in asked(seed) if n)] and joined.batches == 1
    assert (joined.reads, joined.bytes_read) == (single.reads, single.bytes_read)


def test_ranges_that_meet_are_one_slice(path):
    """Ranges that meet end to start (in any order asked) are cut as one slice, no byte more;
    each asked range gets its bytes, in the order asked, counted as asked."""
    sliced = []

    def slices(p, ranges):
        sliced.append(list(ranges))
        return file_slices([])(p, ranges)
    ranges = [(100, 10), (0, 50), (50, 50), (110, 5), (300, 4), (50, 50)]   # (50, 50) asked twice
    source = blobs.BlobSource(path, slices=slices)
    single = blobs.BlobSource(path, slices=lambda *a: None)
    assert source.read_many(ranges) == single.read_many(ranges) == [DATA[o:o + n] for o, n in ranges]
    assert sliced == [[(0, 100), (50, 65), (300, 4)]]
    assert sum(n for _, n in sliced[0]) == sum(n for _, n in ranges)
    assert (source.reads, source.bytes_read) == (single.reads, single.bytes_read) == (6, 169)
    log = []
    early = prefetching(path, log)                  # a prefetch is cut the same way
    early.prefetch(ranges)
    assert log == [("start", 3)] and early.read_many(ranges) == [DATA[o:o + n] for o, n in ranges]
    assert early.prefetches == 1


def test_split_refuses_a_buffer_of_another_length():
    assert blobs.split(b"abcdef", [2, 0, 4]) == [b"ab", b"", b"cdef"]
    assert blobs.split(b"abcde", [2, 4]) is None and blobs.split(b"abcdefg", [2, 4]) is None


def test_a_file_that_changed_falls_back_to_the_mount(path):
    short = blobs.BlobSource(path, slices=lambda p, ranges: blobs.split(b"x", [n for _, n in ranges]))
    assert short.read_many([(5, 10), (100, 3)]) == [DATA[5:15], DATA[100:103]] and short.batches == 0


# --- prefetch: reads started early, taken later ------------------------------------------------------

def started_slices(log):
    """The worker's transport started now and awaited later (js_start_slices): the log says when
    each is started and when it is waited for."""
    def start(path, ranges):
        log.append(("start", len(ranges)))
        with open(path, "rb") as f:
            datas = [(f.seek(o), f.read(n))[1] for o, n in ranges]

        def wait():
            log.append(("wait", len(ranges)))
            return datas
        return wait
    return start


def prefetching(path, log):
    return blobs.BlobSource(path, slices=file_slices([]), start_slices=started_slices(log))


@pytest.mark.parametrize("seed", [1, 2])
def test_prefetched_reads_are_taken_by_the_read_that_asks_for_them(path, seed):
    log = []
    early = prefetching(path, log)
    single = blobs.BlobSource(path, slices=lambda *a: None)
    early.prefetch(asked(seed))
    wanted = sum(1 for _, n in asked(seed) if n)
    assert log == [("start", wanted)]
    assert early.read_many(asked(seed)) == single.read_many(asked(seed)) == [DATA[o:o + n] for o, n in asked(seed)]
    assert log == [("start", wanted), ("wait", wanted)]
    assert (early.batches, early.prefetches) == (1, 1)
    # counted once, like the single reads, whether the File read them early or not
    assert (early.reads, early.bytes_read) == (single.reads, single.bytes_read)


def test_a_prefetch_not_asked_for_is_dropped_and_counted(path):
    log = []
    early = prefetching(path, log)
    early.prefetch([(0, 100), (1000, 50)])
    assert early.read_many([(0, 100), (2000, 50)]) == [DATA[:100], DATA[2000:2050]]
    assert log == [("start", 2)] and early.prefetches == 0 and early.batches == 1
    assert (early.reads, early.bytes_read) == (4, 300)      # the dropped two were read all the same
    early.prefetch([(0, 100), (1000, 50)])
    early.prefetch([(0, 10), (1000, 10)])                   # queued after it: taken in turn
    assert early.read_many([(0, 100), (1000, 50)]) == [DATA[:100], DATA[1000:1050]]
    assert early.read_many([(0, 10), (1000, 10)]) == [DATA[:10], DATA[1000:1010]]
    assert early.prefetches == 2 and (early.reads, early.bytes_read) == (8, 470)
    early.prefetch([(0, 100), (1000, 50)])
    early.prefetch([(0, 10), (1000, 10)])
    assert early.read_many([(0, 10), (1000, 10)]) == [DATA[:10], DATA[1000:1010]]   # not the first
    assert early.prefetches == 2 and early._prefetched == []     # both dropped, and counted
    assert (early.reads, early.bytes_read) == (14, 470 + 170 + 20)


def test_no_prefetch_where_the_browser_cannot_suspend(path):
    source = blobs.BlobSource(path, slices=lambda *a: None, start_slices=lambda *a: None)
    source.prefetch([(0, 100), (1000, 50)])
    assert source.read_many([(0, 100), (1000, 50)]) == [DATA[:100], DATA[1000:1050]]
    assert (source.prefetches, source.batches, source.reads) == (0, 0, 2)
    assert blobs.js_start_slices(path, [(0, 1), (5, 1)]) is None     # CPython: no JavaScript


def test_a_cache_prefetches_exactly_what_its_read_will_fetch(path):
    from tensorloupe.source.cache import CachedSource
    log = []
    cached = CachedSource(prefetching(path, log), block_size=4096, max_bytes=1 << 16)
    cached.read(0, 10)                       # block 0 is cached now
    ranges = [(100, 50), (3000, 2000), (50_000, 10)]
    cached.prefetch(ranges)
    assert log == [("start", 2)]             # (4096, 904) and (50_000, 10): the cache has the rest
    assert cached.read_many(ranges) == [DATA[o:o + n] for o, n in ranges]
    assert cached.inner.prefetches == 1 and cached.hits == 2


def test_the_expert_analysis_reads_each_next_layer_while_comparing(tmp_path):
    """Stacked experts in a File: every layer after the first is prefetched and taken, and the
    analysis (similarities, profiles, bytes per layer) is the one read without prefetching."""
    import numpy as np
    from safetensors.numpy import save_file

    import tensorloupe
    from tensorloupe.moe import redundancy
    from tensorloupe.source.cache import CachedSource
    rng = np.random.default_rng(5)
    tensors = {}
    for layer in range(3):
        w = rng.standard_normal((8, 64, 96)).astype(np.float16)
        w[5] = w[1]
        down = rng.standard_normal((8, 96, 32)).astype(np.float16)
        down[5] = down[1]
        tensors[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = w
        tensors[f"model.layers.{layer}.mlp.experts.down_proj"] = down
    path = tmp_path / "moe.safetensors"
    save_file(tensors, str(path))
    log = []
    early = tensorloupe.open(CachedSource(prefetching(str(path), log)))
    plain = tensorloupe.open(path)
    got, want = redundancy.analyse(early, samples_per_matrix=1024), redundancy.analyse(plain, samples_per_matrix=1024)
    assert got.to_json() == want.to_json() and got.bytes_read == want.bytes_read
    assert [l.bytes_read for l in got.layers] == [l.bytes_read for l in want.layers]
    assert all(l.clusters == [[1, 5]] for l in got.layers)
    assert early.sources[0].inner.prefetches == 2
    assert early.reads() == plain.reads()
    starts = [i for i, (what, _) in enumerate(log) if what == "start"]
    waits = [i for i, (what, _) in enumerate(log) if what == "wait"]
    assert len(starts) == len(waits) == 2 and all(s < w for s, w in zip(starts, waits))


# --- the second Python: what goes over and what comes back (web/offload.py) ---------------------------

def layer_windows():
    """A layer's signature bytes as gather.read_windows gives them: 3 experts of 2 windows,
    little- and big-endian F32, F16 with a first element to skip, a window of nothing, extremes."""
    import numpy as np

    from tensorloupe.sampler.gather import WindowBytes
    rng = np.random.default_rng(4)
    windows = []
    for expert in range(3):
        scale = 10.0 ** (30 * expert - 30)
        windows.append(WindowBytes("F32", expert == 1, 0, 40,
                                   (rng.standard_normal(40) * scale).astype(">f4" if expert == 1 else "<f4").tobytes()))
        windows.append(WindowBytes("F16", False, 1, 19, rng.standard_normal(20).astype("<f2").tobytes())
                       if expert != 2 else WindowBytes("F16", False, 0, 0, b""))
    return windows, [2, 2, 2]


def test_the_helpers_measures_are_the_same_bit_for_bit():
    from tensorloupe.moe.redundancy import measure_bytes
    from tensorloupe.web import offload
    windows, per_expert = layer_windows()
    data, meta = offload.encode_layer(windows, per_expert)
    assert len(data) == sum(len(w.data) for w in windows)
    got = offload.decode_measures(offload.layer_reply(data, meta), 3)
    want = measure_bytes(windows, per_expert)
    assert got == want and len(got.gram.cosines) == 3 and got.magnitudes[2] > 0
    with pytest.raises(ValueError, match="556 bytes are not the 560 its windows describe"):
        offload.layer_reply(data[:-4], meta)
    with pytest.raises(ValueError, match="holds 3 values, not 10"):
        offload.decode_measures(bytes(24), 2)
    assert offload.page_helper() is None            # CPython: the analysis measures every layer itself


def test_a_failed_helper_layer_is_measured_here():
    """The second Python's worker died or answered wrongly: the layer is measured by this one,
    from the same bytes, and the analysis has the same numbers as without a helper."""
    from tensorloupe.moe.redundancy import measure_bytes
    from tensorloupe.web import offload

    class Js:
        started = 0

        def tensorloupeHelperStart(self):
            self.started += 1

        def tensorloupeHelperReady(self):
            return True

        def tensorloupeHelperLayer(self, data, meta):
            # worker.mjs's {answer: a promise, settled}
            return SimpleNamespace(answer=("answer", bytes(data), meta), settled=False)

    class Died(Exception):
        pass

    def dead(promise):
        raise Died("the second Python failed")

    class Short:
        def to_bytes(self):
            return bytes(16)          # too few values for the answer

    windows, per_expert = layer_windows()
    want = measure_bytes(windows, per_expert)
    js = Js()
    for wait_for in (dead, lambda promise: Short()):
        helper = offload.PageHelper(js, wait_for=wait_for)
        assert helper.ready()
        assert helper.start(windows, per_expert)() == want
    assert js.started == 2

    def answered(promise):
        _, data, meta = promise
        reply = offload.layer_reply(data, meta)

        class Buffer:
            def to_bytes(self):
                return reply
        return Buffer()
    handed = offload.PageHelper(js, wait_for=answered).start(windows, per_expert)
    assert not handed.done()
    handed._handed.settled = True           # what the promise's callback in worker.mjs sets
    assert handed.done() and handed() == want
