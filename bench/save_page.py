"""The page's "Save as safetensors…" on a big file, in headless Chromium on this machine.

    python3 bench/save_page.py [--mib 256]

Writes a safetensors file of about --mib MiB (bf16 matrices of 8 MiB each, one .pt of the same
tensors beside it), builds and serves the app as `build.py serve` does, opens each file in the
page and saves it through the download path (Blob of the worker's chunks; headless Chromium has
no file picker to drive), timing click -> download complete, and polling the resident set of the
page's renderer process (the page and its worker) every 50 ms for its peak, against the same
figure just before the click. The same run converts the same file with the CLI, for reference.
Each download is checked equal to the CLI's output, byte for byte, before anything is said.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pylib"))
sys.path.insert(0, str(ROOT / "bench"))

from browser_open import ARGS, CHROMIUM, load_build, renderer_rss  # noqa: E402


def write_model(folder: Path, mib: int) -> list[Path]:
    import torch
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(28)
    tensors = {f"layers.{i}.weight": torch.randn(2048, 2048, generator=g).to(torch.bfloat16)
               for i in range(max(1, mib // 8))}
    save_file(tensors, str(folder / "big.safetensors"), metadata={"format": "pt"})
    torch.save(tensors, folder / "big.pt")
    return [folder / "big.safetensors", folder / "big.pt"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--timeout", type=int, default=600, help="seconds a save may take")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright
    build = load_build()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sources = write_model(tmp, args.mib)
        dist = tmp / "dist"
        build.build(dist)
        server = build.make_server(dist, port=0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        profile = tmp / "profile"
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM,
                                                           args=ARGS, accept_downloads=True)
            # as in a browser without the File System Access API: headless Chromium has the
            # picker but cannot show it (it rejects at once), so the download path is measured
            context.add_init_script("Object.defineProperty(window, 'showSaveFilePicker', {value: undefined})")
            page = context.pages[0] if context.pages else context.new_page()
            page.goto(url)
            page.wait_for_selector("body[data-python=ready]", state="attached", timeout=180_000)
            for src in sources:
                cli_out = tmp / f"{src.stem}-cli.safetensors"
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "tensorloupe.cli", "convert", str(src), str(cli_out)],
                               check=True, capture_output=True, env={"PYTHONPATH": str(ROOT / "pylib")})
                cli_s = time.perf_counter() - start
                before = int(page.evaluate("Number(document.body.dataset.opened || 0)"))
                page.set_input_files("#file-input", [str(src)])
                page.wait_for_function("([n, b]) => document.body.dataset.model === n && "
                                       "Number(document.body.dataset.opened || 0) > b",
                                       arg=[src.name, before], timeout=120_000)
                page.click("#tab-summary")
                idle = renderer_rss(profile)
                peak, polling = [idle], [True]

                def poll():
                    while polling[0]:
                        peak[0] = max(peak[0], renderer_rss(profile))
                        time.sleep(0.05)
                thread = threading.Thread(target=poll)
                thread.start()
                start = time.perf_counter()
                try:
                    with page.expect_download(timeout=args.timeout * 1000) as info:
                        page.click("#save-safetensors")
                    path = info.value.path()
                except Exception:
                    polling[0] = False
                    state = page.evaluate("""() => ({note: document.getElementById('save-note')?.dataset.state,
                        pending: document.body.dataset.pending, status: document.getElementById('status').textContent,
                        error: document.getElementById('error').textContent})""")
                    raise SystemExit(f"no download: the page says {state}")
                page_s = time.perf_counter() - start
                polling[0] = False
                thread.join()
                same = path.read_bytes() == cli_out.read_bytes()
                size = cli_out.stat().st_size
                print(f"{src.name} ({src.stat().st_size / 2**20:,.0f} MiB) -> {size / 2**20:,.0f} MiB: "
                      f"page {page_s:.1f} s ({size / 2**20 / page_s:,.0f} MiB/s), CLI {cli_s:.1f} s; "
                      f"renderer RSS {idle / 2**20:,.0f} MiB before, peak {peak[0] / 2**20:,.0f} MiB "
                      f"(+{(peak[0] - idle) / 2**20:,.0f} MiB); download equals the CLI's file: {same}")
                if not same:
                    raise SystemExit("the page's file differs from the CLI's")
            context.close()
        server.shutdown()


if __name__ == "__main__":
    main()
