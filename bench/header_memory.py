"""What a big but plausible header costs to open: memory per tensor (or metadata key) and time.

    python3 bench/header_memory.py [--tensors 1000000] [--keys 3000000] [--pylib DIR]

1. A safetensors file with N tensors (F16, shape [1, 1], MoE-like names), written to a
   temporary file: its header is ~90 bytes per tensor (the 100 MB cap allows ~1.1M such).
2. A GGUF file with K metadata keys (uint32 values) and no tensors: ~25 bytes per key.

For each: the header's own size, the parse time (best of --repeat, without tracing), and with
tracemalloc the peak Python memory while opening and what the open checkpoint keeps, in bytes
per tensor/key and as a multiple of the header's size. The reference measured in the same run is
json.loads of the same safetensors header (the least any JSON-based reader allocates) and, for
GGUF, a dict of the same keys and values built directly. Then each output mode of the CLI
(`inspect`, `inspect --json`) on the safetensors file, in a child process: peak RSS
per tensor, against a child that only json.loads the header. `--pylib` points at another checkout's
pylib/ to compare before and after a change.
"""

from __future__ import annotations

import argparse
import gc
import json
import struct
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def safetensors_file(path: Path, n: int) -> int:
    header = {f"layers.{i // 8}.experts.{i % 8}.w{i % 3}":
              {"dtype": "F16", "shape": [1, 1], "data_offsets": [2 * i, 2 * i + 2]} for i in range(n)}
    raw = json.dumps(header, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.write(b"\0" * (2 * n))
    return len(raw)


def gguf_file(path: Path, k: int) -> int:
    parts = [b"GGUF", struct.pack("<IQQ", 3, 0, k)]
    for i in range(k):
        key = f"general.key.{i}".encode()
        parts.append(struct.pack("<Q", len(key)) + key + struct.pack("<II", 4, i))
    data = b"".join(parts)
    path.write_bytes(data)
    return len(data)


def measure(open_it, repeat: int):
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        ckpt = open_it()
        best = min(best, time.perf_counter() - t0)
        del ckpt
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    ckpt = open_it()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del ckpt
    gc.collect()
    return best, peak - base, kept - base


def child_rss(argv: list[str], pylib: Path) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of `python3 ARGV` with `pylib` on the path, stdout dropped."""
    import os
    import resource
    import subprocess
    env = {**os.environ, "PYTHONPATH": str(pylib)}
    t0 = time.perf_counter()
    pid = subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.DEVNULL).pid
    _, status, usage = os.wait4(pid, 0)
    if status:
        raise SystemExit(f"{argv} failed ({status})")
    return time.perf_counter() - t0, usage.ru_maxrss * 1024


def row(label, count, header, seconds, peak, kept):
    print(f"{label:<34}{seconds:>8.2f} s {peak / count:>9.0f} B/each peak {peak / header:>6.1f}x "
          f"header {kept / count:>8.0f} B/each kept {kept / header:>6.1f}x")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tensors", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=3_000_000)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--pylib", type=Path, default=ROOT / "pylib")
    args = p.parse_args(argv)
    sys.path.insert(0, str(args.pylib))
    import tensorloupe
    from tensorloupe.source.base import FileSource

    with tempfile.TemporaryDirectory() as tmp:
        st = Path(tmp) / "many.safetensors"
        header = safetensors_file(st, args.tensors)
        print(f"safetensors: {args.tensors:,} tensors, header {header:,} bytes "
              f"({header / args.tensors:.0f} per tensor)")
        raw = st.read_bytes()[8:8 + header]
        row("  json.loads of the header (ref)", args.tensors, header,
            *measure(lambda: json.loads(raw), args.repeat))
        row("  tensorloupe.open", args.tensors, header,
            *measure(lambda: tensorloupe.open(FileSource(st)), args.repeat))
        del raw
        # Every output mode of the CLI, in a child each: peak RSS (the interpreter included) and
        # wall time, against a child that only json.loads the header (the same interpreter).
        ref = child_rss(["-c", f"import json; f = open({str(st)!r}, 'rb'); n = int.from_bytes("
                               "f.read(8), 'little'); json.loads(f.read(n))"], args.pylib)
        print(f"  {'child: json.loads (ref)':<32}{ref[0]:>8.2f} s {ref[1] / args.tensors:>9.0f} B/each "
              f"peak RSS {ref[1] / header:>6.1f}x header")
        for mode in (["inspect"], ["inspect", "--json"]):
            seconds, rss = child_rss(["-m", "tensorloupe.cli", *mode, str(st)], args.pylib)
            print(f"  {'child: ' + ' '.join(mode):<32}{seconds:>8.2f} s {rss / args.tensors:>9.0f} "
                  f"B/each peak RSS {rss / header:>6.1f}x header {rss / ref[1]:>5.2f}x ref")
        st.unlink()

        gg = Path(tmp) / "many-keys.gguf"
        header = gguf_file(gg, args.keys)
        print(f"gguf: {args.keys:,} metadata keys, header {header:,} bytes "
              f"({header / args.keys:.0f} per key)")
        row("  a dict of the keys (ref)", args.keys, header,
            *measure(lambda: {f"general.key.{i}": i for i in range(args.keys)}, args.repeat))
        row("  tensorloupe.open", args.keys, header,
            *measure(lambda: tensorloupe.open(FileSource(gg)), args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
