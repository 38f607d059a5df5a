"""Benchmark: selecting a dense 4096 x 4096 tensor -> its statistics, and -> its heatmap.

    python bench/browser_views.py [--runs 5] [--no-browser]

A safetensors file holds two dense 4096 x 4096 tensors of random normal values, F16 and BF16
(32 MiB each). For each: the statistics the tensor view shows first (`sample` + a 64-bin
histogram) and the 256 x 256 heatmap lattice (`grid` + colormap), with reads and bytes counted,
via the CPython API; the same work with numpy on a memory map of the same file (the same sample
windows, the same lattice cells) as the same-run reference; and, unless --no-browser, the time
from selecting the tensor in the app (headless Chromium, first selection) to the statistics line
shown (a first look, then the full sample's numbers) and to the heatmap drawn (its first look,
then the full lattice), with the worker's reads counted. Medians of --runs.
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
from tensorloupe.sampler.sampling import grid, sample  # noqa: E402

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
                s.histogram(64)
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
    parser.add_argument("--query", default="", help="added to the app's address (e.g. jspi=0)")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1/5 min), {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dense-4096.safetensors"
        write_file(path)
        cpython = cpython_rows(path, args.runs)
        if not args.no_browser:
            browser_rows(path, args.runs, cpython, args.query)


# Installed in the page before the click: the times the statistics line and the heatmap appear
# (a coarse heatmap first if the page draws one, then the final one).
WATCH = """name => {
  const t = {start: 0, stats: null, statsFinal: null, heatmap: null, heatmaps: 0};
  const oldStat = document.querySelector('#stats .stat[data-key=mean]');
  const canvas = document.getElementById('heatmap');
  const oldSeq = canvas.dataset.seq;
  let lastSeq = oldSeq;
  new MutationObserver(() => {
    const now = performance.now();
    const stat = document.querySelector('#stats .stat[data-key=mean]');
    if (stat && stat !== oldStat && document.getElementById('tensor-name').textContent === name) {
      if (t.stats === null) t.stats = now - t.start;
      // the whole sample's numbers (a first look, labelled so, may come before them)
      if (t.statsFinal === null && document.getElementById('stats').dataset.firstLook !== 'true') t.statsFinal = now - t.start;
    }
    if (canvas.dataset.seq !== lastSeq) {
      lastSeq = canvas.dataset.seq;
      t.heatmaps += 1;
      if (t.heatmap === null) t.heatmap = now - t.start;
      t.final = now - t.start;
    }
  }).observe(document.body, {subtree: true, childList: true, attributes: true});
  window.__views = t;
  document.getElementById('filter').value = name;
  document.getElementById('filter').dispatchEvent(new Event('input', {bubbles: true}));
}"""
CLICK = """name => {
  const row = document.querySelector(`.tree-row[data-name="${name}"]`);
  window.__views.start = performance.now();
  row.click();
}"""


ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def ready_page(browser, url: str):
    """A new page of the app at `url`, Python ready and the demo model shown."""
    page = browser.new_page()
    page.goto(url)
    page.wait_for_selector("body[data-python=ready]", state="attached", timeout=180_000)
    page.wait_for_function("() => document.body.dataset.model === 'demo-moe.safetensors'"
                           " && document.body.dataset.pending === '0'", timeout=180_000)
    return page


def reads_shown(page) -> int:
    text = page.inner_text("#io-detail")
    return int(text.split(" reads")[0].replace(",", "").replace("\u202f", "").strip() or 0)


def open_in_page(browser, url: str, path: Path):
    """A new page at `url`, booted (the demo shown), with `path` opened from the file input."""
    page = ready_page(browser, url)
    page.set_input_files("#file-input", str(path))
    page.wait_for_function("n => document.body.dataset.model === n && document.body.dataset.pending === '0'",
                           arg=path.name, timeout=180_000)
    return page


def browser_rows(path: Path, runs: int, cpython: dict, query: str) -> None:
    import threading
    from playwright.sync_api import sync_playwright
    import build
    build.build()
    server = build.make_server(ROOT / "dist", port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/" + (f"?{query}" if query else "")
    results: dict = {dtype: [] for dtype in DTYPES}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for _ in range(runs):
            page = open_in_page(browser, url, path)
            for dtype in DTYPES:
                name = f"w_{dtype.lower()}"
                bytes_before, reads_before = int(page.get_attribute("#io", "data-bytes-read") or 0), reads_shown(page)
                page.evaluate(WATCH, name)
                page.wait_for_selector(f'.tree-row[data-name="{name}"]')
                page.evaluate(CLICK, name)
                page.wait_for_function("() => window.__views.statsFinal !== null && window.__views.heatmap !== null"
                                       " && document.body.dataset.pending === '0'"
                                       " && document.getElementById('heatmap').dataset.loading !== 'true'",
                                       timeout=180_000)
                t = page.evaluate("window.__views")
                results[dtype].append((t["stats"], t["heatmap"], t["final"], t["heatmaps"],
                                       int(page.get_attribute("#io", "data-bytes-read")) - bytes_before,
                                       reads_shown(page) - reads_before, t["statsFinal"]))
            page.close()
        browser.close()
    server.shutdown()
    for dtype, rows in results.items():
        stats_ms = statistics.median(r[0] for r in rows)
        first_ms = statistics.median(r[1] for r in rows)
        final_ms = statistics.median(r[2] for r in rows)
        t_api, _, _, t_np = cpython[dtype]["stats"]
        m_api, _, _, m_np = cpython[dtype]["heatmap"]
        stats_final_ms = statistics.median(r[6] for r in rows)
        print(f"  {dtype:4s} page  select -> stats   {stats_ms:7.1f} ms shown first, {stats_final_ms:.1f} ms the full sample "
              f"(runs {', '.join(f'{r[0]:.0f}/{r[6]:.0f}' for r in rows)}) "
              f"ratio to CPython API {stats_final_ms / 1e3 / t_api:.1f}x, to numpy {stats_final_ms / 1e3 / t_np:.0f}x")
        print(f"  {dtype:4s} page  select -> heatmap {final_ms:7.1f} ms drawn (first canvas change {first_ms:.0f} ms) "
              f"({rows[0][3]} draws; runs {', '.join(f'{r[1]:.0f}/{r[2]:.0f}' for r in rows)}) "
              f"ratio to CPython API {final_ms / 1e3 / m_api:.1f}x, to numpy {final_ms / 1e3 / m_np:.0f}x")
        print(f"  {dtype:4s} page  reads for both: {rows[0][5]} reads, {rows[0][4] / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
