"""Benchmark: the expert-redundancy analysis of a 32-layer x 64-expert model.

The model is a sparse safetensors file with Qwen1.5-MoE-sized stacked experts per layer
(`mlp.experts.{gate_up_proj,down_proj}`, [64, 2816, 2048] and [64, 2048, 1408] in BF16, ~70 GiB of
holes on disk). Random bytes are written only where the analysis samples (computed with the same
window plan it uses), with experts 1 and 33 of every layer planted as copies of experts 0 and 32;
everything else is a hole that reads as zeros. The analysis reads only those windows (checked), so
the figures are those of a real file of that size. We print wall time, bytes and reads, and the
same-run reference of reading those bytes raw (the floor any implementation has to pay), and where
the CPython time goes: similarities (gram.py), reads (`read_many`, decoding excluded) and the rest
(decoding, signatures, profiles, clustering). Wall time and CPU time are both printed: on a shared
machine the CPU time is the steadier figure.

    python bench/moe.py [--layers 32] [--experts 64] [--browser [--query helper=0]]

In the page the analysis reads two layers ahead and a second Python (web/compute.mjs) measures
a layer, from the bytes the worker read for it, whenever it holds fewer than two, once it is up
(on a first visit it boots from scratch; on a return visit, measured too, from the memory
snapshot the first stored); `--query helper=0` measures it with one Python.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import tempfile
import sys
import time
from pathlib import Path

# This checkout's library (not an installed one); TENSORLOUPE_PYLIB points at another checkout's
# pylib/ to measure it the same way (e.g. the landed main, as a before figure).
sys.path.insert(0, os.environ.get("TENSORLOUPE_PYLIB") or str(Path(__file__).resolve().parent.parent / "pylib"))

import tensorloupe  # noqa: E402
from tensorloupe.moe import redundancy
from tensorloupe import source
from tensorloupe.moe.redundancy import DEFAULT_SAMPLES_PER_MATRIX, SIGNATURE_WINDOWS, analyse
from tensorloupe.sampler.sampling import plan_windows

D_MODEL, D_FF = 2048, 1408
MATRICES = {"gate_up_proj": (2 * D_FF, D_MODEL), "down_proj": (D_MODEL, D_FF)}


def write_model(path: Path, layers: int, experts: int) -> list[tuple[int, int]]:
    """Write the sparse file; returns the (offset, length) ranges that hold data."""
    header, offset, spans = {"__metadata__": {"format": "pt"}}, 0, []
    for layer in range(layers):
        for leaf, (rows, cols) in MATRICES.items():
            nbytes = experts * rows * cols * 2
            name = f"model.layers.{layer}.mlp.experts.{leaf}"
            header[name] = {"dtype": "BF16", "shape": [experts, rows, cols],
                            "data_offsets": [offset, offset + nbytes]}
            spans.append((offset, rows * cols))
            offset += nbytes
    text = json.dumps(header).encode()
    base = 8 + len(text)
    ranges = []
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(base + offset)
        for start, per_expert in spans:
            windows = plan_windows(per_expert, DEFAULT_SAMPLES_PER_MATRIX, 1, SIGNATURE_WINDOWS)
            for expert in range(experts):
                source = {1: 0, 33: 32}.get(expert, expert)  # planted duplicates
                for first, count in windows:
                    position = base + start + (expert * per_expert + first) * 2
                    f.seek(position)
                    f.write(_noise(source, first, count, start))
                    ranges.append((position, count * 2))
    return ranges


def _noise(expert: int, first: int, count: int, salt: int) -> bytes:
    import hashlib
    out = bytearray()
    counter = 0
    key = f"{salt}.{expert}.{first}".encode()
    while len(out) < 2 * count:
        out += hashlib.blake2b(counter.to_bytes(8, "little"), key=key, digest_size=64).digest()
        counter += 1
    data = bytearray(out[:2 * count])
    data[1::2] = bytes((b & 0x3F) | 0x00 if b & 0x80 else (b & 0x3F) | 0x80 for b in data[1::2])
    return bytes(data)  # finite BF16 values of both signs, magnitudes up to ~2


class Split:
    """CPU seconds spent in the similarities and in the reads, by wrapping them (the similarity
    generator is `gram_steps`, or `cosine_steps` / `cosine_rows` in checkouts before it)."""

    def __init__(self):
        self.gram = self.reads = 0.0
        self._depth = 0
        name = next(n for n in ("gram_steps", "cosine_steps", "cosine_rows") if hasattr(redundancy, n))
        similarities = getattr(redundancy, name)
        read_many = source.ByteSource.read_many

        def timed_similarities(vectors):
            steps = similarities(vectors)
            while True:
                start = time.process_time()
                try:
                    item = next(steps)
                except StopIteration:
                    return
                finally:
                    self.gram += time.process_time() - start
                yield item

        def timed_reads(src, ranges):
            self._depth += 1     # sources wrap sources: the outermost call counts
            start = time.process_time()
            try:
                return read_many(src, ranges)
            finally:
                self._depth -= 1
                if not self._depth:
                    self.reads += time.process_time() - start

        setattr(redundancy, name, timed_similarities)
        source.ByteSource.read_many = timed_reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--browser", action="store_true", help="also run it in the app in Chromium")
    parser.add_argument("--query", default="", help="the page's query string in the browser run, "
                        "e.g. helper=0 (one Python compares every layer)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "moe-32x64.safetensors"
        start = time.perf_counter()
        ranges = write_model(path, args.layers, args.experts)
        print(f"wrote {path.stat().st_size / 2**30:.1f} GiB sparse file "
              f"({len(ranges)} data ranges) in {time.perf_counter() - start:.1f} s")

        split = Split()
        start, cpu = time.perf_counter(), time.process_time()
        ckpt = tensorloupe.open(path)
        result = analyse(ckpt)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        experts = sum(len(layer.experts) for layer in result.layers)
        planted = sum(sorted(map(sorted, layer.clusters)) == [[0, 1], [32, 33]] for layer in result.layers)

        start = time.perf_counter()
        with open(path, "rb") as f:
            raw = 0
            for position, length in ranges:
                f.seek(position)
                raw += len(f.read(length))
        floor = time.perf_counter() - start

        print(f"analysed {len(result.layers)} layers x {args.experts} experts ({experts} experts) "
              f"in {elapsed:.2f} s ({elapsed / experts * 1e3:.2f} ms per expert), CPU {cpu:.2f} s")
        print(f"  CPU: similarities {split.gram:.2f} s, reads {split.reads:.2f} s, "
              f"the rest {cpu - split.gram - split.reads:.2f} s")
        print(f"  bytes read {result.bytes_read:,} ({result.bytes_read / experts / 1024:.1f} KiB per expert) "
              f"in {ckpt.reads():,} reads; file is {os.path.getsize(path):,} bytes")
        print(f"  raw read of the same {raw:,} bytes: {floor:.2f} s (ratio analysis/raw {elapsed / floor:.1f}x)")
        print(f"  planted duplicate pairs found in {planted} of {len(result.layers)} layers; "
              f"{len(result.recommendations)} drop recommendations")
        print(f"  browser estimate at ~1.5 ms per read: {ckpt.reads() * 1.5e-3:.0f} s of read overhead")
        if args.browser:
            browser_run(path, experts, args.query)
            if not args.query:
                print("a return visit (the page reloaded once the first visit stored its memory snapshot):")
                browser_run(path, experts, return_visit=True)


def browser_run(path: Path, experts: int, query: str = "", return_visit: bool = False) -> None:
    import sys
    import threading

    from playwright.sync_api import sync_playwright

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    import build  # the app's own builder and Range-capable server

    build.build()
    server = build.make_server(root / "dist", port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    hour = 3_600_000
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        page = browser.new_page()
        page.on("console", lambda m: m.type in ("warning", "error") and print("  console:", m.text))
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/" + (f"?{query}" if query else ""))
        page.wait_for_selector("body[data-python=ready]", state="attached", timeout=120_000)
        page.wait_for_function("() => document.body.dataset.model === 'demo-moe.safetensors'")
        if return_visit:
            # The first visit stores the memory snapshot once the page is idle; the next visit
            # (and its second Python) boots from it.
            page.wait_for_selector("body[data-snapshot=stored]", state="attached", timeout=120_000)
            page.reload()
            page.wait_for_selector("body[data-python=ready]", state="attached", timeout=120_000)
            page.wait_for_function("() => document.body.dataset.model === 'demo-moe.safetensors'")
        page.set_input_files("#file-input", str(path))
        page.wait_for_function("name => document.body.dataset.model === name", arg=path.name, timeout=hour)
        page.click("#tab-moe")
        page.wait_for_selector("#moe-cost[data-total-bytes]", timeout=hour)
        start = time.perf_counter()
        page.click("#moe-run")
        page.wait_for_selector("#redundancy[data-state=done]", timeout=hour)
        elapsed = time.perf_counter() - start
        outcome = page.inner_text("#moe-outcome")
        verdict = page.inner_text("#moe-verdict")
        helped = page.get_attribute("#redundancy", "data-helped")
        helper = page.evaluate("document.body.dataset.helper")
        page_boot = page.evaluate("document.body.dataset.helperBoot")
        browser.close()
    server.shutdown()
    print(f"in the browser (Pyodide, headless Chromium): {elapsed:.1f} s "
          f"({elapsed / experts * 1e3:.1f} ms per expert)")
    print(f"  the page says: {outcome} / {verdict}")
    booted = page_boot
    print(f"  layers measured by the second Python (web/compute.mjs): {helped} (it is {helper}, booted {booted})")


if __name__ == "__main__":
    main()
