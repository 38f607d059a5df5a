"""SentencePiece Unigram vocabularies (issue 27): a tokenizer.json whose normaliser is
"Precompiled" (T5 / mT5 / ALBERT / XLNet) and a GGUF whose tokenizer.ggml.model is "t5"
(llama.cpp's UGM) encode and decode as their references do, on fixtures/ugm_files.py's model
(trained by sentencepiece with the nmt_nfkc charsmap):

- tokenizer.json against the `tokenizers` library on the same file;
- GGUF against sentencepiece on the model the GGUF was converted from, plus the EOS llama.cpp
  appends. llama.cpp differs from sentencepiece by design in one way the corpus reaches: it cuts
  control and user-defined tokens ("</s>", "<pad>", "<unk>") out of the text before tokenising
  (tokenizer_st_partition) and tokenises each fragment on its own (each gets its own ▁ prefix),
  where sentencepiece spells "</s>" as text. The oracle below does the same cutting and asks
  sentencepiece for each fragment, so it follows llama.cpp.
- and a malformed charsmap is our FormatError naming the fault, never an IndexError or a hang.
"""

from __future__ import annotations

import base64
import json
import struct

import pytest
import sentencepiece
from tokenizers import Tokenizer, normalizers

import tensorloupe
from tensorloupe import tokens
from tensorloupe.cli import main
from tensorloupe.errors import FormatError, TensorloupeError
from tensorloupe.tokens.codec.precompiled import Charsmap, from_base64

import ugm_files

CORPUS = [
    "", " ", "  ", "a", "Hello world", "hello world", "The quick brown fox jumps over the lazy dog.",
    "hello   world", "  leading spaces", "trailing spaces   ", "  both  ", " a  b   c    d ",
    "line one\nline two", "\n", "a\r\nb", "tab\tseparated\tvalues", "\t\tindented", "mixed \t\n  ws",
    "ＡＢＣ ａｂｃ １２３", "Ｈｅｌｌｏ", "ﬁne ﬂow ﬀ", "the ﬁrst ﬁle", "½ ① ™ ㎏ Ⅳ",
    "café naïve résumé", "cafe\u0301 nai\u0308ve", "e\u0301", "A\u0301", "Ａ\u0301", "Straße ΣΑΣ σας",
    "Москва, привет мир", "😀", "😀 emoji 🎉🚀", "👩‍👩‍👧", "日本語のテキスト", "한국어 텍스트",
    "zzzqqq xyzzy", "Ωμέγα ǅ ǆ", "\u3000ideographic\u3000space", "no\xa0break", "zero\u200bwidth",
    "control\x01char", "ｶﾞ ｱ", "x\u200dy", "</s>", "a</s>b", "end </s>", "<pad><unk> ok",
    "It's 3.14159, isn't it?", "T5 and mT5 use a unigram language model",
    "tokenizer pieces become ids", "ÀÉÎÕÜ Ünïcödé", "A" * 50, "a" + " " * 20 + "b",
]
SPECIAL = ("</s>", "<pad>", "<unk>")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    return ugm_files.write_all(tmp_path_factory.mktemp("ugm"))


@pytest.fixture(scope="module")
def sp(made):
    return sentencepiece.SentencePieceProcessor(model_file=str(made["ugm-spm"]))


@pytest.fixture(scope="module")
def oracle(made) -> Tokenizer:
    return Tokenizer.from_file(str(made["ugm-t5-json"].parent / "tokenizer.json"))


def _llama(sp, text: str) -> list[int]:
    """sentencepiece on each fragment between special tokens (cut longest first, as llama.cpp),
    then the EOS that llama.cpp's UGM adds by default."""
    pieces: list = [text]
    for special in sorted(SPECIAL, key=len, reverse=True):
        out = []
        for p in pieces:
            if not isinstance(p, str):
                out.append(p)
                continue
            for k, part in enumerate(p.split(special)):
                if k:
                    out.append(sp.piece_to_id(special))
                if part:
                    out.append(part)
        pieces = out
    ids = [i for p in pieces for i in ([p] if isinstance(p, int) else sp.encode(p))]
    return ids + [sp.eos_id()]


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 40 and len(set(CORPUS)) == len(CORPUS)


def test_tokenizer_json_encodes_and_decodes_as_tokenizers(made, oracle):
    model = made["ugm-t5-json"]
    vocab = tokens.vocabulary(tensorloupe.open(model), [str(model)])
    for text in CORPUS:
        want = oracle.encode(text)
        assert vocab.encode(text) == want.ids, text
        assert vocab.encode(text, add_special=False) == oracle.encode(text, add_special_tokens=False).ids
        for skip in (False, True):
            assert vocab.decode(want.ids, skip_special=skip) == oracle.decode(want.ids, skip_special_tokens=skip)


def test_precompiled_normaliser_equals_tokenizers_char_by_char(made):
    """The normaliser alone, on every character the charsmap has a rule for, and with a
    combining mark after it (a two-character grapheme: tokenizers' whole-cluster rule)."""
    data = json.loads((made["ugm-t5-json"].parent / "tokenizer.json").read_text())
    spec = next(n for n in data["normalizer"]["normalizers"] if n["type"] == "Precompiled")
    ours = from_base64(spec["precompiled_charsmap"])
    theirs = normalizers.Precompiled(base64.b64decode(spec["precompiled_charsmap"]))
    probes = [chr(c) for c in range(0x20, 0x3000) if 0xD800 > c]
    probes += [chr(c) for c in range(0xF900, 0xFFFE)] + ["\r\n", "a\u0301", "Ａ\u0301", "ﬁ\u0308"]
    text = "".join(probes)
    assert ours.for_json(text) == theirs.normalize_str(text)
    for p in probes:
        for combined in (p, p + "\u0301", p + "\u200d"):
            assert ours.for_json(combined) == theirs.normalize_str(combined), repr(combined)


def test_gguf_encodes_as_sentencepiece_with_llama_cpp_partition(made, sp):
    vocab = tokens.vocabulary(tensorloupe.open(made["ugm-t5-gguf"]))
    for text in CORPUS:
        assert vocab.encode(text) == _llama(sp, text), text
        assert vocab.encode(text, add_special=False) == _llama(sp, text)[:-1], text


def test_gguf_decodes_as_llama_cpp(made, sp):
    vocab = tokens.vocabulary(tensorloupe.open(made["ugm-t5-gguf"]))
    for text in CORPUS:
        if any(s in text for s in SPECIAL):
            continue
        ids = sp.encode(text)
        # llama.cpp shows the unknown token's text where sentencepiece shows " ⁇ "
        assert vocab.decode(ids) == sp.decode(ids).replace(" ⁇ ", "<unk>"), text
    assert vocab.decode(sp.encode("hello") + [1]) == "hello</s>"
    assert vocab.decode(sp.encode("hello") + [1], skip_special=True) == "hello"


def test_gguf_cli_encode(made, sp, capsys):
    text = "Ｈｅｌｌｏ  ﬁne café</s>"
    code = main(["tokens", str(made["ugm-t5-gguf"]), "--encode", text, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["ids"] == _llama(sp, text)


def test_tokenizer_json_cli_encode(made, oracle, capsys):
    text = "  ＡＢＣ ﬁne  e\u0301 "
    code = main(["tokens", str(made["ugm-t5-json"]), "--encode", text, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["ids"] == oracle.encode(text).ids


# --- malformed charsmaps: one fault each, the error names it --------------------------------

def _blob(units: list[int], replacements: bytes = b"x\0") -> bytes:
    return struct.pack("<I", 4 * len(units)) + struct.pack(f"<{len(units)}I", *units) + replacements


def _unit(label: int = 0, offset: int = 0, leaf: bool = False) -> int:
    assert offset < 1 << 21
    return label | (offset << 10) | (int(leaf) << 8)


def test_a_working_hand_built_trie():
    # the root's children are at 1 ^ c: "a" at 0x60, labelled 0x61, with a leaf; its value
    # unit at 0x60 ^ 1 = 0x61 holds replacement offset 0 ("x"). Other units are label 0: no match
    units = [0] * 0x200
    units[0] = _unit(offset=1)
    units[0x60] = _unit(label=0x61, offset=1, leaf=True)
    units[0x61] = 1 << 31 | 0          # a value unit: bit 31 set, value 0
    cm = Charsmap(_blob(units))
    assert cm.longest(b"ab", 0) == (1, "x") and cm.for_json("bab") == "bxb"


@pytest.mark.parametrize("blob, named", [
    (b"", "fewer than its 4-byte trie size"),
    (b"\x10\0", "fewer than its 4-byte trie size"),
    (struct.pack("<I", 4000) + b"\0" * 8, "truncated"),
    (struct.pack("<I", 6) + b"\0" * 12, "not a whole number"),
    (struct.pack("<I", 0) + b"x\0", "empty trie"),
    # the root's offset sends "a" to unit 0x61 ^ 5000 << ..., far past the 1 unit there is
    (_blob([_unit(offset=5000)]), "trie offset out of range"),
])
def test_a_malformed_charsmap_is_named(blob, named):
    with pytest.raises(FormatError, match=named):
        Charsmap(blob).for_json("abc")


def test_a_value_outside_the_replacements_is_named():
    units = [0] * 0x200
    units[0] = _unit(offset=1)
    units[0x60] = _unit(label=0x61, offset=1, leaf=True)
    units[0x61] = 1 << 31 | 900
    with pytest.raises(FormatError, match="replacement byte 900"):
        Charsmap(_blob(units)).for_json("a")


def test_a_trie_that_loops_is_named_not_followed():
    # "a" from the root (offset 1) lands on unit 0x60, whose offset 0x61 sends the walk back
    # to node 1, the root's own: every further "a" goes round again (llama.cpp's longest match
    # walks the whole text this way)
    units = [0] * 0x200
    units[0] = _unit(offset=1)
    units[0x60] = _unit(label=0x61, offset=0x61)
    with pytest.raises(FormatError, match="loops"):
        Charsmap(_blob(units)).longest(b"aaaa", 0)


def test_random_corruption_raises_only_our_error(made):
    import random
    data = json.loads((made["ugm-t5-json"].parent / "tokenizer.json").read_text())
    spec = next(n for n in data["normalizer"]["normalizers"] if n["type"] == "Precompiled")
    good = bytearray(base64.b64decode(spec["precompiled_charsmap"]))
    rng = random.Random(27)
    for _ in range(40):
        bad = bytearray(good)
        for _ in range(rng.randint(1, 50)):
            bad[rng.randrange(4, len(bad))] = rng.randrange(256)
        cut = bad[:rng.randrange(len(bad))] if rng.random() < 0.3 else bad
        try:
            Charsmap(bytes(cut)).for_json("ＡＢＣ ﬁne café e\u0301 ½ 😀 한국어")
        except TensorloupeError:
            pass


def test_a_bad_charsmap_in_tokenizer_json_is_the_files_error(made, tmp_path, capsys):
    folder = tmp_path / "bad"
    folder.mkdir()
    data = json.loads((made["ugm-t5-json"].parent / "tokenizer.json").read_text())
    data["normalizer"]["normalizers"][0]["precompiled_charsmap"] = base64.b64encode(b"\x00\x10").decode()
    (folder / "tokenizer.json").write_text(json.dumps(data))
    (folder / "model.safetensors").write_bytes(made["ugm-t5-json"].read_bytes())
    code = main(["tokens", str(folder / "model.safetensors"), "--encode", "abc"])
    err = capsys.readouterr().err
    assert code != 0 and "precompiled_charsmap" in err and "Traceback" not in err, err
