"""The page's "Save as safetensors…" on a big file, in headless Chromium on this machine.

    python3 bench/save_page.py [--mib 256 [--mib 1024 ...]]

Writes a safetensors file of about --mib MiB (bf16 matrices of 8 MiB each), builds and serves the
app as `build.py serve` does, opens the file in the page and saves it as a download twice: streamed
through the service worker (the path a page it controls takes) and as a Blob of the worker's
chunks (the fallback where none controls it), timing click -> download complete. Every 50 ms it
polls the resident set of the page's renderer process (the page, its worker and the service
worker) and the sum over every Chromium process of the profile (the browser process keeps a Blob's
parts), for their peaks against the same figures just before the click. The same run converts the
same file with the CLI, for reference; each download is checked equal to the CLI's output, byte for
byte, before anything is said. (Headless Chromium has no file picker to drive.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pylib"))
sys.path.insert(0, str(ROOT / "bench"))

from browser_open import ARGS, CHROMIUM, _descends_from_profile, load_build, renderer_rss  # noqa: E402

# Before the app's scripts: no file picker (as in Firefox or Safari; headless Chromium has one but
# cannot show it), and window.__noServiceWorker hides the service worker's control of the page.
INIT = """
Object.defineProperty(window, "showSaveFilePicker", {value: undefined});
Object.defineProperty(window, "showDirectoryPicker", {value: undefined});
const controller = Object.getOwnPropertyDescriptor(ServiceWorkerContainer.prototype, "controller");
Object.defineProperty(ServiceWorkerContainer.prototype, "controller", {
  configurable: true, get() { return window.__noServiceWorker ? null : controller.get.call(this); }});
"""
MIB = 1 << 20


def write_model(path: Path, mib: int) -> Path:
    import torch
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(28)
    tensors = {f"layers.{i}.weight": torch.randn(2048, 2048, generator=g).to(torch.bfloat16)
               for i in range(max(1, mib // 8))}
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def chromium_rss(profile: Path) -> int:
    """Resident bytes of every process of this profile's Chromium, summed (shared pages count
    once per process: an upper bound)."""
    total = 0
    mark = b"--user-data-dir=" + str(profile).encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if mark not in Path(f"/proc/{pid}/cmdline").read_bytes() and \
                    not _descends_from_profile(int(pid), str(profile).encode()):
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue
    return total


def save_once(page, profile: Path, src: Path, timeout: int) -> tuple[Path, float, list[int], list[int]]:
    """Open `src`, save it; (download path, seconds, [renderer before, peak], [all before, peak])."""
    before = int(page.evaluate("Number(document.body.dataset.opened || 0)"))
    page.set_input_files("#file-input", [str(src)])
    page.wait_for_function("([n, b]) => document.body.dataset.model === n && "
                           "Number(document.body.dataset.opened || 0) > b",
                           arg=[src.name, before], timeout=120_000)
    page.click("#tab-summary")
    renderer, every = [renderer_rss(profile)] * 2, [chromium_rss(profile)] * 2
    polling = [True]

    def poll():
        while polling[0]:
            renderer[1] = max(renderer[1], renderer_rss(profile))
            every[1] = max(every[1], chromium_rss(profile))
            time.sleep(0.05)
    thread = threading.Thread(target=poll)
    thread.start()
    start = time.perf_counter()
    try:
        with page.expect_download(timeout=timeout * 1000) as info:
            page.click("#save-safetensors")
        path = info.value.path()
        page.wait_for_selector("#save-note[data-state=saved]", state="attached", timeout=timeout * 1000)
    except Exception:
        state = page.evaluate("""() => ({note: document.getElementById('save-note')?.textContent,
            pending: document.body.dataset.pending, error: document.getElementById('error').textContent})""")
        raise SystemExit(f"no download: the page says {state}")
    finally:
        polling[0] = False
        thread.join()
    return path, time.perf_counter() - start, renderer, every


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, action="append", help="file sizes (default 256)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds a save may take")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright
    build = load_build()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dist = tmp / "dist"
        build.build(dist)
        server = build.make_server(dist, port=0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        profile = tmp / "profile"
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM,
                                                           args=ARGS, accept_downloads=True)
            context.add_init_script(INIT)
            page = context.pages[0] if context.pages else context.new_page()
            page.goto(url)
            page.wait_for_selector("body[data-python=ready]", state="attached", timeout=180_000)
            page.wait_for_function("() => navigator.serviceWorker.controller !== null", timeout=120_000)
            for mib in args.mib or [256]:
                src = write_model(tmp / f"big-{mib}.safetensors", mib)
                cli_out = tmp / f"big-{mib}-cli.safetensors"
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "tensorloupe.cli", "convert", str(src), str(cli_out)],
                               check=True, capture_output=True, env={"PYTHONPATH": str(ROOT / "pylib")})
                cli_s = time.perf_counter() - start
                size = cli_out.stat().st_size
                for how in ("stream", "blob"):
                    page.evaluate(f"window.__noServiceWorker = {'true' if how == 'blob' else 'false'}")
                    path, page_s, renderer, every = save_once(page, profile, src, args.timeout)
                    said = page.get_attribute("#save-note", "data-how")
                    same = path.read_bytes() == cli_out.read_bytes()
                    print(f"{src.name} ({src.stat().st_size / MIB:,.0f} MiB) -> {size / MIB:,.0f} MiB, {how} "
                          f"(page says {said}): page {page_s:.1f} s ({size / MIB / page_s:,.0f} MiB/s), "
                          f"CLI {cli_s:.1f} s; renderer RSS {renderer[0] / MIB:,.0f} MiB before, peak "
                          f"{renderer[1] / MIB:,.0f} MiB (+{(renderer[1] - renderer[0]) / MIB:,.0f}); all "
                          f"Chromium processes {every[0] / MIB:,.0f} MiB before, peak {every[1] / MIB:,.0f} MiB "
                          f"(+{(every[1] - every[0]) / MIB:,.0f}); download equals the CLI's file: {same}",
                          flush=True)
                    if not same or said != how:
                        raise SystemExit("the page's file differs from the CLI's, or took another path")
                    path.unlink()
                cli_out.unlink()
                src.unlink()
            context.close()
        server.shutdown()


if __name__ == "__main__":
    main()
