"""Bytes that are two files (fixtures/polyglot_files.py) in the page: a file shown as safetensors
or GGUF that torch.load would unpickle gets the danger card, naming both readings and the global
torch would run, with the same verdict as `tensorloupe inspect --json`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import polyglot_files

from conftest import STEP_TIMEOUT_MS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def polyglots(tmp_path_factory):
    written = polyglot_files.write_all(tmp_path_factory.mktemp("polyglot-page"))
    return {p.name: p for p in written.values()}


@pytest.mark.parametrize("name, shown, path", [("safetensors_pickle.bin", "safetensors", "pickle"),
                                               ("gguf_pickle.gguf", "gguf", "pickle"),
                                               ("tar_pickle_name.pt", "pytorch-tar", None)])
def test_the_page_names_what_torch_would_run(app, polyglots, name, shown, path):
    done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", "--json",
                           str(polyglots[name])], capture_output=True, text=True, cwd=ROOT,
                          check=True, env={"PYTHONPATH": str(ROOT / "pylib"), "PATH": "/usr/bin:/bin"})
    doc = json.loads(done.stdout)
    before = app.opened()
    app.open_with_input(polyglots[name])
    app.wait_model(name, before)
    app.tab("summary")
    assert app.fact("format") == doc["format"] == shown
    card = app.page.locator("#safety")
    card.wait_for(timeout=STEP_TIMEOUT_MS)
    assert "danger" in card.get_attribute("class")
    assert card.get_attribute("data-dangerous") == str(len(doc["extras"]["safety"]["dangerous"])) == "1"
    assert card.get_attribute("data-torch-reading") == (path or "")
    text = card.inner_text()
    assert "os.system" in text and polyglot_files.CANARY in text     # the call, never made
    if path:
        assert "These bytes are two files: torch.load reads them as pickle, not as" in text
        assert f"shown here as {shown}" in text
