"""Benchmark: the Health tab in the page against `tensorloupe health FILE --json`, same bytes, same run.

    python bench/health_page.py [--runs 2] [--only gguf|bert] [--query jspi=0]

Two files written here (no hub download): a llama-shaped GGUF of SmolLM-135M's shape (30 layers,
d 576, ff 1536, 3 KV heads of 64, vocab 49152; Q8_0 matrices of random codes with small f16
scales, F32 norms: ~143 MB, 273 tensors), and a BERT of all-MiniLM-L6's shape saved by
transformers (6 layers, d 384, vocab 30522, F32 safetensors: ~90 MB). For each:
  CLI   `python -m tensorloupe.cli health FILE --json` as a fresh process (wall time), and the
        scan's own time in this process (open + `tensorloupe.health`, wall and CPU);
  page  headless Chromium, the file opened with the file input, the Health tab's "Check health"
        clicked -> the card's state "done" (performance.now in the page), and its bytes read.
Best of --runs on each side (the machine is shared: the best is the least disturbed). It prints
the page / scan ratio (the target is at most 2x) and checks both read the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "pylib"), str(ROOT)]

import numpy as np  # noqa: E402  (writes the files)

import tensorloupe  # noqa: E402

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# SmolLM-135M's shape
LAYERS, D, FF, KV, VOCAB = 30, 576, 1536, 192, 49152


def write_gguf(path: Path) -> None:
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFWriter
    rng = np.random.default_rng(27)

    def q8_0(rows: int, cols: int) -> np.ndarray:
        blocks = rng.integers(-128, 128, size=(rows * cols // 32, 34), dtype=np.int16).astype(np.uint8)
        scale = rng.uniform(0.0005, 0.002, len(blocks)).astype("<f2")
        blocks[:, 0:2] = scale.view(np.uint8).reshape(-1, 2)
        return blocks.reshape(rows, cols // 32 * 34)

    def norm() -> np.ndarray:
        return (1 + rng.standard_normal(D) * 0.05).astype(np.float32)

    w = GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FF)
    w.add_head_count(9)
    w.add_head_count_kv(3)
    w.add_tensor("token_embd.weight", q8_0(VOCAB, D), raw_dtype=Q.Q8_0)
    for i in range(LAYERS):
        for name, (rows, cols) in {"attn_q": (D, D), "attn_k": (KV, D), "attn_v": (KV, D),
                                   "attn_output": (D, D), "ffn_gate": (FF, D), "ffn_up": (FF, D),
                                   "ffn_down": (D, FF)}.items():
            w.add_tensor(f"blk.{i}.{name}.weight", q8_0(rows, cols), raw_dtype=Q.Q8_0)
        w.add_tensor(f"blk.{i}.attn_norm.weight", norm())
        w.add_tensor(f"blk.{i}.ffn_norm.weight", norm())
    w.add_tensor("output_norm.weight", norm())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_bert(folder: Path) -> Path:
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(27)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, max_position_embeddings=512)
    BertModel(config).save_pretrained(folder, safe_serialization=True)
    path = folder / "minilm-shaped.safetensors"
    (folder / "model.safetensors").rename(path)
    return path


def cli_row(path: Path, runs: int) -> tuple[float, float, float, dict]:
    """(best wall time of the CLI process, best wall and CPU time of the scan in this process
    (open + health), the CLI's report)."""
    walls, scans, cpus = [], [], []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "health", str(path), "--json"],
                              capture_output=True, text=True, cwd=ROOT, check=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "pylib")})
        walls.append(time.perf_counter() - start)
        start, cpu = time.perf_counter(), time.process_time()
        with tensorloupe.open(path) as ckpt:
            tensorloupe.health(ckpt)
        scans.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(scans), min(cpus), json.loads(done.stdout)


# Installed before the click: the time from the click to the card's state "done".
WATCH = """() => {
  const card = document.getElementById('health');
  const t = {start: performance.now(), done: null, steps: 0};
  new MutationObserver(() => {
    t.steps += 1;
    if (t.done === null && card.dataset.state === 'done') t.done = performance.now() - t.start;
  }).observe(card, {attributes: true, attributeFilter: ['data-state', 'data-done']});
  window.__health = t;
  document.getElementById('health-run').click();
}"""


def page_rows(files: dict[str, Path], runs: int, query: str) -> dict[str, list]:
    from playwright.sync_api import sync_playwright
    import build
    build.build()
    server = build.make_server(ROOT / "dist", port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/" + (f"?{query}" if query else "")
    out: dict[str, list] = {key: [] for key in files}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for _ in range(runs):
            for key, path in files.items():
                page = browser.new_page()
                page.goto(url)
                page.wait_for_function("() => document.body.dataset.model === 'demo-moe.safetensors'"
                                       " && document.body.dataset.pending === '0'", timeout=180_000)
                page.set_input_files("#file-input", str(path))
                page.wait_for_function("n => document.body.dataset.model === n && document.body.dataset.pending === '0'",
                                       arg=path.name, timeout=180_000)
                page.click("#tab-health")
                page.wait_for_selector("#health-cost[data-scan-bytes]", state="attached", timeout=180_000)
                page.evaluate(WATCH)
                page.wait_for_function("() => window.__health.done !== null", timeout=600_000, polling=100)
                t = page.evaluate("window.__health")
                card = page.eval_on_selector("#health", "c => ({...c.dataset})")
                out[key].append((t["done"] / 1e3, t["steps"], int(card["bytesRead"]),
                                 page.inner_text("#health-outcome")))
                page.close()
        browser.close()
    server.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--only", choices=("gguf", "bert"), action="append")
    parser.add_argument("--query", default="", help="added to the app's address (e.g. jspi=0)")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1/5 min), {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        files: dict[str, Path] = {}
        if "gguf" in (args.only or ("gguf",)):
            files["gguf"] = Path(tmp) / "smollm-shaped-q8_0.gguf"
            write_gguf(files["gguf"])
        if "bert" in (args.only or ("bert",)):
            files["bert"] = write_bert(Path(tmp) / "bert")
        cli = {}
        for key, path in files.items():
            wall, scan, cpu, report = cli[key] = cli_row(path, args.runs)
            print(f"  {key:4s} {path.stat().st_size / 2**20:6.1f} MiB, {len(report['tensors'])} tensors: "
                  f"CLI health --json {wall:.2f} s (process, best of {args.runs}), scan {scan:.2f} s "
                  f"(open + health in this process, best; CPU {cpu:.2f} s), {report['bytes_read']:,} bytes read")
        page = page_rows(files, args.runs, args.query)
        for key, rows in page.items():
            wall, scan, cpu, report = cli[key]
            seconds = min(r[0] for r in rows)
            assert all(r[2] == report["bytes_read"] for r in rows), (rows, report["bytes_read"])
            print(f"  {key:4s} page Check health -> done {seconds:.2f} s best (runs {', '.join(f'{r[0]:.2f}' for r in rows)}; "
                  f"{rows[0][1]} card updates; {rows[0][2]:,} bytes read, as the CLI) "
                  f"ratio to the scan {seconds / scan:.1f}x (to its CPU time {seconds / cpu:.1f}x), "
                  f"to the CLI process {seconds / wall:.1f}x")
            print(f"       page says: {rows[0][3]}")


if __name__ == "__main__":
    main()
