"""Benchmark: bytes read against the stated cost on transposed (column-major) torch tensors.

    python bench/strided_reads.py [--no-browser] [--mib 100]

Writes a ~100 MB state_dict of transposed float32 matrices (`w.t()`, saved without
.contiguous()) with torch.save, as a legacy .pt and as a zip .pt. For each file, in CPython: the
health scan's stated cost (`health_cost`) against the bytes it read, and for one tensor the
sample's (`sample_cost`) and the 256 x 256 heatmap lattice's (`grid_cost`) stated bytes against
the bytes read, each on a freshly opened checkpoint; then, unless --no-browser, the same in the
page (headless Chromium): select the tensor (sample + heatmap, the worker's `cost_bytes`), then
run the Health tab (`#health-cost` data-scan-bytes), with the bytes read from the page's I/O
counter. A zip's storages are positioned from their local headers on first use: those header
reads (one 64 KiB cache block in the page) are counted and shown apart from the stated cost.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "pylib"), str(ROOT)]

import torch  # noqa: E402  (the writer)

import tensorloupe  # noqa: E402
from tensorloupe.healthscan import health, health_cost  # noqa: E402
from tensorloupe.sampler.sampling import grid, grid_cost, plan_grid, sample, sample_cost  # noqa: E402

SIDE = 2048                 # a 2048 x 2048 float32 matrix is 16 MiB
TENSOR = "w0"


def write_files(folder: Path, mib: int) -> dict[str, Path]:
    gen = torch.Generator().manual_seed(3)
    count = max(1, mib // 16)
    state = {f"w{i}": torch.randn(SIDE, SIDE, generator=gen).t() for i in range(count)}
    paths = {"legacy": folder / "transposed_legacy.pt", "zip": folder / "transposed_zip.pt"}
    torch.save(state, paths["legacy"], _use_new_zipfile_serialization=False)
    torch.save(state, paths["zip"])
    return paths


def measured(path: Path, work) -> tuple[int, int]:
    """(bytes read from the file, bytes asked of its sources) by work(ckpt), freshly opened."""
    with tensorloupe.open(path) as ckpt:
        ckpt.locate_all()       # a zip's storages positioned first: what follows reads values only
        before = ckpt.bytes_read(), ckpt.bytes_asked()
        work(ckpt)
        return ckpt.bytes_read() - before[0], ckpt.bytes_asked() - before[1]


def row(label: str, stated: int, read: int, size: int, extra: str = "") -> str:
    ok = "ok" if read <= stated else "OVER"
    return (f"  {label:<24} stated {stated / 1024:10.1f} KiB  read {read / 1024:10.1f} KiB  "
            f"{read / stated if stated else 0:5.2f} of stated, {100 * read / size:6.2f}% of the file  {ok}{extra}")


def cpython_rows(kind: str, path: Path) -> None:
    size = path.stat().st_size
    with tensorloupe.open(path) as ckpt:
        t = ckpt.tensor(TENSOR)
        print(f"{kind}: {path.name} {size / 2**20:.1f} MiB, {len(ckpt.tensors)} tensors, "
              f"{TENSOR} {list(t.shape)} strides {list(t.element_strides())}")
        cost = health_cost(ckpt)
        s_cost = sample_cost(t)
        g_cost = grid_cost(t, plan_grid(t, 256, 256))
    read, _ = measured(path, lambda c: health(c))
    print(row("CPython health", cost.scan_bytes, read, size))
    read, _ = measured(path, lambda c: sample(c.tensor(TENSOR)))
    print(row("CPython sample", s_cost, read, size))
    read, _ = measured(path, lambda c: grid(c.tensor(TENSOR), 256, 256))
    print(row("CPython heatmap 256x256", g_cost, read, size))


def browser_rows(paths: dict[str, Path]) -> None:
    from playwright.sync_api import sync_playwright
    import build
    from bench.browser_views import open_in_page
    build.build()
    server = build.make_server(ROOT / "dist", port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    idle = ("() => document.body.dataset.pending === '0'"
            " && document.getElementById('heatmap').dataset.loading !== 'true'")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        for kind, path in paths.items():
            size = path.stat().st_size
            page = open_in_page(browser, url, path)
            page.wait_for_function(idle, timeout=180_000)
            # the page selects a tensor on open: select another, then the one measured
            for name in ("w1", TENSOR) if "w1" in page.content() else (TENSOR,):
                before = int(page.get_attribute("#io", "data-bytes-read") or 0)
                page.fill("#filter", name)
                page.locator(f'.tree-row[data-name="{name}"]').click()
                page.wait_for_function("n => document.getElementById('tensor-name').textContent === n"
                                       " && document.getElementById('heatmap').dataset.costBytes !== undefined"
                                       " && document.getElementById('stats').dataset.firstLook === 'false'",
                                       arg=name, timeout=180_000)
                page.wait_for_function(idle, timeout=180_000)
            read = int(page.get_attribute("#io", "data-bytes-read")) - before
            stated = (int(page.get_attribute("#stats", "data-cost-bytes"))
                      + int(page.get_attribute("#heatmap", "data-cost-bytes")))
            print(row(f"page {kind} sample+heatmap", stated, read, size))
            page.click("#tab-health")
            page.wait_for_selector("#health-cost[data-scan-bytes]", state="attached", timeout=180_000)
            stated = int(page.get_attribute("#health-cost", "data-scan-bytes"))
            before = int(page.get_attribute("#io", "data-bytes-read"))
            page.click("#health-run")
            page.wait_for_selector("#health[data-state=done]", state="attached", timeout=600_000)
            page.wait_for_function(idle, timeout=180_000)
            read = int(page.get_attribute("#io", "data-bytes-read")) - before
            print(row(f"page {kind} health", stated, read, size))
            page.close()
        browser.close()
    server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--mib", type=int, default=100, help="size of each file (default %(default)s MiB)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_files(Path(tmp), args.mib)
        for kind, path in paths.items():
            cpython_rows(kind, path)
        if not args.no_browser:
            browser_rows(paths)


if __name__ == "__main__":
    main()
