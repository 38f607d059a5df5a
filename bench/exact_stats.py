"""Benchmark: `stats --exact` of one ~16M-element tensor, against numpy doing the same job.

The same job: read the tensor's bytes, decode every element (gguf-py's numpy dequantizer for the
ggml types, the bf16 bit shift for BF16), then min, max, mean, population std, the NaN/+Inf/-Inf
counts, |v| < 1e-6 and == 0 counts over the finite values, and a 32-bin histogram over the exact
[min, max]: what `tensorloupe stats --exact` prints. Both sides are timed in this run, on files
written here (safetensors for F32/F16/BF16, GGUF for Q8_0 and Q4_K), best CPU time of `--repeat`.
Every tensor holds the same normal values (Q8_0 quantised by gguf-py, Q4_K as llama.cpp lays its
blocks out: `quantize_q4_k`), or with `--random-q4k` random Q4_K blocks.

    python bench/exact_stats.py [--elements 16777216] [--repeat 2] [--profile F32] [--only Q4_K] [--random-q4k]
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


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """Q4_K blocks of x as llama.cpp's quantize_row_q4_K_ref lays them out (gguf-py has no Q4_K
    quantizer): per 32-element sub-block a scale (max - min) / 15 and a min -min(x, 0), both
    quantised to 6 bits against the block's largest (d, dmin as f16), then each code the nearest
    of 0..15 to (x + dmin * m) / (d * sc). llama.cpp then searches the scale (make_qkx2_quants);
    the min/max one kept here gives the same kind of d and dmin, which is what decides the cost."""
    sub = x.astype(np.float64).reshape(-1, 8, 32)
    lo = np.minimum(sub.min(axis=2), 0.0)
    scale, mins = (sub.max(axis=2) - lo) / 15, -lo
    max_scale, max_min = scale.max(axis=1, keepdims=True), mins.max(axis=1, keepdims=True)
    ls = np.clip(np.rint(scale * 63 / np.where(max_scale > 0, max_scale, 1)), 0, 63).astype(np.uint8)
    lm = np.clip(np.rint(mins * 63 / np.where(max_min > 0, max_min, 1)), 0, 63).astype(np.uint8)
    d, dmin = (max_scale / 63).astype("<f2"), (max_min / 63).astype("<f2")
    step = d.astype(np.float64) * ls
    q = np.clip(np.rint((sub + (dmin.astype(np.float64) * lm)[..., None]) / np.where(step > 0, step, 1)[..., None]),
                0, 15).astype(np.uint8)
    blocks = np.zeros((len(sub), 144), np.uint8)
    blocks[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    blocks[:, 2:4] = dmin.view(np.uint8).reshape(-1, 2)
    scales = blocks[:, 4:16]     # get_scale_min_k4's packing
    scales[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    scales[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    pairs = q.reshape(-1, 4, 2, 32)  # 64 elements per 32 bytes: low nibbles, then high ones
    blocks[:, 16:] = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(-1, 128)
    return blocks


def random_q4_k(n: int) -> np.ndarray:
    """Random Q4_K blocks with small finite f16 scales of either sign, d and dmin drawn apart:
    about 5% of the blocks then have values that float32 rounds (the slow path's share)."""
    elems, size = GGML_QUANT_SIZES[Q.Q4_K]
    rng = np.random.default_rng(4)
    blocks = rng.integers(0, 256, size=(n // elems, size), dtype=np.uint8)
    for at in (0, 2):   # d and dmin, block_q4_K
        scale = rng.uniform(-0.05, 0.05, len(blocks)).astype("<f2")
        blocks[:, at:at + 2] = scale.view(np.uint8).reshape(-1, 2)
    return blocks


def write_gguf(path: Path, qtype: Q, x: np.ndarray, random_blocks: bool = False) -> None:
    rows = len(x) // COLS
    if qtype == Q.Q8_0:
        data = quantize(x.reshape(rows, COLS), qtype)
    else:
        data = (random_q4_k(len(x)) if random_blocks else quantize_q4_k(x)).reshape(rows, -1)
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
    ap.add_argument("--random-q4k", action="store_true",
                    help="Q4_K as random blocks with random scales (the figures before stop 37) rather than quantised")
    args = ap.parse_args()
    n = args.elements // COLS * COLS
    x = values(n)
    print(f"{n:,} elements per tensor, {BINS} bins, best of {args.repeat}")
    print(f"{'dtype':6} {'tensorloupe':>12} {'numpy':>9} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.only or DTYPES:
            path = Path(tmp) / (f"{dtype}.gguf" if dtype.startswith("Q") else f"{dtype}.safetensors")
            (write_gguf(path, Q[dtype], x, args.random_q4k) if dtype.startswith("Q") else write_safetensors(path, dtype, x))
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
