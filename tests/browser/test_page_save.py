"""The Summary's "Save as safetensors…": the open checkpoint written in the worker by the CLI's
engine and streamed out, checked in CPython with safetensors against torch.load's tensors, gguf-py's
values, or the bytes `tensorloupe convert|extract|prune` writes for the same options:
  - as a download streamed by the service worker (flat memory), driven with page.expect_download();
    and as a Blob of chunks where no service worker controls the page;
  - into the file showSaveFilePicker gives, and a shard set into the folder showDirectoryPicker
    gives (headless Chromium cannot show the real pickers: stand-in handles record every write);
  - each option (dtype, a regex, Hugging Face names, experts to drop);
  - cancelled as soon as the first progress shows: nothing is written, the download fails;
  - a dangerous pickle only after the user confirms (the dialog), its pickle never run.
One page for the module; every request it makes stays on 127.0.0.1."""

import base64
import json
import re

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load

import tensorloupe
from conftest import STEP_TIMEOUT_MS, new_page
from page_checks import cancel_at_the_first_progress
from tensorloupe.cli import main

# Before the app's scripts: showSaveFilePicker / showDirectoryPicker are stand-ins while
# window.__usePicker / __useFolder are set, and absent otherwise (as in Firefox or Safari);
# window.__noServiceWorker hides the service worker (a page it does not control).
STAND_INS = """
(() => {
  const bytesOf = async (chunk) => (chunk instanceof Blob ? new Uint8Array(await chunk.arrayBuffer()) : new Uint8Array(chunk)).slice();
  const fake = async (options) => {
    window.__picked = {name: options.suggestedName, chunks: [], closed: false};
    return {createWritable: async () => ({
      write: async (chunk) => { window.__picked.chunks.push(await bytesOf(chunk)); },
      close: async () => { window.__picked.closed = true; },
      abort: async () => { window.__picked.aborted = true; },
    })};
  };
  const folder = async () => {
    window.__folder = {files: {}, removed: [], aborted: 0};
    return {
      getFileHandle: async (name) => ({createWritable: async () => {
        const chunks = [];
        return {write: async (chunk) => { chunks.push(await bytesOf(chunk)); },
                close: async () => { window.__folder.files[name] = chunks; },
                abort: async () => { window.__folder.aborted += 1; }};
      }}),
      removeEntry: async (name) => { delete window.__folder.files[name]; window.__folder.removed.push(name); },
    };
  };
  Object.defineProperty(window, "showSaveFilePicker", {
    configurable: true, get: () => (window.__usePicker ? fake : undefined)});
  Object.defineProperty(window, "showDirectoryPicker", {
    configurable: true, get: () => (window.__useFolder ? folder : undefined)});
  const controller = Object.getOwnPropertyDescriptor(ServiceWorkerContainer.prototype, "controller");
  Object.defineProperty(ServiceWorkerContainer.prototype, "controller", {
    configurable: true, get() { return window.__noServiceWorker ? null : controller.get.call(this); }});
})();
"""
JOINED = "(chunks) => btoa(chunks.map((c) => Array.from(c, (b) => String.fromCharCode(b)).join('')).join(''))"


@pytest.fixture(scope="module")
def saving(browser, server):
    context, app, requests, errors = new_page(browser, server)
    context.add_init_script(STAND_INS)
    app.goto()
    app.page.wait_for_function("() => navigator.serviceWorker.controller !== null", timeout=60_000)
    yield app
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
    assert not requests.foreign(), f"requests outside 127.0.0.1: {requests.foreign()}"


@pytest.fixture
def flags(saving):
    """Set page flags for one test (before the file is opened: the form reads them)."""
    def set_flags(**values):
        for name, value in values.items():
            saving.page.evaluate(f"window.__{name} = {json.dumps(value)}")
    yield set_flags
    saving.page.evaluate("window.__usePicker = window.__useFolder = window.__noServiceWorker = false")


def click_save(app, **fields) -> None:
    app.tab("summary")
    for selector, value in fields.items():
        if isinstance(value, bool):
            app.page.set_checked(f"#save-{selector}", value)
        elif selector == "dtype":
            app.page.select_option("#save-dtype", value)
        else:
            app.page.fill(f"#save-{selector}", value)
    app.page.click("#save-safetensors")


def wait_saved(app) -> str:
    app.page.wait_for_selector("#save-note[data-state=saved]", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()
    return app.page.inner_text("#save-note")


def downloaded(app, **fields) -> bytes:
    with app.page.expect_download(timeout=STEP_TIMEOUT_MS) as info:
        click_save(app, **fields)
    data = info.value.path().read_bytes()
    wait_saved(app)
    return data


def folder_files(app) -> dict[str, bytes]:
    got = app.page.evaluate(f"""() => Object.fromEntries(Object.entries(window.__folder.files)
        .map(([name, chunks]) => [name, ({JOINED})(chunks)]))""")
    return {name: base64.b64decode(data) for name, data in got.items()}


def cli(*args) -> None:
    assert main([str(a) for a in args]) == 0


def assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name, ref in want.items():
        assert got[name].dtype == ref.dtype and torch.equal(got[name], ref), name


def test_save_as_streams_a_download_through_the_service_worker(saving, files, flags):
    app = saving
    app.open_file(files["torch"])
    with app.page.expect_download() as info:
        click_save(app)
    data = info.value.path().read_bytes()
    assert info.value.suggested_filename == "model.safetensors"
    assert_same(load(data), torch.load(files["torch"], weights_only=True))
    note = wait_saved(app)
    assert note.startswith("downloaded model.safetensors: 4 tensors")
    assert "(streamed by the service worker)" in note
    assert app.page.get_attribute("#save-note", "data-how") == "stream"


def test_without_a_service_worker_the_download_is_a_blob(saving, files, flags):
    app = saving
    flags(noServiceWorker=True)
    app.open_file(files["torch"])
    data = downloaded(app)
    assert_same(load(data), torch.load(files["torch"], weights_only=True))
    assert "no service worker controls the page" in app.page.inner_text("#save-note")
    assert app.page.get_attribute("#save-note", "data-how") == "blob"


def test_save_as_writes_into_the_picked_file_chunk_by_chunk(saving, files, flags):
    app = saving
    flags(usePicker=True)
    app.open_file(files["gguf"])
    click_save(app)
    wait_saved(app)
    picked = app.page.evaluate(f"""() => ({{name: window.__picked.name, closed: window.__picked.closed,
        sizes: window.__picked.chunks.map((c) => c.length), data: ({JOINED})(window.__picked.chunks)}})""")
    assert picked["name"] == "tiny-llama.safetensors" and picked["closed"]
    data = base64.b64decode(picked["data"])
    assert sum(picked["sizes"]) == len(data)      # written as the chunks came
    got = load(data)
    for t in gguf.GGUFReader(files["gguf"]).tensors:   # quantised ones as gguf-py's values
        shape = tuple(int(n) for n in reversed(t.shape))
        want = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type)).reshape(shape)
        assert np.array_equal(got[t.name].float().numpy(), want.astype(np.float32)), t.name
    assert app.page.get_attribute("#save-note", "data-how") == "file"


def test_a_shard_set_goes_into_the_picked_folder_as_the_cli_writes_it(saving, files, flags, tmp_path):
    app = saving
    flags(useFolder=True)
    app.open_file(files["gguf"])
    click_save(app, **{"shard-size": "40KB"})
    note = wait_saved(app)
    got = folder_files(app)
    cli("convert", files["gguf"], tmp_path / "set", "--max-shard-size", "40KB")
    want = {p.name: p.read_bytes() for p in (tmp_path / "set").iterdir()}
    assert len(want) > 2 and got == want
    assert note.startswith(f"saved into the folder {len(want)} files")
    assert app.page.get_attribute("#save-note", "data-how") == "folder"


@pytest.mark.parametrize("fields, command", [
    ({"dtype": "F16", "tensors": r"blk\.0\."}, ["extract", "--match", r"blk\.0\.", "--dtype", "F16"]),
    ({"hf-names": True}, ["convert", "--hf-names"]),
], ids=["dtype-and-regex", "hf-names"])
def test_each_option_writes_the_bytes_the_cli_writes(saving, files, flags, tmp_path, fields, command):
    app = saving
    app.open_file(files["gguf"])
    fields = {"match" if k == "tensors" else k: v for k, v in fields.items()}
    data = downloaded(app, **fields)
    cli(command[0], files["gguf"], tmp_path / "cli.safetensors", *command[1:])
    assert data == (tmp_path / "cli.safetensors").read_bytes()


def open_into_a_folder(app, flags, path, tab: str) -> None:
    """Open `path` with the folder picker there (the form reads it), and show `tab`."""
    flags(useFolder=True)
    app.open_file(path)
    app.tab(tab)


def test_experts_typed_are_dropped_as_prune_drops_them(saving, demo_path, flags, tmp_path):
    app = saving
    open_into_a_folder(app, flags, demo_path, "summary")
    app.page.wait_for_selector("#save-drop:not([disabled])", timeout=STEP_TIMEOUT_MS)
    click_save(app, drop="0:1,0:2")
    assert "experts dropped: layer 0: 1, 2" in wait_saved(app)
    assert_pruned_as_cli(app, demo_path, tmp_path, "--drop-experts", "0:1,0:2")


def assert_pruned_as_cli(app, source, tmp_path, *options) -> None:
    """The folder the page wrote holds the weights `prune` writes with these options."""
    cli("prune", source, tmp_path / "cli", *options)
    assert folder_files(app) == {"model.safetensors": (tmp_path / "cli" / "model.safetensors").read_bytes()}


def test_the_experts_tab_s_recommendation_is_dropped_as_prune_recommended_drops_it(saving, demo_path, flags, tmp_path):
    app = saving
    open_into_a_folder(app, flags, demo_path, "moe")
    app.page.wait_for_selector("#moe-cost[data-total-bytes]", timeout=STEP_TIMEOUT_MS)
    app.page.click("#moe-run")
    app.page.wait_for_selector("#redundancy[data-state=done]", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()
    app.tab("summary")
    app.page.click("#save-recommended")
    app.page.wait_for_function("() => document.getElementById('save-drop').value !== ''")
    assert app.page.input_value("#save-drop") == ",".join(f"{layer}:{e}" for layer in range(4) for e in (4, 5, 6, 7))
    app.page.click("#save-safetensors")
    wait_saved(app)
    assert_pruned_as_cli(app, demo_path, tmp_path, "--recommended")


def test_a_gguf_without_experts_cannot_be_pruned(saving, files):
    app = saving
    app.open_file(files["gguf"])
    app.tab("summary")
    app.page.wait_for_function("() => document.body.dataset.pending === '0'")
    assert app.page.is_disabled("#save-drop") and app.page.is_disabled("#save-recommended")
    assert not app.page.is_disabled("#save-hf-names")


def test_cancel_during_a_streamed_download_fails_it_and_writes_nothing(saving, files, flags):
    app = saving
    app.open_file(files["safetensors"])      # 32 MiB of float32: several chunks
    app.tab("summary")
    with app.page.expect_download(timeout=STEP_TIMEOUT_MS) as info:
        cancel_at_the_first_progress(app.page, "save-note", "progress", "save-safetensors", "save-cancel")
    assert info.value.failure() is not None   # the browser marks the download failed
    app.page.wait_for_selector("#save-note[data-state=cancelled]", timeout=STEP_TIMEOUT_MS)
    assert app.page.inner_text("#save-note") == "cancelled, nothing written"
    app.wait_idle()
    # the worker's write is over: the next save starts afresh and completes
    with tensorloupe.open(files["safetensors"]) as ckpt:
        want = {t.name: ckpt.tensor(t.name).numpy() for t in ckpt.tensors}
    got = load(downloaded(app))
    assert sorted(got) == sorted(want)


def test_cancel_during_a_folder_save_removes_the_files_it_wrote(saving, files, flags):
    app = saving
    flags(useFolder=True)
    app.open_file(files["safetensors"])
    app.tab("summary")
    app.page.fill("#save-shard-size", "9MB")   # several shards, the first closed early
    cancel_at_the_first_progress(app.page, "save-note", "progress", "save-safetensors", "save-cancel")
    app.page.wait_for_selector("#save-note[data-state=cancelled]", timeout=STEP_TIMEOUT_MS)
    left = app.page.evaluate("() => ({files: Object.keys(window.__folder.files), aborted: window.__folder.aborted})")
    assert left == {"files": [], "aborted": 1}


def serve_failing(context, url: str, data: bytes, broken: tuple[int, int]) -> None:
    """`url` answered from `data` with Range, as a server does; a range that reaches into
    `broken` gets a 500 (a server that fails on part of a file)."""
    def handle(route, request):
        found = re.fullmatch(r"bytes=(\d+)-(\d*)", request.headers.get("range") or "")
        if not found:
            return route.fulfill(status=200, body=data, headers={"Accept-Ranges": "bytes"})
        a = int(found[1])
        b = min(int(found[2]) if found[2] else len(data) - 1, len(data) - 1)
        if a < broken[1] and b >= broken[0]:
            return route.fulfill(status=500, body="storage error")
        route.fulfill(status=206, body=data[a:b + 1], headers={
            "Accept-Ranges": "bytes", "Content-Range": f"bytes {a}-{b}/{len(data)}",
            "Content-Type": "application/octet-stream"})
    context.route(url, handle)


def test_a_tensor_the_server_fails_to_send_is_skipped_and_the_save_starts_again(saving, tmp_path):
    from safetensors.torch import save as save_bytes
    app = saving
    g = torch.Generator().manual_seed(9)
    tensors = {"a.first": torch.randn(256, 512, generator=g), "b.broken": torch.randn(256, 512, generator=g),
               "c.last": torch.randn(64, generator=g)}
    data = save_bytes(tensors)
    start = 8 + int.from_bytes(data[:8], "little")
    lo, hi = (start + o for o in json.loads(data[8:start])["b.broken"]["data_offsets"])
    url = app.base_url + "files/failing.safetensors"
    serve_failing(app.page.context, url, data, (lo, hi))
    before = app.opened()
    app.page.fill("#url-input", url)
    app.page.press("#url-input", "Enter")
    app.wait_model("failing.safetensors", before)
    downloads = []

    def keep(download):
        downloads.append(download)
    app.page.on("download", keep)
    click_save(app)
    wait_saved(app)
    app.page.remove_listener("download", keep)
    # the stream that met the failure was aborted (its header was sent: it cannot be mended);
    # the second is the file without the tensor
    assert len(downloads) == 2 and downloads[0].failure() is not None
    written = downloads[1].path().read_bytes()
    got = load(written)
    assert sorted(got) == ["a.first", "c.last"]
    for name in got:
        assert torch.equal(got[name], tensors[name]), name
    n = int.from_bytes(written[:8], "little")
    skipped = json.loads(written[8:8 + n])["__metadata__"]["skipped"]
    assert skipped.startswith('{"b.broken": "its bytes could not be read')
    assert "skipped b.broken (its bytes could not be read" in app.page.inner_text("#save-note")


def test_a_dangerous_file_is_saved_only_after_the_user_confirms(saving, files):
    app = saving
    app.open_file(files["hostile"])
    answers = iter([False, True])
    app.page.on("dialog", lambda dialog: dialog.accept() if next(answers) else dialog.dismiss())
    click_save(app)
    app.page.wait_for_selector("#save-note[data-state=idle]", state="attached", timeout=STEP_TIMEOUT_MS)
    with app.page.expect_download() as info:
        app.page.click("#save-safetensors")
    data = info.value.path().read_bytes()
    got = load(data)
    assert list(got) == ["weight"]
    # torch.load of this file would run its payload: the library's own reading is the reference
    with tensorloupe.open(files["hostile"]) as ckpt:
        assert np.array_equal(got["weight"].numpy(), ckpt.tensor("weight").numpy())
    wait_saved(app)
