"""The Summary's "Save as safetensors…": the open checkpoint written in the worker by the CLI's
writer and streamed out, checked in CPython with safetensors against torch.load's tensors:
  - as a download (a browser without the File System Access API: the Blob of chunks), driven
    with page.expect_download();
  - into the file showSaveFilePicker gives (headless Chromium cannot show the real picker: a
    stand-in handle records every write the page makes, in order);
  - a dangerous pickle only after the user confirms (the dialog), its pickle never run.
One page for the module; every request it makes stays on 127.0.0.1."""

import base64

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load

import tensorloupe
from conftest import STEP_TIMEOUT_MS, new_page

# Before the app's scripts: showSaveFilePicker is the stand-in while window.__usePicker is set,
# and absent otherwise (as in Firefox or Safari).
PICKER = """
(() => {
  const fake = async (options) => {
    window.__picked = {name: options.suggestedName, chunks: [], closed: false};
    return {createWritable: async () => ({
      write: async (chunk) => {
        const bytes = chunk instanceof Blob ? new Uint8Array(await chunk.arrayBuffer()) : new Uint8Array(chunk);
        window.__picked.chunks.push(bytes.slice());
      },
      close: async () => { window.__picked.closed = true; },
      abort: async () => { window.__picked.aborted = true; },
    })};
  };
  Object.defineProperty(window, "showSaveFilePicker", {
    configurable: true, get: () => (window.__usePicker ? fake : undefined)});
})();
"""


@pytest.fixture(scope="module")
def saving(browser, server):
    context, app, requests, errors = new_page(browser, server)
    context.add_init_script(PICKER)
    app.goto()
    yield app
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
    assert not requests.foreign(), f"requests outside 127.0.0.1: {requests.foreign()}"


def click_save(app) -> None:
    app.tab("summary")
    app.page.click("#save-safetensors")


def wait_saved(app) -> str:
    app.page.wait_for_selector("#save-note[data-state=saved]", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()
    return app.page.inner_text("#save-note")


def assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name, ref in want.items():
        assert got[name].dtype == ref.dtype and torch.equal(got[name], ref), name


def test_save_as_downloads_the_checkpoint_as_safetensors(saving, files):
    app = saving
    app.open_file(files["torch"])
    with app.page.expect_download() as info:
        click_save(app)
    data = info.value.path().read_bytes()
    assert info.value.suggested_filename == "model.safetensors"
    assert_same(load(data), torch.load(files["torch"], weights_only=True))
    note = wait_saved(app)
    assert note.startswith("downloaded model.safetensors: 4 tensors")
    assert app.page.get_attribute("#save-note", "data-how") == "download"


def test_save_as_writes_into_the_picked_file_chunk_by_chunk(saving, files):
    app = saving
    app.open_file(files["gguf"])
    app.page.evaluate("window.__usePicker = true")
    try:
        click_save(app)
        wait_saved(app)
        picked = app.page.evaluate("""() => ({name: window.__picked.name, closed: window.__picked.closed,
            sizes: window.__picked.chunks.map((c) => c.length),
            data: btoa(window.__picked.chunks.map((c) => Array.from(c, (b) => String.fromCharCode(b)).join("")).join(""))})""")
    finally:
        app.page.evaluate("window.__usePicker = false")
    assert picked["name"] == "tiny-llama.safetensors" and picked["closed"]
    assert len(picked["sizes"]) >= 2          # the header, then the tensors' chunks
    got = load(base64.b64decode(picked["data"]))
    for t in gguf.GGUFReader(files["gguf"]).tensors:   # quantised ones as gguf-py's values
        shape = tuple(int(n) for n in reversed(t.shape))
        want = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type)).reshape(shape)
        assert np.array_equal(got[t.name].float().numpy(), want.astype(np.float32)), t.name
    assert app.page.get_attribute("#save-note", "data-how") == "file"


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
