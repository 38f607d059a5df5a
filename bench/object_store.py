"""Benchmark: the same checkpoints read from a local S3 server (s3://, moto) and from a local
HTTP Range server (http://), in the same run: requests, bytes sent and time per command.

    python bench/object_store.py [--runs 3]

Both servers run on 127.0.0.1 and count what they answer (fixtures/object_store.py for S3,
bench/remote_shards.py's counting server for HTTP). Each command is the CLI's (`main`, in this
process, output discarded): `inspect` of a safetensors file, a GGUF and a 3-shard set (by its
index), `stats` of one tensor and `health` of the safetensors file. The ratio is S3's figure over
HTTP's; moto answers each request more slowly than build.py's server, so time ratios above 1 are
the server's, not the client's. The bytes show that opening an object reads its header only.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "pylib"), str(ROOT / "fixtures"), str(ROOT / "bench")]
from object_store import S3Server  # noqa: E402
from remote_shards import Counter, slow_server  # noqa: E402

OUT = ROOT / "fixtures" / "out"
TENSOR = "model.layers.2.block_sparse_moe.experts.5.w3.weight"
COMMANDS = [   # (label, argv with {} for the folder's URL)
    ("inspect safetensors (7.4 MB)", ["inspect", "{}/demo-moe.safetensors"]),
    ("inspect gguf (1.2 MB)", ["inspect", "{}/tiny-llama.gguf"]),
    ("inspect 3-shard index", ["inspect", "{}/sharded/model.safetensors.index.json"]),
    ("stats of one tensor", ["stats", "{}/demo-moe.safetensors", TENSOR]),
    ("health safetensors", ["health", "{}/demo-moe.safetensors"]),
]


def layout(folder: Path) -> dict[str, bytes]:
    files = {name: (OUT / name).read_bytes()
             for name in ("demo-moe.safetensors", "tiny-llama.gguf")}
    files.update({f"sharded/{p.name}": p.read_bytes()
                  for p in (OUT / "sharded-moe").iterdir() if p.is_file()})
    for key, data in files.items():
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        (folder / key).write_bytes(data)
    return files


def run(argv: list[str], mark, since, runs: int) -> tuple[float, int, int]:
    """The median time of `runs` runs, and the requests and bytes of the last."""
    from tensorloupe.cli import main
    times = []
    for _ in range(runs):
        before = mark()
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(argv) == 0, argv
        times.append(time.perf_counter() - start)
        requests, sent = since(before)
    return sorted(times)[len(times) // 2], requests, sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores; median of {args.runs}")
    with tempfile.TemporaryDirectory() as tmp:
        files = layout(Path(tmp))
        s3 = S3Server()
        s3.upload("models", files)
        os.environ.update(s3.env)
        counter = Counter()
        http = slow_server(Path(tmp), 0.0, counter)
        http_base = f"http://127.0.0.1:{http.server_address[1]}"

        def http_mark():
            return counter.requests, counter.bytes

        def http_since(before):
            return counter.requests - before[0], counter.bytes - before[1]

        print(f"{'command':32s} {'s3:// time':>10s} {'reqs':>5s} {'bytes':>9s}   "
              f"{'http:// time':>12s} {'reqs':>5s} {'bytes':>9s}   time ratio")
        for label, argv in COMMANDS:
            s3_figures = run([a.format("s3://models") for a in argv], s3.counter.mark,
                             s3.counter.since, args.runs)
            http_figures = run([a.format(http_base) for a in argv], http_mark, http_since,
                               args.runs)
            print(f"{label:32s} {s3_figures[0]:9.3f}s {s3_figures[1]:5d} {s3_figures[2]:9,d}   "
                  f"{http_figures[0]:11.3f}s {http_figures[1]:5d} {http_figures[2]:9,d}   "
                  f"{s3_figures[0] / http_figures[0]:.2f}")
        http.shutdown()
        s3.stop()


if __name__ == "__main__":
    main()
