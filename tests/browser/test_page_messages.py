"""What the page says when something is off: a file cut short says "truncated", the file is named
once, a bad regex says "invalid regex", a vocab-only GGUF says it has no tensors, the MoE
threshold refuses values outside -1..1, and the URL box takes one URL per line."""

import pytest
from gguf import GGUFWriter

from conftest import STEP_TIMEOUT_MS


def open_failing(app, path):
    app.open_with_input(path)
    app.page.wait_for_selector("#error:not([hidden])", timeout=STEP_TIMEOUT_MS)
    title = app.page.inner_text("#error-title")
    message = app.page.inner_text("#error-message")
    app.page.click("#error-close")
    return title, message


@pytest.mark.parametrize("kind", ["torch", "gguf", "safetensors"])
def test_a_file_cut_short_says_truncated_and_names_the_file_once(app, files, tmp_path, kind):
    whole = files[kind].read_bytes()
    cut = tmp_path / f"cut-{files[kind].name}"
    cut.write_bytes(whole[:len(whole) * 2 // 3])
    title, message = open_failing(app, cut)
    assert title == f"Could not open {cut.name}."
    assert "truncated" in message, message
    assert cut.name not in message                    # named once, in the title


def test_an_invalid_regex_says_so(app):
    page = app.page
    page.check("#filter-regex")
    try:
        page.fill("#filter", "layers.(0")
        page.wait_for_function("() => document.getElementById('filter').classList.contains('invalid')")
        assert page.inner_text("#tree-count").startswith("invalid regex: ")
    finally:
        page.fill("#filter", "")
        page.uncheck("#filter-regex")


@pytest.fixture(scope="module")
def vocab_only(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "ggml-vocab-tiny.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<unk>", "<s>", "</s>", "a", "b"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_vocab_only_gguf_says_it_has_no_tensors(app, vocab_only):
    app.open_file(vocab_only)
    app.tab("tensor")
    text = app.page.inner_text("#tensor-empty")
    assert "ggml-vocab-tiny.gguf holds no tensors" in text and "vocab-only GGUF" in text


def test_the_moe_threshold_refuses_values_outside_minus_one_to_one(app):
    page = app.page
    if page.evaluate("document.body.dataset.model") != "demo-moe.safetensors":
        before = app.opened()
        page.click('#file-list .file[data-file="demo-moe.safetensors"]')
        app.wait_model("demo-moe.safetensors", before)
    app.tab("moe")
    page.wait_for_selector("#moe-cost[data-total-bytes]", timeout=STEP_TIMEOUT_MS)
    page.click("#moe-run")
    page.wait_for_selector("#redundancy[data-state=done]", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()
    clustered_at = page.get_attribute("#moe-results", "data-threshold")
    page.fill("#moe-threshold", "1.5")
    assert page.inner_text("#moe-threshold-error") == "The threshold is a cosine similarity: a number from −1 to 1."
    assert page.get_attribute("#moe-threshold", "aria-invalid") is not None
    assert page.get_attribute("#moe-results", "data-threshold") == clustered_at     # refused
    page.fill("#moe-threshold", "-1.01")
    assert page.inner_text("#moe-threshold-error") != ""
    page.fill("#moe-threshold", "0.8")
    page.wait_for_selector('#moe-results[data-threshold="0.8"]', state="attached", timeout=STEP_TIMEOUT_MS)
    assert page.inner_text("#moe-threshold-error") == ""
    assert page.get_attribute("#moe-threshold", "aria-invalid") is None
