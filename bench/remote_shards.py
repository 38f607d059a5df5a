"""Benchmark: a checkpoint of 163 sparse safetensors shards (DeepSeek-V3's count) on a slow server.

    python bench/remote_shards.py [--shards 163] [--latency-ms 50] [--runs 3] [--before DIR] [--browser]

A local server (127.0.0.1 only) serves the shards and their index by HTTP Range and waits
`--latency-ms` before answering each request, like a far-away host. We time `tensorloupe inspect
URL...` (a fresh CLI process, text output) to the full tensor tree, count its requests, and give the ratio to
the serial floor (shards x latency: what one request per shard, one at a time, would cost).
The CLI's CPU seconds (user + system) are given too: on a loaded machine they say more than the
wall time. `--before DIR` runs the same with another checkout's pylib (e.g. /work/main/pylib) in
the same run; `--browser` does the same in the app in headless Chromium, twice: the URLs typed
in the URL box once Python is ready, and the page loaded with ?url=... for every file (timed
from Python ready). In the page, "tree" is the tensor tree drawn and "idle" is the page done with
everything it asked for (the architecture block, the first tensor's statistics and heatmap).
`--before-dist DIR` times another build of the app (e.g. /work/main/dist) the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import build  # noqa: E402  (the app's Range-capable server)

# Per shard: a few layers' worth of DeepSeek-style expert tensors, with long names (~25 KB header).
TENSORS_PER_SHARD = 240


def write_shards(folder: Path, count: int) -> list[str]:
    names, weight_map = [], {}
    for no in range(count):
        name = f"model-{no + 1:05d}-of-{count:05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for i in range(TENSORS_PER_SHARD):
            tensor = f"model.layers.{no}.mlp.experts.{i // 3}.{('gate', 'up', 'down')[i % 3]}_proj.weight"
            nbytes = 2048 * 512 * 2
            header[tensor] = {"dtype": "BF16", "shape": [2048, 512],
                              "data_offsets": [offset, offset + nbytes]}
            weight_map[tensor] = name
            offset += nbytes
        text = json.dumps(header).encode()
        with open(folder / name, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            f.truncate(8 + len(text) + offset)
        names.append(name)
    index = "model.safetensors.index.json"
    (folder / index).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return names + [index]


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes = 0


def slow_server(directory: Path, latency: float, counter: Counter, files: dict | None = None,
                slow_prefix: str = "/"):
    """A Range server for `directory` (and `files` under /files/), waiting `latency` before
    answering each request whose path starts with `slow_prefix`."""
    class Handler(build.Handler):
        def send_head(self):
            if self.path.startswith(slow_prefix):
                time.sleep(latency)  # the round trip of a far-away server
                with counter.lock:
                    counter.requests += 1
            return super().send_head()

        def copyfile(self, source, outputfile):
            if self.path.startswith(slow_prefix):
                with counter.lock:
                    counter.bytes += self._remaining or 0
            return super().copyfile(source, outputfile)

    Handler.files = dict(files or {})
    server = build.Server(("127.0.0.1", 0), lambda *a, **k: Handler(*a, directory=str(directory), **k))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def cli_run(pylib: Path, urls: list[str], counter: Counter) -> tuple[float, int, int, int, float]:
    before = counter.requests, counter.bytes
    env = dict(os.environ, PYTHONPATH=str(pylib))
    cpu = _children_cpu()
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", *urls],
                         env=env, capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - start
    tensors = int(re.search(r"^\s+tensors\s+(\d+)", out.stdout, re.MULTILINE)[1])
    return (elapsed, counter.requests - before[0], counter.bytes - before[1], tensors,
            _children_cpu() - cpu)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median_run(fn, runs: int):
    results = [fn() for _ in range(runs)]
    results.sort(key=lambda r: r[0])
    return results[len(results) // 2], [r[0] for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=163)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout's pylib, run the same way")
    parser.add_argument("--browser", action="store_true", help="also open them in the app")
    parser.add_argument("--before-dist", type=Path, help="another build of the app, timed the same way")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1/5 min), {os.cpu_count()} cores")
    floor = args.shards * args.latency_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = write_shards(folder, args.shards)
        counter = Counter()
        server = slow_server(folder, args.latency_ms / 1000, counter)
        base = f"http://127.0.0.1:{server.server_address[1]}"
        urls = [f"{base}/{name}" for name in files]
        print(f"{args.shards} shards + index, {args.latency_ms:.0f} ms per request; "
              f"serial floor {args.shards} x {args.latency_ms:.0f} ms = {floor:.2f} s")
        checkouts = [("before", args.before)] if args.before else []
        checkouts.append(("this checkout", ROOT / "pylib"))
        for label, pylib in checkouts:
            (elapsed, requests, nbytes, tensors, cpu), times = median_run(
                lambda: cli_run(pylib, urls, counter), args.runs)
            print(f"  CLI {label:14s} {elapsed:6.2f} s (runs {', '.join(f'{t:.2f}' for t in times)}) "
                  f"{cpu:.2f} s CPU, {requests} requests, {nbytes / 2**20:.1f} MiB, {tensors} tensors; "
                  f"ratio to the serial floor {elapsed / floor:.2f}")
        if args.browser:
            dists = [("before", args.before_dist)] if args.before_dist else []
            build.build()
            dists.append(("this checkout", ROOT / "dist"))
            for label, dist in dists:
                browser_run(folder, files, args.latency_ms / 1000, floor, args.runs, dist, label)
        server.shutdown()
        server.server_close()


def browser_run(folder: Path, files: list[str], latency: float, floor: float, runs: int,
                dist: Path, label: str) -> None:
    """The app and the shards from one server (same origin); only /files/ requests are slow."""
    from urllib.parse import quote

    from playwright.sync_api import sync_playwright
    counter = Counter()
    app = slow_server(dist, latency, counter, {n: folder / n for n in files}, "/files/")
    base = f"http://127.0.0.1:{app.server_address[1]}/"
    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    query = "&".join("url=" + quote(f"files/{n}") for n in files)
    typed = "\n".join(f"{base}files/{n}" for n in files)
    tree = "() => (document.body.dataset.model || '').includes('-of-')"
    idle = "() => document.body.dataset.pending === '0'"
    results: dict[str, list] = {"URL box": [], "?url=": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        for _ in range(runs):
            for how in results:
                page = browser.new_page()
                page.goto(base)
                page.wait_for_selector("body[data-python=ready]", state="attached", timeout=180_000)
                page.wait_for_function(idle, timeout=180_000)
                before = counter.requests
                if how == "URL box":
                    page.fill("#url-input", typed)
                    start = time.perf_counter()
                    page.click("#url-form button[type=submit]")
                else:
                    # The page is ready: open the set as a link would (every URL in the address).
                    page.evaluate("q => { history.replaceState(null, '', '?' + q); }", query)
                    page.reload()
                    # The URLs are opened as soon as Python is ready: time from then.
                    page.wait_for_selector("body[data-python=ready]", state="attached", timeout=180_000)
                    start = time.perf_counter()
                page.wait_for_function(tree, timeout=600_000)
                at_tree, tree_requests = time.perf_counter() - start, counter.requests - before
                page.wait_for_function(idle, timeout=600_000)
                at_idle = time.perf_counter() - start
                results[how].append((at_tree, tree_requests, at_idle, counter.requests - before))
                page.close()
        browser.close()
    app.shutdown()
    for how, times in results.items():
        at_tree, tree_requests, _, _ = sorted(times)[len(times) // 2]
        _, _, at_idle, idle_requests = sorted(times, key=lambda t: t[2])[len(times) // 2]
        print(f"  page {label:14s} {how:8s} tree {at_tree:5.2f} s (runs "
              f"{', '.join(f'{t[0]:.2f}' for t in times)}) {tree_requests} requests, ratio to the "
              f"serial floor {at_tree / floor:.2f}; idle {at_idle:5.2f} s, {idle_requests} requests")


if __name__ == "__main__":
    main()
