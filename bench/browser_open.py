"""How fast the browser app starts and opens a big file, in headless Chromium on this machine.

    python bench/browser_open.py [--runs 3] [--keep]

Measures, with the app built and served from 127.0.0.1 like `python build.py serve`:
  * page load -> Python ready, cold (empty profile: every file from the server; the memory
    snapshot is made after this boot, by a second worker once the page is idle), warm (the
    service worker's cache, booted from scratch: ?snapshot=0) and from the memory snapshot the
    first visit stored, each the median of --runs; and a repeat visit's start -> first screen (the
    demo's tensor list shown, the page's own mark), from the snapshot and without it;
  * the reference for the cold figure, in the same run: bare Pyodide (a page whose module worker
    only calls loadPyodide() on the same files, from the same server, empty profile), page load
    -> first Python statement, its cold runs interleaved with the app's; the difference and the
    ratio, and where the app's worker spends the difference (its boot stages, medians);
  * the CLI's imports: `python -X importtime -m tensorloupe.cli inspect FILE` on a small
    safetensors file, the import time of everything the command imports (stdlib included,
    interpreter start-up excluded) and how many tensorloupe modules that is, median of 5;
  * selecting an 8 GiB sparse safetensors file (a Llama-shaped header over holes) -> its tensor
    list on screen, and the bytes that took;
  * renderer memory (resident set of the profile's renderer processes, and the worker's wasm heap);
and, as a same-run reference, opening the same file with the CLI (`tensorloupe inspect --json`,
a fresh process) and with the library in this process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# A Llama-shaped BF16 checkpoint of ~8.8 GB: d 3072, ffn 8192, vocab 128256, 36 layers.
D, FF, VOCAB, LAYERS, KV = 3072, 8192, 128256, 36, 1024


def load_build():
    spec = importlib.util.spec_from_file_location("tensorloupe_build", ROOT / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_sparse_model(path: Path) -> tuple[int, int]:
    """A valid safetensors file whose tensor data are holes: (tensor count, file size)."""
    shapes = [("model.embed_tokens.weight", (VOCAB, D))]
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        shapes += [(f"{p}.input_layernorm.weight", (D,)), (f"{p}.post_attention_layernorm.weight", (D,)),
                   (f"{p}.self_attn.q_proj.weight", (D, D)), (f"{p}.self_attn.k_proj.weight", (KV, D)),
                   (f"{p}.self_attn.v_proj.weight", (KV, D)), (f"{p}.self_attn.o_proj.weight", (D, D)),
                   (f"{p}.mlp.gate_proj.weight", (FF, D)), (f"{p}.mlp.up_proj.weight", (FF, D)),
                   (f"{p}.mlp.down_proj.weight", (D, FF))]
    shapes += [("model.norm.weight", (D,)), ("lm_head.weight", (VOCAB, D))]
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes:
        n = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        f.truncate(8 + len(text) + offset)
    return len(shapes), 8 + len(text) + offset


def renderer_rss(profile: Path) -> int:
    """Resident bytes of the largest renderer process of this profile: the one running the page
    and its worker (Chromium also keeps a spare renderer or two, which are not counted)."""
    largest = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            # Chromium rewrites its children's argv into one space-separated string.
            if b"--type=renderer" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            # Renderers do not carry the profile path; their parent chain leads to our browser.
            if not _descends_from_profile(int(pid), str(profile).encode()):
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    largest = max(largest, int(line.split()[1]) * 1024)
        except (OSError, ValueError):
            continue
    return largest


def _descends_from_profile(pid: int, profile: bytes) -> bool:
    for _ in range(6):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
            if pid <= 1:
                return False
            if b"--user-data-dir=" + profile in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except (OSError, ValueError):
            return False
    return False


# Bare Pyodide, for the cold reference: the same runtime files, booted the same way (a module
# worker), with nothing of ours. Written into the build folder next to the app (scripts in files:
# the server's Content-Security-Policy refuses inline ones).
BARE_PAGE = """<!doctype html><meta charset="utf-8"><title>bare pyodide</title>
<script type="module" src="bare.js"></script><body>"""
BARE_SCRIPT = """const worker = new Worker("./bare-worker.mjs", {type: "module"});
worker.onmessage = ({data}) => {
  document.body.dataset.bootStages = JSON.stringify({...data, worker_start_ms: data.worker_origin - performance.timeOrigin});
  document.body.dataset.readyMs = String(Math.round(performance.now()));
};
"""
BARE_WORKER = """const started = performance.now();
const {loadPyodide} = await import("./pyodide/pyodide.mjs");
const pyodide = await loadPyodide({indexURL: new URL("./pyodide/", import.meta.url).href});
pyodide.runPython("1");
self.postMessage({worker_origin: performance.timeOrigin, runtime_ms: performance.now() - started});
"""


def bare_ready_ms(page) -> float:
    page.wait_for_selector("body[data-ready-ms]", state="attached", timeout=120_000)
    return float(page.evaluate("document.body.dataset.readyMs"))


def stages(page) -> dict:
    """The worker's boot stages (ms since it started; worker_start_ms: after the navigation)."""
    shown = page.evaluate("document.body.dataset.bootStages")
    return {k: v for k, v in json.loads(shown or "{}").items() if k.endswith("_ms")}


def median_stages(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0] if all(k in r for r in runs)}


def cli_imports(path: Path, env: dict) -> tuple[float, int]:
    """What `tensorloupe inspect PATH` spends importing: the cumulative times of the imports made
    after start-up (from runpy's import of the package on), in ms, and the tensorloupe modules."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-m", "tensorloupe.cli", "inspect", str(path)],
                         capture_output=True, text=True, check=True, env=env).stderr
    total, ours, started = 0, set(), False
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].strip()
        started = started or name.startswith("tensorloupe")
        if started and parts[2].startswith(" ") and not parts[2].startswith("  "):
            total += int(parts[1])          # a top-level import: its whole tree
        if name.startswith("tensorloupe"):
            ours.add(name)
    return total / 1000, len(ours)


def ready_ms(page, screens: list | None = None) -> float:
    """Page load -> Python ready; `screens` receives page load -> first screen (the demo's
    tensor list shown: the page's own mark, when it adopted the demo and drew its tree)."""
    page.wait_for_selector("body[data-python=ready]", state="attached", timeout=120_000)
    page.wait_for_function("() => document.body.dataset.model === 'demo-moe.safetensors'", timeout=60_000)
    if screens is not None:
        page.wait_for_selector('.tree-row[data-name]', state="attached", timeout=60_000)
        screens.append(float(page.evaluate("document.body.dataset.openedAt")))
    return float(page.evaluate("document.body.dataset.readyMs"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="page loads per measurement (median)")
    parser.add_argument("--keep", action="store_true", help="keep the 8 GiB sparse file and the build")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    build = load_build()
    work = Path(tempfile.mkdtemp(prefix="tensorloupe-bench-"))
    dist = work / "dist"
    build.build(dist)
    server = build.make_server(dist, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    model = work / "llama-shaped-8gib.safetensors"
    tensors, size = write_sparse_model(model)

    (dist / "bare.html").write_text(BARE_PAGE)
    (dist / "bare.js").write_text(BARE_SCRIPT)
    (dist / "bare-worker.mjs").write_text(BARE_WORKER)

    # Same-run references: the CLI in a fresh process (this checkout's pylib), and the library in this one.
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", str(model), "--json"],
                          capture_output=True, text=True, check=True, env=env)
    cli_s = time.perf_counter() - started
    assert json.loads(done.stdout)["tensor_count"] == tensors
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tensorloupe.cli"], check=True, env=env)
    import_s = time.perf_counter() - started
    small = ROOT / "fixtures" / "out" / "small.safetensors"
    imports = [cli_imports(small, env) for _ in range(5)]
    import_ms, import_modules = statistics.median(t for t, _ in imports), imports[0][1]
    sys.path.insert(0, str(ROOT / "pylib"))
    import tensorloupe
    started = time.perf_counter()
    with tensorloupe.open(model) as ckpt:
        api_s = time.perf_counter() - started
        api_bytes = ckpt.bytes_read()

    results: dict[str, object] = {}
    with sync_playwright() as p:
        cold, bare, cold_stages, bare_stages = [], [], [], []
        for run in range(args.runs):
            # Bare Pyodide first, then the app, each in an empty profile: load drifts alike.
            profile = work / f"profile-bare-{run}"
            context = p.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, args=ARGS)
            page = context.pages[0] if context.pages else context.new_page()
            page.goto(f"{url}bare.html")
            bare.append(bare_ready_ms(page))
            bare_stages.append(stages(page))
            context.close()
            profile = work / f"profile-cold-{run}"
            context = p.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, args=ARGS,
                                                           viewport={"width": 1400, "height": 900})
            page = context.pages[0] if context.pages else context.new_page()
            page.goto(url)
            cold.append(ready_ms(page))
            cold_stages.append(stages(page))
            if run < args.runs - 1:
                context.close()
        # The last cold profile goes on: its service worker now holds the app.
        page.wait_for_function("() => navigator.serviceWorker.controller !== null", timeout=60_000)
        page.wait_for_selector("body[data-offline-ready=true]", state="attached")
        page.wait_for_selector("body[data-snapshot=stored]", state="attached", timeout=120_000)
        warm, restored, warm_screens, repeat_screens = [], [], [], []
        for _ in range(args.runs):
            page.goto(f"{url}?snapshot=0")     # the service worker's files, booted from scratch
            warm.append(ready_ms(page, warm_screens))
        for _ in range(args.runs):
            page.goto(url)                     # the memory snapshot the first visit stored
            restored.append(ready_ms(page, repeat_screens))
            assert page.evaluate("document.body.dataset.boot") == "snapshot"
        rss_idle = renderer_rss(profile)

        page.wait_for_function("() => document.getElementById('status').dataset.state === 'idle'")
        opened_before = int(page.evaluate("Number(document.body.dataset.opened || 0)"))
        started = time.perf_counter()
        page.set_input_files("#file-input", str(model))
        page.wait_for_function(
            "([name, n]) => document.body.dataset.model === name && Number(document.body.dataset.opened) > n",
            arg=[model.name, opened_before], timeout=120_000)
        page.wait_for_selector('.tree-row[data-group="model.layers"]')
        wall_s = time.perf_counter() - started
        in_page_ms = float(page.evaluate("document.body.dataset.openedAt - document.body.dataset.selectedAt"))
        open_bytes = int(page.evaluate("document.body.dataset.openBytes"))
        page.wait_for_function("() => document.getElementById('status').dataset.state === 'idle'", timeout=120_000)
        rss_open = renderer_rss(profile)
        wasm = page.evaluate("window.tensorloupe.request('memory').then(r => r.result.wasm_bytes)")
        js_heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : null")
        shown = page.locator(".tree-row").count()
        context.close()
    server.shutdown()

    results = {
        "python_ready_cold_ms": statistics.median(cold), "python_ready_warm_ms": statistics.median(warm),
        "cold_runs_ms": cold, "warm_runs_ms": warm,
        "bare_pyodide_ready_ms": statistics.median(bare), "bare_runs_ms": bare,
        "cold_over_bare_ms": statistics.median(cold) - statistics.median(bare),
        "cold_stages_ms": median_stages(cold_stages), "bare_stages_ms": median_stages(bare_stages),
        "cli_inspect_import_ms": import_ms, "cli_inspect_modules": import_modules,
        "python_ready_snapshot_ms": statistics.median(restored), "snapshot_runs_ms": restored,
        "first_screen_repeat_ms": statistics.median(repeat_screens), "first_screen_repeat_runs_ms": repeat_screens,
        "first_screen_warm_ms": statistics.median(warm_screens),
        "open_8gib_in_page_ms": in_page_ms, "open_8gib_wall_ms": wall_s * 1000,
        "open_8gib_bytes_read": open_bytes, "file_size": size, "tensors": tensors,
        "renderer_rss_idle": rss_idle, "renderer_rss_after_open": rss_open, "wasm_heap": wasm, "js_heap": js_heap,
        "cli_inspect_ms": cli_s * 1000, "cli_process_startup_ms": import_s * 1000,
        "api_open_ms": api_s * 1000, "api_open_bytes_read": api_bytes,
    }
    mib = 1 << 20
    print(f"tensorloupe browser benchmark  (Chromium headless, {os.cpu_count()} cores; medians of {args.runs})")
    print(f"  page load -> Python ready, cold     {results['python_ready_cold_ms']:8.0f} ms   runs {', '.join(f'{v:.0f}' for v in cold)}")
    print(f"  bare Pyodide, cold (same run)       {results['bare_pyodide_ready_ms']:8.0f} ms   runs {', '.join(f'{v:.0f}' for v in bare)}")
    print(f"    cold app - bare Pyodide           {results['cold_over_bare_ms']:+8.0f} ms   "
          f"(ratio {results['python_ready_cold_ms'] / results['bare_pyodide_ready_ms']:.2f}x)")
    cs, bs = results["cold_stages_ms"], results["bare_stages_ms"]
    if "worker_start_ms" in cs:   # (a checkout whose worker reports no stages shows none)
        print(f"    worker started after the navigation: app {cs['worker_start_ms']:.0f} ms, "
              f"bare {bs['worker_start_ms']:.0f} ms; loadPyodide: app {cs['runtime_ms'] - cs['lookup_ms']:.0f} ms, "
              f"bare {bs['runtime_ms']:.0f} ms")
        # Each stage from the one before it that this checkout's worker reports (older ones also
        # made the snapshot during the boot: preload, snapshot).
        reported = [stage for stage in ("runtime", "library", "preload", "snapshot", "ready") if f"{stage}_ms" in cs]
        print("    app's worker after loadPyodide: " + ", ".join(
            f"{stage} {cs[f'{stage}_ms'] - cs[f'{before}_ms']:.0f} ms" for before, stage in zip(reported, reported[1:]))
            + "  (medians per stage)")
    print(f"  page load -> Python ready, SW cache {results['python_ready_warm_ms']:8.0f} ms   runs {', '.join(f'{v:.0f}' for v in warm)}")
    print(f"  page load -> Python ready, snapshot {results['python_ready_snapshot_ms']:8.0f} ms   runs {', '.join(f'{v:.0f}' for v in restored)}")
    print(f"  repeat visit start -> first screen  {results['first_screen_repeat_ms']:8.0f} ms   "
          f"runs {', '.join(f'{v:.0f}' for v in repeat_screens)}  (the demo's tensor list shown; target <= 1500 ms; "
          f"without the snapshot {results['first_screen_warm_ms']:.0f} ms)")
    print(f"  select 8 GiB file -> tensor list    {in_page_ms:8.0f} ms   (wall {wall_s * 1000:.0f} ms; "
          f"{tensors} tensors, {size / 2**30:.2f} GiB, {open_bytes / 1024:.0f} KiB read, {shown} rows drawn)")
    print(f"  renderer memory                     {rss_idle / mib:8.0f} MiB idle, {rss_open / mib:.0f} MiB after the open "
          f"(wasm heap {wasm / mib if wasm else float('nan'):.0f} MiB, JS heap {js_heap / mib if js_heap else float('nan'):.0f} MiB)")
    print("  same-run reference (this machine, CPython):")
    print(f"    tensorloupe inspect --json (fresh process)  {cli_s * 1000:8.0f} ms  (of which interpreter + import {import_s * 1000:.0f} ms)")
    print(f"    imports of `inspect small.safetensors`     {import_ms:8.0f} ms  "
          f"({import_modules} tensorloupe modules; python -X importtime, median of 5)")
    print(f"    tensorloupe.open() in process               {api_s * 1000:8.1f} ms  ({api_bytes / 1024:.0f} KiB read)")
    print(f"  ratios: browser open / CLI process {in_page_ms / (cli_s * 1000):.2f}x, "
          f"browser open / in-process open {in_page_ms / (api_s * 1000):.1f}x")
    print(json.dumps(results))
    if args.keep:
        print(f"kept {work}")
    else:
        import shutil
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
