"""The page half of bench/quant_views.py: select -> stats and select -> heatmap of each file's
weight in the app (headless Chromium, driven as bench/browser_views.py drives it), against the
F16 tensor of the same shape in the same page.

Each file is opened with its config.json (the file picker, both files at once), its weight is
selected from the tree, and the page's own DOM says when the full sample's statistics are shown
(after a first look) and when the last heatmap is drawn (after its first look); the worker's
counters (#io) say the reads and bytes of both views together. Medians of --runs pages, each
after one warm-up selection of the F16 tensor.
"""

from __future__ import annotations

import statistics
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from browser_views import ARGS, CLICK, WATCH, reads_shown, ready_page  # noqa: E402

DONE = ("() => window.__views.statsFinal !== null && window.__views.heatmap !== null"
        " && document.body.dataset.pending === '0'"
        " && document.getElementById('heatmap').dataset.loading !== 'true'")


def _one(page, path: Path, name: str) -> tuple:
    """(ms to the full statistics, ms to the last heatmap, reads, bytes) of one selection."""
    opened = int(page.evaluate("Number(document.body.dataset.opened || 0)"))
    config = path.parent / "config.json"
    page.set_input_files("#file-input", [str(path)] + ([str(config)] if config.exists() else []))
    page.wait_for_function("([n, after]) => document.body.dataset.model === n && document.body.dataset.pending === '0'"
                           " && Number(document.body.dataset.opened || 0) > after",
                           arg=[path.name, opened], timeout=180_000)
    bytes_before, reads_before = int(page.get_attribute("#io", "data-bytes-read") or 0), reads_shown(page)
    page.evaluate(WATCH, name)
    page.wait_for_selector(f'.tree-row[data-name="{name}"]')
    page.evaluate(CLICK, name)
    page.wait_for_function(DONE, timeout=180_000)
    t = page.evaluate("window.__views")
    return (t["statsFinal"], t["final"], reads_shown(page) - reads_before,
            int(page.get_attribute("#io", "data-bytes-read")) - bytes_before)


def report(files: dict, runs: int) -> None:
    """files: scheme -> (path, weight name); prints one line per scheme against F16's."""
    from playwright.sync_api import sync_playwright
    import build
    build.build()
    server = build.make_server(ROOT / "dist", port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    rows: dict = {scheme: [] for scheme in files}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for _ in range(runs):
            page = ready_page(browser, url)
            _one(page, *files["F16"])       # warm-up: the first selection imports the views' modules
            for scheme, (path, name) in files.items():
                rows[scheme].append(_one(page, path, name))
            page.close()
        browser.close()
    server.shutdown()
    medians = {scheme: [statistics.median(r[k] for r in got) for k in range(4)] for scheme, got in rows.items()}
    print("  page (stats = the full sample shown, heatmap = the last lattice drawn; reads of both):")
    for scheme, (stats_ms, map_ms, reads, nbytes) in medians.items():
        base = medians["F16-3d" if scheme == "MXFP4" else "F16"]
        print(f"  {scheme:10s} page   stats {stats_ms:7.0f} ms ({stats_ms / base[0]:4.1f}x F16's)  heatmap "
              f"{map_ms:7.0f} ms ({map_ms / base[1]:4.1f}x F16's)  {reads:5.0f} reads {nbytes / 1024:7.0f} KiB "
              f"({nbytes / base[3]:4.2f}x F16's)")
