"""Benchmark: `stats --exact` of one ~16M-element tensor, against numpy doing the same job.

The same job: read the tensor's bytes, decode every element (gguf-py's numpy dequantizer for the
ggml types, the bf16 bit shift for BF16), then min, max, mean, population std, the NaN/+Inf/-Inf
counts, |v| < 1e-6 and == 0 counts over the finite values, and a 32-bin histogram over the exact
[min, max]: what `tensorloupe stats --exact` prints. Both sides are timed in this run, on files
written here (safetensors for F32/F16/BF16, GGUF for Q8_0 and Q4_K), best CPU time of `--repeat`.

    python bench/exact_stats.py [--elements 16777216] [--repeat 2] [--profile F32]
    TENSORLOUPE_PYLIB=/path/to/other/checkout/pylib python bench/exact_stats.py   # a before figure
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

sys.path.insert(0, os.environ.get("TENSORLOUPE_PYLIB", str(Path(__file__).resolve().parent.parent / "pylib")))
import tensorloupe  # noqa: E402
from tensorloupe.sampler import sampling  # noqa: E402

BINS = 32
COLS = 4096
DTYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_K")


def values(n: int) -> np.ndarray:
    rng = np.random.default_rng(27)
    return (rng.standard_normal(n) * 0.02).astype(np.float32)


def write_safetensors(path: Path, dtype: str, x: np.ndarray) -> None:
    if dtype == "BF16":   # round to nearest even, as torch does
        bits = x.view(np.uint32).astype(np.uint64)
        data = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
    else:
        data = x.astype(np.float16 if dtype == "F16" else np.float32).tobytes()
    head = json.dumps({"w": {"dtype": dtype, "shape": [len(x) // COLS, COLS],
                             "data_offsets": [0, len(data)]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + data)


def write_gguf(path: Path, qtype: Q, x: np.ndarray) -> None:
    rows = len(x) // COLS
    if qtype == Q.Q8_0:
        data = quantize(x.reshape(rows, COLS), qtype)
    else:   # gguf-py has no Q4_K quantizer: random blocks with small finite f16 scales
        elems, size = GGML_QUANT_SIZES[qtype]
        rng = np.random.default_rng(4)
        blocks = rng.integers(0, 256, size=(len(x) // elems, size), dtype=np.uint8)
        for at in (0, 2):   # d and dmin, block_q4_K
            scale = rng.uniform(-0.05, 0.05, len(blocks)).astype("<f2")
            blocks[:, at:at + 2] = scale.view(np.uint8).reshape(-1, 2)
        data = blocks.reshape(rows, -1)
    w = GGUFWriter(str(path), "llama")
    w.add_tensor("w", data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def numpy_stats(raw: bytes, dtype: str) -> tuple:
    if dtype in ("Q8_0", "Q4_K"):
        v = dequantize(np.frombuffer(raw, np.uint8), Q[dtype]).astype(np.float64)
    elif dtype == "BF16":
        v = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        v = np.frombuffer(raw, np.float16 if dtype == "F16" else np.float32).astype(np.float64)
    nan, posinf, neginf = np.isnan(v).sum(), np.isposinf(v).sum(), np.isneginf(v).sum()
    f = v[np.isfinite(v)]
    lo, hi = f.min(), f.max()
    out = (lo, hi, f.mean(), f.std(), int((np.abs(f) < 1e-6).sum()), int((f == 0).sum()),
           int(nan), int(posinf), int(neginf))
    counts, _ = np.histogram(f, BINS, (lo, hi))
    return out, counts


def ours(path: Path) -> tuple:
    with tensorloupe.open(str(path)) as ckpt:
        t = ckpt.tensor(ckpt.tensors[0].name)
        if hasattr(sampling, "exact_summary"):   # what `stats --exact` runs
            return sampling.exact_summary(t, BINS)
        s = sampling.exact_stats(t)   # before it (run with an older checkout's pylib first)
        return s, sampling.exact_histogram(t, s, BINS)


def best(fn, repeat: int) -> tuple[float, object]:
    """Best CPU time of `repeat` runs (process time: the machine is shared; one thread each)."""
    times, out = [], None
    for _ in range(repeat):
        start = time.process_time()
        out = fn()
        times.append(time.process_time() - start)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--profile", choices=DTYPES, help="print cProfile's top functions for this dtype")
    ap.add_argument("--only", choices=DTYPES, action="append")
    args = ap.parse_args()
    n = args.elements // COLS * COLS
    x = values(n)
    print(f"{n:,} elements per tensor, {BINS} bins, best of {args.repeat}")
    print(f"{'dtype':6} {'tensorloupe':>12} {'numpy':>9} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.only or DTYPES:
            path = Path(tmp) / (f"{dtype}.gguf" if dtype.startswith("Q") else f"{dtype}.safetensors")
            (write_gguf(path, Q[dtype], x) if dtype.startswith("Q") else write_safetensors(path, dtype, x))
            with tensorloupe.open(str(path)) as ckpt:
                t = ckpt.tensors[0]
                offset, nbytes = t.known_file_offset, t.nbytes
            raw = path.read_bytes()[offset:offset + nbytes]

            def reference():
                with open(path, "rb") as f:   # numpy's side reads the bytes too
                    f.seek(offset)
                    return numpy_stats(f.read(nbytes), dtype)
            t_np, (ref, counts) = best(reference, args.repeat)
            t_us, (s, h) = best(lambda: ours(path), args.repeat)
            mine = (s.min, s.max, s.mean, s.std, round(s.zeros * s.count), s.exact_zeros, s.nan,
                    s.posinf, s.neginf)
            assert mine[:2] == tuple(ref[:2]) and mine[4:] == ref[4:], (mine, ref)
            assert abs(mine[2] - ref[2]) <= 1e-12 * abs(ref[3]) and abs(mine[3] / ref[3] - 1) < 1e-9
            assert h.counts == counts.tolist(), dtype
            print(f"{dtype:6} {t_us:10.2f} s {t_np:7.2f} s {t_us / t_np:5.1f}x")
            if args.profile == dtype:
                profile = cProfile.Profile()
                profile.runcall(ours, path)
                pstats.Stats(profile).sort_stats("tottime").print_stats(12)
            del raw


if __name__ == "__main__":
    main()
