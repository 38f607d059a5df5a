"""Text -> ids and back with nothing but the library (it also runs inside Pyodide, whose
`unicodedata` and `re` are not CPython's): tensorloupe's encoder on the fixtures' tokenizer.json
files and GGUF vocabularies gives the ids, and decodes to the text, that the `tokenizers` library
gave for the same strings when the fixtures were made (fixtures/out/tokenizers/expected.json,
written by fixtures/tokenizer_encode_files.py). The full comparison with the live library is
tests/test_token_encode.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tensorloupe
from tensorloupe import tokens
from tensorloupe.cli import main

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "fixtures" / "out" / "tokenizers"
NAMES = ("gpt2", "llama3", "qwen2", "llama2", "bert", "unigram",
         "tf-llama", "tf-qwen2", "tf-gpt2", "tf-bert", "tf-t5")   # tf-: written by transformers
# GGUF vocabularies whose llama.cpp tokenisation equals tokenizers' on every test string
# (Qwen2's and BERT's differ by design on some: tests/test_token_encode.py GGUF_DIFFERS).
SAME_AS_GGUF = ("gpt2", "llama3", "llama2")


def expected() -> dict:
    return json.loads((OUT / "expected.json").read_text())


def json_vocabulary(name: str):
    model = OUT / name / "model.safetensors"
    return tokens.vocabulary(tensorloupe.open(model), [str(model)])


@pytest.mark.parametrize("name", NAMES)
def test_tokenizer_json_gives_the_recorded_ids_and_text(name):
    vocab = json_vocabulary(name)
    for text, ids, plain, decoded, decoded_plain in expected()[name]:
        assert vocab.encode(text) == ids, (name, text)
        assert vocab.encode(text, add_special=False) == plain, (name, text)
        assert vocab.decode(ids) == decoded, (name, text)
        assert vocab.decode(ids, skip_special=True) == decoded_plain, (name, text)


@pytest.mark.parametrize("name", SAME_AS_GGUF)
def test_gguf_vocabulary_gives_the_recorded_ids(name):
    vocab = tokens.vocabulary(tensorloupe.open(OUT / f"{name}.gguf"))
    for text, ids, _, decoded, _ in expected()[name]:
        assert vocab.encode(text) == ids, (name, text)
        assert vocab.decode(ids) == decoded, (name, text)


def test_cli_encode_json_gives_the_recorded_ids(capsys):
    text, ids = expected()["qwen2"][21][:2]
    assert main(["tokens", str(OUT / "qwen2" / "model.safetensors"), "--encode", text, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ids"] == ids and doc["encode"] == text and len(doc["pieces"]) == len(ids)


def test_an_unknown_property_in_a_regex_is_refused_by_name():
    from tensorloupe.errors import UsageError
    from tensorloupe.tokens.codec import charclass
    with pytest.raises(UsageError, match=r"\\p\{Han\}"):
        charclass.translate(r"\p{Han}+")
    with pytest.raises(UsageError, match=r"uses \\b"):
        charclass.translate(r"\bword\b")
    # a Unicode \s: NEL and the ideographic space are white space, U+001C is not (Python's \s says it is)
    regex = charclass.translate(r"\s+")
    assert regex.findall("a\x85b\u3000c\x1cd") == ["\x85", "\u3000"]
