"""The Summary's architecture, memory and fits table, and the Tokens tab, against the CLI's JSON:
the page shows what `tensorloupe inspect --json` and `tensorloupe tokens --json` print."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import gguf_files


def cli(*args) -> dict:
    out = subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args), "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
    return gguf_files.write_llama(tmp_path_factory.mktemp("model-page") / "tiny-llama.gguf")


def architecture_rows(page) -> dict:
    return page.eval_on_selector_all(
        "#architecture tr[data-key]",
        "rows => Object.fromEntries(rows.map(r => [r.dataset.key, [r.querySelector('.arch-value').textContent,"
        " r.querySelector('.arch-source').textContent]]))")


def fits_cells(page) -> dict:
    return page.eval_on_selector_all(
        "#fits-table tbody tr",
        "rows => Object.fromEntries(rows.map(r => [r.dataset.gb, Object.fromEntries("
        "[...r.querySelectorAll('td')].map(c => [c.dataset.precision, c.textContent]))]))")


def expected_fits(doc: dict) -> dict:
    return {str(row["memory_gb"]): {c["precision"]: "yes" if c["fits"] else "no" for c in row["cells"]}
            for row in doc["memory"]["fits"]["rows"]}


def test_summary_shows_the_architecture_and_fits_of_the_cli(app, demo_path):
    app.goto()
    page = app.page
    doc = cli("inspect", demo_path)
    rows = architecture_rows(page)
    assert list(rows) == [f["key"] for f in doc["architecture"]["fields"]]
    assert {k: v[1] for k, v in rows.items()} == {f["key"]: f["source"] for f in doc["architecture"]["fields"]}
    assert rows["experts"][0] == "8" and rows["experts_per_token"][0] == "2"
    assert page.inner_text("#parameters-total") == f"{doc['architecture']['parameters']['total']:,}"
    assert fits_cells(page) == expected_fits(doc)
    # the user changes the context: the table is recomputed by the worker, as --context does
    before = page.get_attribute("#fits-table", "data-context")
    page.fill("#fits-context", "32768")
    page.dispatch_event("#fits-context", "change")
    page.wait_for_selector("#fits-table[data-context='32768']")
    assert before == "4096"
    longer = cli("inspect", demo_path, "--context", "32768")
    assert fits_cells(page) == expected_fits(longer)
    kv = page.inner_text("#fits-kv")
    assert "16.00 MiB" in kv and longer["memory"]["fits"]["kv_bytes"] == 16 << 20
    app.screenshot("summary-architecture")


def test_tokens_tab_pages_and_searches_like_the_cli(app, gguf_path):
    app.open_file(gguf_path)
    page = app.page
    doc = cli("inspect", gguf_path)
    assert architecture_rows(page)["layers"] == ["2", "GGUF key llama.block_count"]
    assert fits_cells(page) == expected_fits(doc)
    app.tab("tokens")
    page.wait_for_selector("#token-table tbody tr[data-id='0']")
    first = cli("tokens", gguf_path, "--start", "0", "--count", "50")
    shown = page.eval_on_selector_all("#token-table tbody tr", "rows => rows.map(r => [Number(r.dataset.id),"
                                      " r.querySelector('code').textContent])")
    assert shown == [[t["id"], t["shown"]] for t in first["tokens"]]
    assert page.inner_text("#special-tokens tr[data-special=bos] code") == first["special"]["bos"]["shown"]
    page.click("#token-next")
    page.wait_for_selector("#token-table tbody tr[data-id='50']")
    page.fill("#token-find", "ab")
    page.press("#token-find", "Enter")
    page.wait_for_function("() => document.getElementById('token-heading').textContent.includes('matching')")
    found = cli("tokens", gguf_path, "--find", "ab", "--count", "50")
    ids = page.eval_on_selector_all("#token-table tbody tr", "rows => rows.map(r => Number(r.dataset.id))")
    assert ids == [t["id"] for t in found["matches"]] and ids
    app.screenshot("tokens")
