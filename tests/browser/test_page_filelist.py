"""The list of opened files: entries can be closed, failed opens fold away, and two entries of
the same name say where each came from."""

import numpy as np
from safetensors.numpy import save_file

from conftest import STEP_TIMEOUT_MS


def test_same_named_entries_are_told_apart_and_can_be_closed(app, tmp_path):
    page = app.page
    paths = []
    for i, folder in enumerate(("a", "b")):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "model.safetensors"
        save_file({f"w{i}": np.full(4, i, np.float32)}, str(path))
        paths.append(path)
        app.open_file(path)
    entries = page.locator('#file-list li.entry:has(.file[data-file="model.safetensors"])')
    assert entries.count() == 2
    wheres = [entries.nth(i).locator(".entry-where").inner_text() for i in range(2)]
    assert len(set(wheres)) == 2 and all(w.startswith("drop ") for w in wheres)
    # Close the open one: it leaves the list and the demo is shown again.
    before = app.opened()
    page.click('#file-list li.entry:has(.file.current) .entry-close')
    app.wait_model("demo-moe.safetensors", before)
    assert entries.count() == 1
    assert page.locator('#file-list .file[data-file="model.safetensors"] .entry-where').count() == 0
    page.click('#file-list li.entry:has(.file[data-file="model.safetensors"]) .entry-close')
    assert entries.count() == 0


def test_failed_opens_fold_away(app, files):
    page = app.page
    app.open_with_input(files["unknown"])
    page.wait_for_selector("#error:not([hidden])", timeout=STEP_TIMEOUT_MS)
    page.click("#error-close")
    page.wait_for_function("() => document.body.dataset.pending === '0'")
    assert page.inner_text("#failed-files summary") == "1 could not be opened"
    assert page.get_attribute("#failed-files", "open") is None            # folded
    assert not page.is_visible('#failed-files .file[data-file="notes.dat"]')
    page.click("#failed-files summary")
    assert page.is_visible('#failed-files .file[data-file="notes.dat"]')
