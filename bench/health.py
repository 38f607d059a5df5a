"""Benchmark: `health` on a 32-layer llama-shaped model, against numpy doing the same statistics.

Bytes: a sparse BF16 safetensors file of Llama-2-7B's shape (32 layers, d=4096, ff=11008, vocab
32000: 291 tensors, 12.6 GiB of holes on disk). Noise is written only where the scan samples (the
windows `health` plans, so no tensor looks constant); the rest reads as zeros but is never read.
We print the bytes read against the file size.

Time: a dense BF16 file of the same structure at small width (32 layers, d=512, ff=1376, ~210 MB).
References measured in the same run:
  numpy, same windows   reads the windows `health` reads and computes the same numbers (rms,
                        max|w|, mean|w|, non-finite counts, sha256 of the bytes): the cost of
                        doing our job in C instead of pure Python.
  numpy, every element  what a script without a byte budget does: read every tensor whole.

    python bench/health.py [--layers 32] [--budget 32768]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "pylib"))
import tensorloupe  # noqa: E402
from tensorloupe.healthscan import DEFAULT_BUDGET, health, health_cost  # noqa: E402
from tensorloupe.healthscan.measure import windows  # noqa: E402

ROLES = {  # role: shape as a function of (d, ff)
    "self_attn.q_proj.weight": lambda d, ff: (d, d), "self_attn.k_proj.weight": lambda d, ff: (d, d),
    "self_attn.v_proj.weight": lambda d, ff: (d, d), "self_attn.o_proj.weight": lambda d, ff: (d, d),
    "mlp.gate_proj.weight": lambda d, ff: (ff, d), "mlp.up_proj.weight": lambda d, ff: (ff, d),
    "mlp.down_proj.weight": lambda d, ff: (d, ff),
    "input_layernorm.weight": lambda d, ff: (d,), "post_attention_layernorm.weight": lambda d, ff: (d,),
}


def layout(layers: int, d: int, ff: int, vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    out = [("model.embed_tokens.weight", (vocab, d))]
    out += [(f"model.layers.{i}.{role}", shape(d, ff)) for i in range(layers) for role, shape in ROLES.items()]
    return out + [("model.norm.weight", (d,)), ("lm_head.weight", (vocab, d))]


def write_header(path: Path, tensors) -> int:
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        nbytes = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + offset)
    return 8 + len(text)


def bf16(values: np.ndarray) -> bytes:
    return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()


def write_sparse(path: Path, layers: int, budget: int) -> None:
    write_header(path, layout(layers, 4096, 11008, 32000))
    rng = np.random.default_rng(0)
    with tensorloupe.open(path) as ckpt, open(path, "r+b") as f:
        for t in ckpt.tensors:
            for start, count in windows(t, budget):
                f.seek(t.offset + start * 2)
                f.write(bf16(rng.standard_normal(count) * 0.02))


def write_dense(path: Path, layers: int) -> None:
    base = write_header(path, layout(layers, 512, 1376, 8000))
    rng = np.random.default_rng(1)
    with open(path, "r+b") as f:
        f.seek(base)
        for name, shape in layout(layers, 512, 1376, 8000):
            level = 1.0 if len(shape) == 1 else 0.0
            f.write(bf16(level + rng.standard_normal(int(np.prod(shape))).astype(np.float32) * 0.02))


def numpy_stats(raw: np.ndarray) -> tuple:
    values = (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    finite = values[np.isfinite(values)]
    return (hashlib.sha256(raw.tobytes()).hexdigest(), values.size - finite.size,
            float(np.sqrt(np.mean(finite * finite))), float(np.max(np.abs(finite))), float(np.mean(np.abs(finite))))


def numpy_run(path: Path, plan: dict[str, list[tuple[int, int, int]]]) -> tuple[float, int, dict]:
    """numpy reading `plan` (tensor -> [(byte offset, start, count)]) and computing the numbers."""
    start, read, out = time.perf_counter(), 0, {}
    with open(path, "rb") as f:
        for name, pieces in plan.items():
            raw = []
            for offset, first, count in pieces:
                f.seek(offset + first * 2)
                raw.append(np.frombuffer(f.read(count * 2), dtype=np.uint16))
                read += count * 2
            out[name] = numpy_stats(np.concatenate(raw))
    return time.perf_counter() - start, read, out


def ours(path: Path, budget: int | None):
    start = time.perf_counter()
    with tensorloupe.open(path) as ckpt:
        cost = health_cost(ckpt, budget)
        report = health(ckpt, budget)
        reads = ckpt.reads()
        plan = {t.name: [(t.offset, s, n) for s, n in windows(t, budget)] for t in ckpt.tensors}
        whole = {t.name: [(t.offset, 0, t.numel)] for t in ckpt.tensors}
    return time.perf_counter() - start, report, cost, reads, plan, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sparse = Path(tmp) / "llama-7b-shaped.safetensors"
        write_sparse(sparse, args.layers, args.budget)
        elapsed, report, cost, reads, _, _ = ours(sparse, args.budget)
        size = os.path.getsize(sparse)
        print(f"bytes: {args.layers}-layer 7B-shaped BF16 file, {size / 2**30:.2f} GiB, {len(report.measures)} tensors")
        print(f"  stated before the scan {cost.scan_bytes:,} bytes; read {report.bytes_read:,} bytes in "
              f"{reads:,} reads ({report.bytes_read / size * 100:.3f}% of the file, 1/{size / report.bytes_read:,.0f}); "
              f"{elapsed:.2f} s; flags: {report.counts()}")
        print(f"  browser estimate at ~1.5 ms per read: {reads * 1.5e-3:.1f} s of read overhead")

        dense = Path(tmp) / "llama-32x512.safetensors"
        write_dense(dense, args.layers)
        size = os.path.getsize(dense)
        print(f"time: dense {args.layers}-layer BF16 file (d=512, ff=1376), {size / 2**20:.0f} MiB, "
              f"{len(layout(args.layers, 512, 1376, 8000))} tensors")
        elapsed, report, cost, reads, plan, whole = ours(dense, args.budget)
        np_time, np_read, np_out = numpy_run(dense, plan)
        agree = all(np.isclose(m.rms, np_out[m.name][2], rtol=1e-9) and m.max_abs == np_out[m.name][3]
                    and m.digest == np_out[m.name][0] for m in report.measures)
        full_time, full_read, _ = numpy_run(dense, whole)
        print(f"  health (pure Python, {args.budget:,}-byte budget): {elapsed:.3f} s, {report.bytes_read:,} bytes")
        print(f"  numpy, same windows and statistics: {np_time:.3f} s, {np_read:,} bytes "
              f"-> health/numpy time {elapsed / np_time:.1f}x; numbers agree: {agree}")
        print(f"  numpy, every element: {full_time:.3f} s, {full_read:,} bytes "
              f"-> health/numpy time {elapsed / full_time:.2f}x, bytes {report.bytes_read / full_read:.4f}x")


if __name__ == "__main__":
    main()
