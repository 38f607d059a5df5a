"""The tokenizer view: GGUF vocabulary pages compared with gguf-py, only the page shown decoded
(bytes read counted on a 262,144-token vocabulary), search, special tokens, chat template; and a
Hugging Face tokenizer.json beside a safetensors file compared with the `tokenizers` library."""

import json

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter
from safetensors.numpy import save_file

import tensorloupe
from tensorloupe import tokens
from tensorloupe.cli import main
from tensorloupe.source.base import FileSource
from tensorloupe.tokens.gguf import TOKEN_TYPES
from tensorloupe.tokens.vocab import shown

import gguf_files
import tokenizer_files

BIG_VOCAB = 262_144
TEMPLATE = tokenizer_files.TEMPLATE


def run(capsys, *args) -> tuple[int, dict | str, str]:
    code = main(["tokens", *map(str, args)])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if "--json" in args and code == 0 else out), err


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return gguf_files.write_llama(tmp_path_factory.mktemp("tok") / "tiny-llama.gguf")


@pytest.fixture(scope="module")
def big_vocab(tmp_path_factory):
    """A gemma-3-sized vocabulary (262,144 tokens) with scores, types, merges, a pre-tokenizer,
    special ids and a chat template; one tiny tensor."""
    path = tmp_path_factory.mktemp("big") / "big-vocab.gguf"
    vocab = ["<pad>", "<eos>", "<bos>", "\n", " ", "\u200b"] + [f"▁tok{i:06d}" for i in range(BIG_VOCAB - 6)]
    w = GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(vocab)
    w.add_token_scores([float(i % 97) for i in range(BIG_VOCAB)])
    w.add_token_types([3, 3, 3, 6, 1, 1] + [1] * (BIG_VOCAB - 6))
    w.add_token_merges([f"▁ t{i}" for i in range(5000)])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_pad_token_id(0)
    w.add_chat_template(TEMPLATE)
    w.add_tensor("t", np.zeros(4, dtype=np.float32))
    gguf_files.finish(w)
    return path


def test_a_page_matches_gguf_py(llama):
    reader = GGUFReader(llama)
    field = {f.name: f for f in reader.fields.values()}
    words = field["tokenizer.ggml.tokens"].contents()
    scores = field["tokenizer.ggml.scores"].contents()
    types = field["tokenizer.ggml.token_type"].contents()
    vocab = tokens.vocabulary(tensorloupe.open(llama))
    page = vocab.page(250, 20)   # crosses the byte tokens into words; the array is lazy (1,100 > 1,024)
    assert [e["id"] for e in page["tokens"]] == list(range(250, 270))
    assert [e["token"] for e in page["tokens"]] == words[250:270]
    assert [e["score"] for e in page["tokens"]] == pytest.approx(scores[250:270])
    assert [e["type"] for e in page["tokens"]] == [TOKEN_TYPES[t] for t in types[250:270]]
    summary = vocab.summary()
    assert summary["size"] == len(words) == 1100 and summary["model"] == "llama"
    bos, eos = field["tokenizer.ggml.bos_token_id"].contents(), field["tokenizer.ggml.eos_token_id"].contents()
    assert summary["special"]["bos"] == {"id": bos, "token": words[bos], "shown": "<s>", "type": "control"}
    assert summary["special"]["eos"]["token"] == words[eos] == "</s>"


def test_only_the_page_shown_is_read(big_vocab):
    source = FileSource(big_vocab)          # no cache: every byte the reader asks for is counted
    ckpt = tensorloupe.open(source)
    record = ckpt.extras["gguf_arrays"]["tokenizer.ggml.tokens"]
    span = record["end"] - record["offset"]
    assert span > 4_000_000
    vocab = tokens.vocabulary(ckpt)
    opened = ckpt.bytes_read()
    summary = vocab.summary()
    first = vocab.page(0, 50)
    last = vocab.page(BIG_VOCAB - 50, 50)
    # Tokens, scores and types of two pages and five special tokens: a few reads of at most the
    # cursor's first chunk (256 KiB) each; decoding the whole vocabulary would read > 4 MB.
    assert ckpt.bytes_read() - opened < span // 4
    assert [e["token"] for e in first["tokens"][:6]] == ["<pad>", "<eos>", "<bos>", "\n", " ", "\u200b"]
    assert [e["shown"] for e in first["tokens"][3:6]] == ["<0x0A>", "␣", "<U+200B>"]
    assert last["tokens"][-1] == {"id": BIG_VOCAB - 1, "token": f"▁tok{BIG_VOCAB - 7:06d}",
                                  "shown": f"▁tok{BIG_VOCAB - 7:06d}", "type": "normal",
                                  "score": float((BIG_VOCAB - 1) % 97)}
    assert summary["size"] == BIG_VOCAB and summary["merges"] == 5000 and summary["pre"] == "llama-bpe"
    assert summary["special"]["bos"]["token"] == "<bos>" and summary["special"]["pad"]["id"] == 0
    assert summary["chat_template"] == {"text": TEMPLATE, "length": len(TEMPLATE), "truncated": False}


def test_search_by_text_and_by_id(capsys, big_vocab):
    code, doc, _ = run(capsys, big_vocab, "--find", "tok26213", "--json")
    assert code == 0 and doc["truncated"] is False and doc["scanned"] == BIG_VOCAB
    assert [e["token"] for e in doc["matches"]] == [f"▁tok26213{d}" for d in range(8)]
    # a space also finds SentencePiece's ▁; a number also finds that id
    code, doc, _ = run(capsys, big_vocab, "--find", " tok000001", "--json")
    assert [e["id"] for e in doc["matches"]] == [7]
    code, doc, _ = run(capsys, big_vocab, "--find", "3", "--count", "5", "--json")
    assert doc["matches"][0]["id"] == 3 and doc["matches"][0]["shown"] == "<0x0A>"
    assert len(doc["matches"]) == 5 and doc["truncated"] is True


def test_cli_pages_and_text(capsys, llama):
    code, doc, _ = run(capsys, llama, "--start", "1", "--count", "3", "--json")
    assert code == 0 and [e["token"] for e in doc["tokens"]] == ["<s>", "</s>", "<0x00>"]
    assert doc["start"] == 1 and doc["count"] == 3 and doc["size"] == 1100
    code, out, _ = run(capsys, llama, "--start", "1", "--count", "2")
    assert "bos        1  <s>" in out and "Tokens 1..2 of 1,100" in out
    code, _, err = run(capsys, llama, "--start", "5000")
    assert code == 2 and "past the end of the 1,100-token vocabulary" in err


def test_shown_makes_invisible_characters_visible():
    assert shown("▁the") == "▁the" and shown("Ġhello") == "Ġhello"
    assert shown("a b\tc\n") == "a␣b<0x09>c<0x0A>"
    assert shown("\x7f\u00a0\u200b") == "<0x7F><U+00A0><U+200B>"


def test_tokenizer_json_beside_a_safetensors_file(capsys, tmp_path):
    from tokenizers import Tokenizer
    tokenizer_files.write_model_with_tokenizer(tmp_path, "model.safetensors")
    code, doc, _ = run(capsys, tmp_path / "model.safetensors", "--count", "1000", "--json")
    assert code == 0
    oracle = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert doc["size"] == oracle.get_vocab_size(with_added_tokens=True)
    assert [e["token"] for e in doc["tokens"]] == [oracle.id_to_token(i) for i in range(doc["size"])]
    assert doc["model"] == "BPE" and doc["pre"] == "ByteLevel"
    assert doc["merges"] == len(json.loads((tmp_path / "tokenizer.json").read_text())["model"]["merges"])
    assert doc["special"]["bos"]["id"] == oracle.token_to_id("<s>")
    assert doc["special"]["eos"] == {"id": oracle.token_to_id("<|im_end|>"), "token": "<|im_end|>",
                                     "shown": "<|im_end|>", "type": "special"}
    assert doc["chat_template"]["text"] == TEMPLATE


def test_no_tokenizer_is_one_clear_line(capsys, demo_path):
    code, _, err = run(capsys, demo_path)
    assert code == 2
    assert err.strip() == ("tensorloupe: demo-moe.safetensors: no tokenizer: there is no "
                           "tokenizer.json or tokenizer_config.json beside it")


def test_a_tokenizer_json_of_mostly_holes_is_refused(capsys, tmp_path):
    """Ids up to 10^12 for two tokens: paging and search would walk a trillion empty ids."""
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE",
                                                                   "vocab": {"a": 0, "b": 10 ** 12}}}))
    save_file({"w": np.zeros(2, dtype=np.float32)}, str(tmp_path / "model.safetensors"))
    code, _, err = run(capsys, tmp_path / "model.safetensors", "--find", "zzz")
    assert code == 3
    assert err.strip() == ("tensorloupe: tokenizer.json: token ids go up to "
                           "1,000,000,000,000 for only 2 tokens")
