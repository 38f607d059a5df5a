"""Browser test setup: one build, one server, one Chromium per session; one page per module.

The app is built once into a temporary folder and served by build.py's own Range-capable
threaded server on 127.0.0.1 (the `dist` and `server` fixtures of tests/conftest.py), and driven
with Debian's Chromium through Playwright.
Every request any page or worker makes is recorded; a module fails if one left 127.0.0.1.
Screenshots land in test-artifacts/ (they are what users see: look at them).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 900}
BOOT_TIMEOUT_MS = 90_000
STEP_TIMEOUT_MS = 30_000


@pytest.fixture(scope="session")
def playwright_instance():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    with sync_api.sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright_instance):
    b = playwright_instance.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield b
    b.close()


class Requests:
    """Every URL a context asked for (pages, workers, service workers)."""

    def __init__(self):
        self.urls: list[str] = []

    def attach(self, context) -> None:
        context.on("request", lambda request: self.urls.append(request.url))

    def foreign(self) -> list[str]:
        out = []
        for url in self.urls:
            parts = urlsplit(url)
            if parts.scheme in ("data", "blob", "about"):
                continue  # not network
            if parts.hostname != "127.0.0.1":
                out.append(url)
        return out


class App:
    """The page, driven as a user would, with helpers that wait for DOM state (never for time)."""

    def __init__(self, page, base_url: str):
        self.page = page
        self.base_url = base_url

    # --- waiting -------------------------------------------------------------------------------

    def goto(self) -> None:
        self.page.goto(self.base_url)
        self.wait_ready()

    def wait_ready(self) -> None:
        self.wait_python()
        self.wait_model("demo-moe.safetensors")

    def wait_python(self) -> None:
        self.page.wait_for_selector("body[data-python=ready]", state="attached", timeout=BOOT_TIMEOUT_MS)

    def opened(self) -> int:
        return int(self.page.evaluate("Number(document.body.dataset.opened || 0)"))

    def wait_model(self, name: str, after: int = 0) -> None:
        self.page.wait_for_function(
            "([name, after]) => document.body.dataset.model === name"
            " && Number(document.body.dataset.opened || 0) > after",
            arg=[name, after], timeout=STEP_TIMEOUT_MS)
        self.wait_idle()

    def wait_idle(self) -> None:
        """No request in flight, and the status says Ready."""
        self.page.wait_for_function(
            "() => document.body.dataset.pending === '0'"
            " && document.getElementById('status').dataset.state === 'idle'"
            " && document.getElementById('heatmap').dataset.loading !== 'true'",
            timeout=STEP_TIMEOUT_MS)

    def wait_error(self, after_text: str = "") -> str:
        self.page.wait_for_selector("#error:not([hidden])", timeout=STEP_TIMEOUT_MS)
        return self.page.inner_text("#error")

    # --- opening files -------------------------------------------------------------------------

    def open_with_input(self, *paths: Path) -> None:
        self.page.set_input_files("#file-input", [str(p) for p in paths])

    def open_with_drop(self, *paths: Path) -> None:
        """A real drop event carrying real File objects, dispatched on the page body."""
        self.page.evaluate("""() => {
            const input = document.createElement('input');
            input.type = 'file'; input.multiple = true; input.id = 'test-drop-source'; input.hidden = true;
            document.body.append(input);
        }""")
        self.page.set_input_files("#test-drop-source", [str(p) for p in paths])
        self.page.evaluate("""() => {
            const input = document.getElementById('test-drop-source');
            const data = new DataTransfer();
            for (const file of input.files) data.items.add(file);
            input.remove();
            const target = document.querySelector('main');
            target.dispatchEvent(new DragEvent('dragenter', {bubbles: true, cancelable: true, dataTransfer: data}));
            target.dispatchEvent(new DragEvent('dragover', {bubbles: true, cancelable: true, dataTransfer: data}));
            target.dispatchEvent(new DragEvent('drop', {bubbles: true, cancelable: true, dataTransfer: data}));
        }""")

    def drop_paths(self, *paths: Path) -> None:
        """Files and folders dropped as from the desktop: Chromium's own drag data (through CDP),
        so a folder arrives as a directory entry (webkitGetAsEntry), as when a user drops one."""
        cdp = self.page.context.new_cdp_session(self.page)
        data = {"items": [], "files": [str(p) for p in paths], "dragOperationsMask": 1}
        x, y = VIEWPORT["width"] // 2, VIEWPORT["height"] // 2
        for kind in ("dragEnter", "dragOver", "drop"):
            cdp.send("Input.dispatchDragEvent", {"type": kind, "x": x, "y": y, "data": data})
        cdp.detach()

    def open_file(self, path: Path, how: str = "input") -> None:
        before = self.opened()
        (self.open_with_drop if how == "drop" else self.open_with_input)(path)
        self.wait_model(path.name, before)

    def ensure_open(self, path: Path) -> None:
        """Open `path` unless it is the page's model already (tests can run alone, in any order)."""
        if self.page.evaluate("document.body.dataset.model") != path.name:
            self.open_file(path)

    # --- reading the page ----------------------------------------------------------------------

    def tab(self, name: str) -> None:
        self.page.click(f"#tab-{name}")

    def fact(self, key: str) -> str:
        return self.page.inner_text(f"#panel-summary .fact[data-key={key}] .fact-value")

    def entries(self) -> list[str]:
        """The names in the list of opened files, top to bottom."""
        return self.page.eval_on_selector_all("#file-list .file", "els => els.map(e => e.dataset.file)")

    def bytes_read(self) -> int:
        return int(self.page.get_attribute("#io", "data-bytes-read") or 0)

    def select(self, name: str) -> None:
        """Find a tensor with the filter box and click it, as a user would."""
        self.page.fill("#filter", name)
        row = self.page.locator(f'.tree-row[data-name="{name}"]')
        row.click()
        self.page.wait_for_function(
            "name => document.getElementById('tensor-name').textContent === name", arg=name)
        self.page.wait_for_selector("#stats .stat[data-key=mean]", timeout=STEP_TIMEOUT_MS)
        self.wait_heatmap()

    def wait_heatmap(self) -> None:
        self.page.wait_for_selector("#heatmap[data-seq]", state="attached", timeout=STEP_TIMEOUT_MS)
        self.wait_idle()

    def stats(self, selector: str = "#stats") -> dict:
        items = self.page.eval_on_selector_all(
            f"{selector} .stat", "els => els.map(e => [e.dataset.key, e.dataset.value])")
        return {key: _number(value) for key, value in items}

    def heatmap(self) -> dict:
        return self.page.eval_on_selector("#heatmap", "c => ({...c.dataset, width: c.width, height: c.height})")

    def pixels(self, points: list[tuple[int, int]], selector: str = "#heatmap") -> list[tuple[int, int, int, int]]:
        """RGBA of canvas pixels (canvas coordinates, not CSS pixels)."""
        return [tuple(p) for p in self.page.evaluate("""([selector, points]) => {
            const ctx = document.querySelector(selector).getContext('2d');
            return points.map(([x, y]) => Array.from(ctx.getImageData(x, y, 1, 1).data));
        }""", [selector, points])]

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path


def _number(text: str):
    if text in ("nan", "NaN"):
        return math.nan
    if text in ("inf", "Infinity"):
        return math.inf
    if text in ("-inf", "-Infinity"):
        return -math.inf
    value = float(text)
    return int(value) if value.is_integer() and "." not in text and "e" not in text else value


def new_page(browser, url: str):
    """A fresh context and page for the app at `url`, not yet loaded, recording every request
    and every uncaught error."""
    context = browser.new_context(viewport=VIEWPORT)
    requests = Requests()
    requests.attach(context)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return context, App(page, url), requests, errors


def open_page(browser, url: str):
    """A fresh context and page at the app, Python ready and the demo model open."""
    context, app, requests, errors = new_page(browser, url)
    app.goto()
    return context, app, requests, errors


@pytest.fixture(scope="session")
def page_factory(browser):
    """new_page(browser, url) for tests that load the app at an address of their own."""
    return lambda url: new_page(browser, url)


@pytest.fixture(scope="module")
def app(browser, server):
    context, app, requests, errors = open_page(browser, server)
    yield app
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
    assert not requests.foreign(), f"requests outside 127.0.0.1: {requests.foreign()}"
    assert requests.urls, "no request was recorded at all"


@pytest.fixture(scope="module")
def private_server(dist, serve_directory):
    """A server of its own, which a test may shut down (to prove the app works offline)."""
    httpd, url = serve_directory(dist)
    yield httpd, url
    httpd.server_close()


@pytest.fixture(scope="module")
def persistent(playwright_instance, private_server, tmp_path_factory):
    """A persistent (non-incognito) profile: service workers and installability as for a user."""
    httpd, url = private_server
    profile = tmp_path_factory.mktemp("profile")
    context = playwright_instance.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, args=CHROMIUM_ARGS, viewport=VIEWPORT)
    requests = Requests()
    requests.attach(context)
    page = context.pages[0] if context.pages else context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield App(page, url), context, httpd, requests
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
    assert not requests.foreign(), f"requests outside 127.0.0.1: {requests.foreign()}"


# --- files the tests open ---------------------------------------------------------------------------

SPARSE_SHAPE = (65536, 16384)        # F32: exactly 4 GiB of tensor data, all holes on disk


def write_sparse_safetensors(path: Path, shape=SPARSE_SHAPE, dtype: str = "F32", itemsize: int = 4) -> Path:
    """A valid safetensors file of >4 GiB whose data is a sparse hole (zeros): only the header is real."""
    nbytes = math.prod(shape) * itemsize
    header = json.dumps({"__metadata__": {"purpose": "sparse test file"},
                         "huge.weight": {"dtype": dtype, "shape": list(shape), "data_offsets": [0, nbytes]},
                         "tail.bias": {"dtype": dtype, "shape": [16], "data_offsets": [nbytes, nbytes + 16 * itemsize]}},
                        separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + nbytes + 16 * itemsize)
    return path


class _Evil:
    """Pickled by torch.save as a call to os.system: what a hostile checkpoint looks like."""

    def __reduce__(self):
        return (os.system, ("echo this must never run",))


@pytest.fixture(scope="session")
def files(tmp_path_factory) -> dict[str, Path]:
    import numpy as np
    import torch
    from safetensors.numpy import save_file

    import gguf_files  # fixtures/ is on sys.path (tests/conftest.py)

    out = tmp_path_factory.mktemp("files")
    rng = np.random.default_rng(20240611)
    special = rng.normal(0, 1, (16, 16)).astype(np.float32)
    special[0, 0], special[0, 1], special[0, 2] = np.nan, np.inf, -np.inf
    tensors = {
        "wide.weight": rng.normal(0, 0.02, (2048, 4096)).astype(np.float32),
        "special.weight": special,
        "stacked.experts": rng.normal(0, 1, (4, 64, 48)).astype(np.float32),
        "half.weight": rng.normal(0, 1, (96, 128)).astype(np.float16),
    }
    paths = {"safetensors": out / "browser.safetensors"}
    save_file(tensors, str(paths["safetensors"]), metadata={"purpose": "browser tests"})

    g = torch.Generator().manual_seed(7)
    paths["torch"] = out / "model.pt"
    torch.save({"encoder.layer.0.weight": torch.randn(64, 32, generator=g),
                "encoder.layer.0.bias": torch.randn(64, generator=g),
                "encoder.layer.1.weight": torch.randn(32, 64, generator=g).to(torch.bfloat16),
                "head.weight": torch.randn(10, 32, generator=g).half()}, paths["torch"])
    paths["hostile"] = out / "hostile.pt"
    torch.save({"weight": torch.randn(8, 4, generator=g), "payload": _Evil()}, paths["hostile"])

    paths["gguf"] = gguf_files.write_llama(out / "tiny-llama.gguf")
    paths["gguf_moe"] = gguf_files.write_moe(out / "tiny-moe.gguf")
    paths["sparse"] = write_sparse_safetensors(out / "sparse-4gib.safetensors")
    paths["lfs"] = out / "lfs-pointer.safetensors"
    paths["lfs"].write_bytes(b"version https://git-lfs.github.com/spec/v1\n"
                             b"oid sha256:" + b"cd" * 32 + b"\nsize 5368709120\n")
    whole = paths["safetensors"].read_bytes()
    paths["truncated"] = out / "truncated.safetensors"
    paths["truncated"].write_bytes(whole[:len(whole) // 2])
    paths["unknown"] = out / "notes.dat"
    paths["unknown"].write_bytes(bytes(range(256)) * 8)
    return paths


@pytest.fixture(scope="session")
def shards(tmp_path_factory) -> dict[str, Path]:
    """Model folders (fixtures/shard_files.py): a sharded MoE with its index and config.json, and a
    split GGUF."""
    import shard_files
    return shard_files.write_all(tmp_path_factory.mktemp("shards"))
