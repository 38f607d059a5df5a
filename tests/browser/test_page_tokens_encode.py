"""The Tokens tab's Encode / decode card, driven as a user would: open a model with its
tokenizer.json (and a GGUF file), type text, press Encode, and the ids shown equal the
`tokenizers` library's for the same file; type ids, press Decode, and the text equals its
decode. Every request of the page is recorded by the `app` fixture: nothing may leave 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "out" / "tokenizers"
TEXT = "Hello wörld, it's 2024!\n\tcafé 日本 😀 <|eot_id|> <|begin_of_text|>x"


def _seq(page, selector: str) -> int:
    return int(page.evaluate("s => document.querySelector(s)?.dataset.seq || 0", selector))


def _after(app, selector: str, before: int) -> None:
    """Wait until the card has shown a new answer in `selector` (its data-seq grew)."""
    app.page.wait_for_function("([s, n]) => Number(document.querySelector(s)?.dataset.seq || 0) > n",
                               arg=[selector, before], timeout=30_000)
    app.wait_idle()


def encode_in_page(app, text: str, special: bool = True) -> tuple[list[int], list[str]]:
    page = app.page
    page.fill("#encode-text", text)
    if page.is_checked("#encode-special") != special:
        page.click("#encode-special")
    before = _seq(page, "#encoded")
    page.click("#encode-button")
    _after(app, "#encoded", before)
    shown = page.text_content("#encoded-ids")
    ids = [int(i) for i in shown.split(", ")] if shown else []
    pieces = page.eval_on_selector_all("#encoded-pieces code", "cs => cs.map(c => c.textContent)")
    return ids, pieces


def decode_in_page(app, ids: str, special: bool = True) -> str:
    """`special`: the box "add the tokenizer's special tokens" checked (they are kept in the text)."""
    page = app.page
    page.fill("#decode-ids", ids)
    if page.is_checked("#encode-special") != special:
        page.click("#encode-special")
    before = _seq(page, "#decoded")
    page.press("#decode-ids", "Enter")
    _after(app, "#decoded", before)
    return page.text_content("#decoded-text")


def open_tokens(app, *paths: Path) -> None:
    before = app.opened()
    app.open_with_input(*paths)
    app.wait_model(paths[0].name, before)
    app.tab("tokens")
    app.page.wait_for_selector("#codec #encode-button")


def test_encode_and_decode_equal_tokenizers(app):
    folder = OUT / "llama3"
    open_tokens(app, folder / "model.safetensors", folder / "tokenizer.json")
    oracle = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids, pieces = encode_in_page(app, TEXT)
    want = oracle.encode(TEXT)
    assert ids == want.ids and len(pieces) == len(ids)
    assert pieces[0] == "<|begin_of_text|>" and "<|eot_id|>" in pieces
    app.screenshot("tokens-encode")
    # without the special tokens the tokenizer adds (the post-processor's BOS)
    ids, _ = encode_in_page(app, TEXT, special=False)
    assert ids == oracle.encode(TEXT, add_special_tokens=False).ids
    page = app.page
    listed = ", ".join(map(str, want.ids))
    assert decode_in_page(app, listed) == oracle.decode(want.ids, skip_special_tokens=False)
    assert decode_in_page(app, listed, special=False) == oracle.decode(want.ids, skip_special_tokens=True)
    # an id outside the vocabulary is named in the card, not a raw error
    page.fill("#decode-ids", "5, 999999")
    before = _seq(page, "#codec-problem")
    page.click("#decode-button")
    _after(app, "#codec-problem", before)
    assert "not in the vocabulary" in page.text_content("#codec-problem")


def test_gguf_vocabulary_encodes_like_tokenizers(app):
    open_tokens(app, OUT / "llama2.gguf")
    oracle = Tokenizer.from_file(str(OUT / "llama2" / "tokenizer.json"))
    text = "Hello wörld 😀, the quick brown fox</s> jumps"
    ids, pieces = encode_in_page(app, text)
    assert ids == oracle.encode(text).ids
    assert pieces[0] == "<s>"
