"""Benchmark: selecting a dense 4096 x 4096 tensor -> its statistics, and -> its heatmap.

    python bench/browser_views.py [--runs 5] [--no-browser]

A safetensors file holds two dense 4096 x 4096 tensors of random normal values, F16 and BF16
(32 MiB each). For each: the statistics the tensor view shows first (`sample` + a 64-bin
histogram) and the 256 x 256 heatmap lattice (`grid` + colormap), with reads and bytes counted,
via the CPython API; the same work with numpy on a memory map of the same file (the same sample
windows, the same lattice cells) as the same-run reference; and, unless --no-browser, the time
from selecting the tensor in the app (headless Chromium, first selection) to the statistics line
shown and to the heatmap drawn, with the worker's reads counted. Medians of --runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "pylib"), str(ROOT)]

import numpy as np  # noqa: E402  (the reference)

import tensorloupe  # noqa: E402
from tensorloupe import colormap  # noqa: E402
from tensorloupe.sample import grid, histogram, sample  # noqa: E402

SIDE = 4096
DTYPES = {"F16": np.float16, "BF16": None}


def write_file(path: Path) -> None:
    rng = np.random.default_rng(11)
    header, offset, blobs = {}, 0, []
    for name in DTYPES:
        values = rng.standard_normal((SIDE, SIDE), dtype=np.float32) * 0.02
        if name == "F16":
            blob = values.astype(np.float16).tobytes()
        else:  # BF16: the top half of each float32
            blob = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
        header[f"w_{name.lower()}"] = {"dtype": name, "shape": [SIDE, SIDE],
                                       "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)


def as_float(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "F16":
        return raw.view(np.float16).astype(np.float64)
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def timed(fn, runs: int):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def cpython_rows(path: Path, runs: int) -> dict:
    rows = {}
    base = 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]
    for dtype in DTYPES:
        name = f"w_{dtype.lower()}"

        def api_stats():
            with tensorloupe.open(path) as ckpt:
                s = sample(ckpt.tensor(name))
                histogram(s.values, 64)
                return s, ckpt.bytes_read(), ckpt.reads()

        def api_heatmap():
            with tensorloupe.open(path) as ckpt:
                g = grid(ckpt.tensor(name), 256, 256)
                colormap.rgba(g.floats(), g.amax)
                return g, ckpt.bytes_read(), ckpt.reads()

        t_stats, (s, stats_bytes, stats_reads) = timed(api_stats, runs)
        t_map, (g, map_bytes, map_reads) = timed(api_heatmap, runs)
        offset = json.loads(path.read_bytes()[8:base])[name]["data_offsets"][0]
        flat = np.memmap(path, dtype=np.uint8, mode="r", offset=base + offset,
                         shape=(SIDE * SIDE * 2,)).view(np.uint16)

        def np_stats():
            values = np.concatenate([as_float(np.asarray(flat[a:a + n]), dtype) for a, n in s.windows])
            values.mean(), values.std(), values.min(), values.max()
            np.percentile(values, [1, 5, 25, 50, 75, 95, 99])
            np.histogram(values, 64)
            return values

        def np_heatmap():
            cells = as_float(np.asarray(flat.reshape(SIDE, SIDE)[np.ix_(g.row_index, g.col_index)]), dtype)
            scaled = np.clip(np.abs(cells) / np.abs(cells).max() * 255, 0, 255).astype(np.uint8)
            return np.stack([scaled] * 4, -1).tobytes()

        t_np_stats, values = timed(np_stats, runs)
        t_np_map, _ = timed(np_heatmap, runs)
        assert abs(values.mean() - s.stats.mean) < 1e-9 and len(values) == len(s.values)
        rows[dtype] = {"stats": (t_stats, stats_bytes, stats_reads, t_np_stats),
                       "heatmap": (t_map, map_bytes, map_reads, t_np_map)}
        print(f"  {dtype:4s} CPython API  select -> stats   {t_stats * 1e3:7.1f} ms "
              f"({stats_reads} reads, {stats_bytes / 1024:.0f} KiB incl. header) "
              f"numpy {t_np_stats * 1e3:.1f} ms, ratio {t_stats / t_np_stats:.1f}x")
        print(f"  {dtype:4s} CPython API  select -> heatmap {t_map * 1e3:7.1f} ms "
              f"({map_reads} reads, {map_bytes / 1024:.0f} KiB incl. header) "
              f"numpy {t_np_map * 1e3:.1f} ms, ratio {t_map / t_np_map:.1f}x")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1/5 min), {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dense-4096.safetensors"
        write_file(path)
        cpython_rows(path, args.runs)


if __name__ == "__main__":
    main()
