"""Vectored reads never cost more bytes: every planned read is issued together, but the ranges are
the ones read one at a time before (bytes read on the same operations may only go down).

BASELINE holds (bytes, reads) measured with the one-read-at-a-time code (commit 243bada) on the
same deterministic files; `reads` may only go down too, since ranges are never split."""

import json
import struct

import pytest

import tensorloupe
from tensorloupe.moe.redundancy import analyse
from tensorloupe.sampler.sampling import exact_stats, grid, sample

FIXTURES = __import__("pathlib").Path(__file__).resolve().parent.parent / "fixtures" / "out"

# operation: (bytes read, reads) with commit 243bada
BASELINE = {
    'http demo: open': (65536, 1),
    'http demo: sample and grid of 8 tensors': (140692, 109),
    'http open: sharded-moe': (48584, 3),
    'demo: sample every tensor': (1719680, 3413),
    'demo: 64x64 grid of every tensor': (7337984, 127),
    'demo: exact stats of every tensor (4096-element chunks)': (7388544, 537),
    'demo: expert analysis': (1572864, 384),
    'big F16: 256x256 grid': (2089472, 256),
    'big F16: sample': (131072, 32),
    'big F16: exact stats': (33554432, 16),
    'tiny-llama.gguf: sample and grid of every tensor': (1231400, 314),
    'views.pt: sample and grid of every tensor': (3670, 33),
    'open: sharded-moe (3 safetensors shards + index)': (48584, 3),
    'open: split-gguf (3 parts)': (4736, 3),
}


def big_f16(tmp_path, dtype="F16"):
    """A sparse 4096 x 4096 tensor (holes read as zeros; every read still counts)."""
    header = json.dumps({"w": {"dtype": dtype, "shape": [4096, 4096],
                               "data_offsets": [0, 4096 * 4096 * 2]}}).encode()
    path = tmp_path / f"big-{dtype}.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 4096 * 4096 * 2)
    return path


def measure(ckpt, work) -> tuple[int, int]:
    before = ckpt.bytes_read(), ckpt.reads()
    work(ckpt)
    return ckpt.bytes_read() - before[0], ckpt.reads() - before[1]


def every(kind):
    def run(ckpt):
        for t in ckpt.tensors:
            if t.problem is None and t.dtype_info is not None and t.numel:
                kind(t)
    return run


OPERATIONS = {
    "demo: sample every tensor": ("demo", every(lambda t: sample(t, 4096))),
    "demo: 64x64 grid of every tensor": ("demo", every(lambda t: grid(t, 64, 64))),
    "demo: exact stats of every tensor (4096-element chunks)":
        ("demo", every(lambda t: exact_stats(t, chunk_elems=4096))),
    "demo: expert analysis": ("demo", lambda c: analyse(c)),
    "big F16: 256x256 grid": ("big", lambda c: grid(c.tensor("w"), 256, 256)),
    "big F16: sample": ("big", lambda c: sample(c.tensor("w"))),
    "big F16: exact stats": ("big", lambda c: exact_stats(c.tensor("w"))),
    "tiny-llama.gguf: sample and grid of every tensor":
        ("tiny-llama.gguf", every(lambda t: (sample(t, 4096), grid(t, 32, 32)))),
    "views.pt: sample and grid of every tensor":
        ("views.pt", every(lambda t: (sample(t, 512), grid(t, 16, 16)))),
}


def open_target(which, tmp_path, demo_path):
    if which == "demo":
        return tensorloupe.open(demo_path)
    if which == "big":
        return tensorloupe.open(big_f16(tmp_path))
    return tensorloupe.open(FIXTURES / which)


OPENS = {
    "open: sharded-moe (3 safetensors shards + index)":
        lambda: sorted(str(p) for p in (FIXTURES / "sharded-moe").glob("model*")),
    "open: split-gguf (3 parts)": lambda: sorted(str(p) for p in (FIXTURES / "split-gguf").glob("*.gguf")),
}


def http_counts(tmp_path, demo_path) -> dict:
    """The same over HTTP Range requests (the first read now brings the header bytes)."""
    import shutil
    import threading
    import build
    for p in (FIXTURES / "sharded-moe").glob("model*"):
        shutil.copy(p, tmp_path / p.name)
    if demo_path != tmp_path / "demo-moe.safetensors":
        shutil.copy(demo_path, tmp_path / "demo-moe.safetensors")
    server = build.make_server(tmp_path, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    out = {}
    try:
        with tensorloupe.open(f"{base}/demo-moe.safetensors") as ckpt:
            out["http demo: open"] = (ckpt.bytes_read(), ckpt.reads())
            first = [t for t in ckpt.tensors if t.numel][:8]
            out["http demo: sample and grid of 8 tensors"] = measure(
                ckpt, lambda c: [(sample(t, 4096), grid(t, 32, 32)) for t in first])
        shards = sorted(p.name for p in tmp_path.glob("model*"))
        with tensorloupe.open([f"{base}/{name}" for name in shards]) as ckpt:
            out["http open: sharded-moe"] = (ckpt.bytes_read(), ckpt.reads())
    finally:
        server.shutdown()
        server.server_close()
    return out


def counts(tmp_path, demo_path) -> dict:
    out = http_counts(tmp_path, demo_path)
    for label, (which, work) in OPERATIONS.items():
        with open_target(which, tmp_path, demo_path) as ckpt:
            out[label] = measure(ckpt, work)
    for label, paths in OPENS.items():
        with tensorloupe.open(paths()) as ckpt:
            out[label] = (ckpt.bytes_read(), ckpt.reads())
    return out


@pytest.fixture(scope="module")
def measured(tmp_path_factory, demo_path):
    return counts(tmp_path_factory.mktemp("budget"), demo_path)


@pytest.mark.parametrize("label", sorted(BASELINE))
def test_bytes_and_reads_never_exceed_the_serial_code(label, measured):
    measured = measured[label]
    bytes_then, reads_then = BASELINE[label]
    assert measured[0] <= bytes_then and measured[1] <= reads_then, (label, measured)
