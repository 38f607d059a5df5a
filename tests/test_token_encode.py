"""Text -> token ids and back (tokens/encoder.py), compared with the `tokenizers` library on the
same files, element for element: the tokenizers of fixtures/tokenizer_encode_files.py (trained by
tokenizers itself: byte-level BPE as GPT-2 / Llama-3 / Qwen2, SentencePiece-style BPE as Llama-2,
WordPiece as BERT, Unigram as T5/ALBERT; and the same vocabularies written by transformers'
LlamaTokenizer, Qwen2Tokenizer, GPT2Tokenizer, BertTokenizer, T5Tokenizer) beside a safetensors file, and the same vocabularies as
GGUF metadata (written by gguf-py), on a corpus of test strings and on random ones; through the
API (`Vocabulary.encode/decode`) and the CLI (`tokens --encode/--decode`). llama.cpp's own
tokenizer cannot be installed here (PyPI has no llama-cpp-python wheel), so the GGUF side is
held to tokenizers on the same vocabulary, except where llama.cpp differs from it by design
(named at GGUF_DIFFERS)."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest
from gguf import GGUFWriter
from hypothesis import HealthCheck, given, settings, strategies as st
from tokenizers import Tokenizer

import tensorloupe
from tensorloupe import tokens
from tensorloupe.cli import main
from tensorloupe.errors import UsageError
from tensorloupe.source.base import FileSource

import gguf_files
import tokenizer_encode_files as made

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "fixtures" / "out" / "tokenizers"
CORPUS = made.TEST_STRINGS
# Where llama.cpp's tokenisation differs from tokenizers' on the same vocabulary by design, as
# llama-vocab.cpp reads: no normaliser for BPE vocabularies (Qwen2's tokenizer.json has NFC);
# WordPiece with no 100-character word limit, U+0085 a word break (tokenizers' BertNormalizer
# drops it as a control character), and "▁" in the text taken as the word-start mark.
GGUF_DIFFERS = {
    "qwen2": lambda t: unicodedata.normalize("NFC", t) != t,
    "bert": lambda t: "▁" in t or "\x85" in t or any(len(w) > 100 for w in t.split()),
}
ALPHABET = list("abcxyz ABC  \t\n\r'.,!?-_0123456789éüßΣσς日本語한😀\u0301\u200b\u3000\xa0\x1c\x85▁") + [
    "'s", "'LL", "<|endoftext|>", "<s>", "</s>", "[SEP]", "<|im_end|>", "<|eot_id|>", "##", "<0x41>"]


@pytest.fixture(scope="module")
def oracles() -> dict[str, Tokenizer]:
    return {name: Tokenizer.from_file(str(OUT / name / "tokenizer.json")) for name in made.ALL_NAMES}


@pytest.fixture(scope="module")
def json_vocabs() -> dict:
    """Each tokenizer.json as the API finds it: beside the model it was opened with."""
    out = {}
    for name in made.ALL_NAMES:
        model = OUT / name / "model.safetensors"
        out[name] = tokens.vocabulary(tensorloupe.open(model), [str(model)])
    return out


@pytest.fixture(scope="module")
def gguf_vocabs() -> dict:
    return {name: tokens.vocabulary(tensorloupe.open(OUT / f"{name}.gguf")) for name in made.GGUF_NAMES}


@pytest.mark.parametrize("name", made.ALL_NAMES)
def test_tokenizer_json_encodes_and_decodes_as_tokenizers(name, oracles, json_vocabs):
    oracle, vocab = oracles[name], json_vocabs[name]
    for text in CORPUS:
        want = oracle.encode(text)
        assert vocab.encode(text) == want.ids, (name, text)
        assert vocab.encode(text, add_special=False) == oracle.encode(text, add_special_tokens=False).ids
        # each id's token string (tokenizers' Encoding.tokens shows a Unigram unknown's text instead)
        assert vocab.encoder().pieces(want.ids) == [oracle.id_to_token(i) for i in want.ids]
        for skip in (False, True):
            assert vocab.decode(want.ids, skip_special=skip) == oracle.decode(want.ids, skip_special_tokens=skip)


@pytest.mark.parametrize("name", made.GGUF_NAMES)
def test_gguf_vocabulary_encodes_as_tokenizers_on_the_same_vocabulary(name, oracles, gguf_vocabs):
    oracle, vocab = oracles[name], gguf_vocabs[name]
    differs = GGUF_DIFFERS.get(name, lambda t: False)
    compared = 0
    for text in CORPUS:
        if differs(text):
            continue
        want = oracle.encode(text).ids
        assert vocab.encode(text) == want, (name, text)
        if name != "bert":   # llama.cpp's WordPiece detokeniser is not tokenizers' (no cleanup)
            assert vocab.decode(want) == oracle.decode(want, skip_special_tokens=False), (name, text)
        compared += 1
    assert compared >= len(CORPUS) - 3


def test_where_llama_cpp_differs_it_is_followed():
    """The documented differences, as llama.cpp tokenises: Qwen2's GGUF has no NFC, so a
    decomposed é stays two byte-level symbols; a 150-letter word is WordPiece-matched whole."""
    qwen = tokens.vocabulary(tensorloupe.open(OUT / "qwen2.gguf"))
    assert qwen.decode(qwen.encode("cafe\u0301")) == "cafe\u0301"
    bert = tokens.vocabulary(tensorloupe.open(OUT / "bert.gguf"))
    ids = bert.encode("x" * 150)
    assert len(ids) > 3 and bert.decode(ids[1:-1]) == "x" * 150


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(ALPHABET), max_size=24).map("".join))
def test_random_text_encodes_as_tokenizers(oracles, json_vocabs, gguf_vocabs, text):
    for name in made.ALL_NAMES:
        want = oracles[name].encode(text).ids
        assert json_vocabs[name].encode(text) == want, (name, text)
        assert json_vocabs[name].decode(want) == oracles[name].decode(want, skip_special_tokens=False)
        if name in gguf_vocabs and not GGUF_DIFFERS.get(name, lambda t: False)(text):
            assert gguf_vocabs[name].encode(text) == want, (name, "gguf", text)


def run(capsys, *args) -> tuple[int, dict | str, str]:
    code = main(["tokens", *map(str, args)])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if "--json" in args and code == 0 else out), err


def test_cli_encode_and_decode(capsys, oracles):
    model = OUT / "llama3" / "model.safetensors"
    text = "Hello wörld, it's 2024!\n<|eot_id|>"
    want = oracles["llama3"].encode(text)
    code, doc, _ = run(capsys, model, "--encode", text, "--json")
    assert code == 0 and doc["ids"] == want.ids and doc["count"] == len(want.ids)
    assert doc["pieces"][0] == "<|begin_of_text|>" and doc["model"] == "BPE"
    code, doc, _ = run(capsys, model, "--encode", text, "--no-special", "--json")
    assert doc["ids"] == oracles["llama3"].encode(text, add_special_tokens=False).ids
    code, doc, _ = run(capsys, model, "--decode", ",".join(map(str, want.ids)), "--json")
    assert code == 0 and doc["text"] == oracles["llama3"].decode(want.ids, skip_special_tokens=False)
    code, out, _ = run(capsys, model, "--encode", text, "--decode", "[1, 2 3]")
    assert code == 0 and "as 14 tokens" in out.replace(f"as {len(want.ids)} tokens", "as 14 tokens")
    assert "  ids     " + ", ".join(map(str, want.ids)) in out and "[<|begin_of_text|>]" in out
    assert "Decoded 3 tokens" in out and "\\n" not in out.split("Decoded")[1].split("text")[0]


def test_cli_refuses_bad_ids_and_names_the_problem(capsys):
    model = OUT / "bert" / "model.safetensors"
    code, _, err = run(capsys, model, "--decode", "1,x")
    assert code == 2 and "whole numbers" in err
    code, _, err = run(capsys, model, "--decode", "1,99999")
    assert code == 2 and "not in the vocabulary" in err


def test_gguf_vocabulary_is_read_once_for_encoding():
    """The encoder needs every token and merge: read once, kept with the checkpoint."""
    source = FileSource(OUT / "llama3.gguf")
    ckpt = tensorloupe.open(source)
    vocab = tokens.vocabulary(ckpt)
    vocab.encode("hello")
    after_first = source.bytes_read
    assert tokens.vocabulary(ckpt).encode("hello world, again") and source.bytes_read == after_first


def _gguf(path: Path, model: str, pre: str | None = None, scores: list[float] | None = None) -> Path:
    import numpy as np
    w = GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_tokenizer_model(model)
    if pre:
        w.add_tokenizer_pre(pre)
    w.add_token_list(["a", "b", "ab"])
    w.add_token_merges(["a b"])
    if scores:
        w.add_token_scores(scores)
    w.add_tensor("t", np.zeros(2, dtype=np.float32))
    gguf_files.finish(w)
    return path


def test_unknown_gguf_pre_tokenizer_and_model_are_named(tmp_path):
    vocab = tokens.vocabulary(tensorloupe.open(_gguf(tmp_path / "pre.gguf", "gpt2", "tekken-9000")))
    with pytest.raises(UsageError, match="tokenizer.ggml.pre 'tekken-9000'"):
        vocab.encode("ab")
    assert vocab.page(0, 3)["count"] == 3    # the vocabulary is still shown
    vocab = tokens.vocabulary(tensorloupe.open(_gguf(tmp_path / "rwkv.gguf", "rwkv")))
    with pytest.raises(UsageError, match="tokenizer.ggml.model 'rwkv'"):
        vocab.encode("ab")
    # "t5" (llama.cpp's UGM, tests/test_token_ugm.py) encodes: "ab" whole beats "a" + "b", and
    # EOS (id 1 by default, here "b") is appended
    t5 = tokens.vocabulary(tensorloupe.open(_gguf(tmp_path / "t5.gguf", "t5", scores=[-1.0, -1.0, -0.5])))
    assert t5.encode("ab") == [2, 1] and t5.encode("ba", add_special=False) == [1, 0]
    ok = tokens.vocabulary(tensorloupe.open(_gguf(tmp_path / "gpt2.gguf", "gpt2", "gpt-2")))
    # "ab" merged twice; " ab"'s Ġ is no token and neither are its two UTF-8 bytes: llama.cpp
    # drops what it cannot spell
    assert ok.encode("ab ab") == [2, 2]


def _with_json(folder: Path, change) -> Path:
    data = json.loads((OUT / "bert" / "tokenizer.json").read_text())
    change(data)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(data))
    (folder / "model.safetensors").write_bytes((OUT / "bert" / "model.safetensors").read_bytes())
    return folder / "model.safetensors"


@pytest.mark.parametrize("change, named", [
    (lambda d: d.update(normalizer={"type": "Nmt"}), "normaliser 'Nmt'"),
    (lambda d: d.update(pre_tokenizer={"type": "UnicodeScripts"}), "pre-tokenizer 'UnicodeScripts'"),
    (lambda d: d.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": r"\w+"}, "behavior": "Isolated",
                                       "invert": False}), r"uses \\w"),
    (lambda d: d.update(post_processor={"type": "Mystery"}), "post-processor 'Mystery'"),
    (lambda d: d.update(decoder={"type": "CTC"}), "decoder 'CTC'"),
    (lambda d: d["model"].update(type="Mystery"), "model 'Mystery'"),
])
def test_a_part_not_implemented_is_refused_by_name(tmp_path, capsys, change, named):
    """Never a silently different tokenisation: the CLI says which part, exit 2."""
    model = _with_json(tmp_path / "t", change)
    code, _, err = run(capsys, model, "--encode", "hello")
    assert code == 2 and ("not implemented" in err or "does not implement" in err), err
    assert re.search(named, err), err
    code, doc, _ = run(capsys, model, "--json")     # the vocabulary pages still work
    assert code == 0 and doc["count"] > 0


def test_tokenizer_config_alone_cannot_encode(tmp_path, capsys):
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    (folder / "model.safetensors").write_bytes((OUT / "bert" / "model.safetensors").read_bytes())
    code, _, err = run(capsys, folder / "model.safetensors", "--encode", "hi")
    assert code == 2 and "needs tokenizer.json" in err


@pytest.mark.parametrize("change", [
    lambda d: d["model"].update(merges=[["a"]]),
    lambda d: d["model"].update(vocab=[1, 2]),
    lambda d: d.update(post_processor={"type": "BertProcessing", "sep": 5}),
    lambda d: d.update(normalizer={"type": "Replace", "pattern": {"String": 3}, "content": None}),
    lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [7]}),
    lambda d: d.update(post_processor={"type": "TemplateProcessing", "special_tokens": {},
                                       "single": [{"SpecialToken": {"id": "<x>"}}]}),
])
def test_a_malformed_tokenizer_json_is_a_clear_error(tmp_path, capsys, change):
    """A hostile or broken file: our error naming the file, exit 2 or 3, never a traceback."""
    def broken(d):
        d["model"] = {"type": "BPE", "merges": [], "vocab": {"a": 0, "b": 1}, "unk_token": None}
        change(d)
    model = _with_json(tmp_path / "t", broken)
    code, _, err = run(capsys, model, "--encode", "hello")
    assert code in (2, 3) and "Traceback" not in err and err.strip(), err


def test_the_page_op_answers_as_the_cli(capsys):
    """The Tokens tab's Encode / decode card (op tokens_encode) gives what `tokens --encode
    --decode --json` prints, and keeps the GGUF encoder across calls."""
    from tensorloupe.web.handlers import Session
    path = OUT / "qwen2.gguf"
    s = Session()
    s.handle("open", {"path": str(path)})
    text = "Hi <|im_start|>user\n你好 😀<|im_end|>"
    page, _ = s.handle("tokens_encode", {"text": text, "ids": "1, 2, 300"})
    assert main(["tokens", str(path), "--encode", text, "--decode", "1, 2, 300", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("ids", "pieces", "text", "decode_pieces", "count"):
        assert page[key] == doc[key], key
    encoder = s._vocabulary().encoder()
    plain, _ = s.handle("tokens_encode", {"text": text, "special": False})
    assert s._vocabulary().encoder() is encoder and plain["ids"] == doc["ids"]   # no BOS for qwen2
    with pytest.raises(UsageError, match="a text to encode or ids"):
        s.handle("tokens_encode", {})


def test_added_token_options_match_tokenizers():
    """single_word, lstrip/rstrip and normalized added tokens, cut out as tokenizers does."""
    from tokenizers import AddedToken
    from tensorloupe.tokens.codec.from_json import from_json
    oracle = Tokenizer.from_file(str(OUT / "gpt2" / "tokenizer.json"))
    oracle.add_tokens([AddedToken("cat", single_word=True), AddedToken("dog", normalized=True),
                       AddedToken("<mask>", lstrip=True, rstrip=True, special=True)])
    ours = from_json(json.loads(oracle.to_str()))
    for text in ("cat concat cat_ cat! (cat) 2cat über cat", "a <mask> b  <mask>\n x  <mask>",
                 "hotdog dog catdog <mask><mask>"):
        assert ours.encode(text) == oracle.encode(text).ids, text
