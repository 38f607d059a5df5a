"""Benchmark a page of a 262,144-token GGUF vocabulary against gguf-py, measured in the same run.

    PYTHONPATH=pylib python3 bench/tokens_page.py [--repeat N]

Builds the 262k-vocabulary GGUF of bench/gguf_open.py, then:
  tensorloupe: open + the tokenizer summary + page 1 (50 tokens) + a page at the end, on an
               uncached file source, so every byte asked for is counted;
  gguf-py:     GGUFReader (decodes every field) and the same 100 tokens from its parts.
Prints both times, the ratio, and the bytes tensorloupe read for the pages against the bytes of
the vocabulary array.

Then encoding (tokens/encoder.py), for a 32,000- and a 150,000-token byte-level BPE vocabulary
(trained by `tokenizers` on generated text, Qwen2's pre-tokenizer), as tokenizer.json and as
GGUF metadata: the time to build the encoder (tensorloupe: parse + tables; GGUF: open, read the
whole vocabulary and merges once) and to encode 10 KB of text, against tokenizers'
Tokenizer.from_file and encode of the same text; the ids must be equal.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from gguf import GGUFReader

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pylib"))
sys.path.insert(0, str(ROOT / "bench"))

import gguf_open  # noqa: E402  (its build() writes the 262k-vocabulary file)

import tensorloupe  # noqa: E402
from tensorloupe import tokens  # noqa: E402
from tensorloupe.source.base import FileSource  # noqa: E402


def ours(path: Path) -> tuple[float, int, int, int]:
    start = time.perf_counter()
    ckpt = tensorloupe.open(FileSource(path))
    opened = ckpt.bytes_read()
    vocab = tokens.vocabulary(ckpt)
    vocab.summary()
    first = vocab.page(0, 50)["tokens"]
    last = vocab.page(vocab.size - 50, 50)["tokens"]
    elapsed = time.perf_counter() - start
    record = ckpt.extras["gguf_arrays"][tokens.TOKENS]
    assert len(first) == len(last) == 50
    return elapsed, opened, ckpt.bytes_read() - opened, record["end"] - record["offset"]


def theirs(path: Path) -> float:
    start = time.perf_counter()
    reader = GGUFReader(path)
    field = reader.fields[tokens.TOKENS]
    words = [bytes(field.parts[i]).decode("utf-8") for i in field.data[:50] + field.data[-50:]]
    assert len(words) == 100
    return time.perf_counter() - start


ENCODE_SIZES = (32_000, 150_000)
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _corpus(words: int, seed: int = 0) -> list[str]:
    """Generated text: words of a skewed letter distribution (so BPE finds merges), digits,
    punctuation, some accented and CJK letters."""
    import random
    rng = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz" * 3 + "éüßñ日本語中文"
    out, line = [], []
    for i in range(words):
        word = "".join(rng.choice(letters[:rng.randint(8, len(letters))]) for _ in range(rng.randint(1, 12)))
        line.append(word if rng.random() > 0.05 else str(rng.randint(0, 99999)))
        if rng.random() < 0.1:
            line[-1] += rng.choice(".,!?;:")
        if len(line) > 12:
            out.append(" ".join(line))
            line = []
    return out


def _build_vocab(folder: Path, size: int) -> tuple[Path, Path]:
    """tokenizer.json trained by tokenizers with `size` tokens, and the same vocabulary as GGUF."""
    import json
    import numpy as np
    from gguf import GGUFWriter
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=1)
    tok.train_from_iterator(_corpus(size * 6), trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = [t for t, _ in sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])]
    w = GGUFWriter(folder / "vocab.gguf", "qwen2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(vocab)
    w.add_token_types([3 if t == "<|endoftext|>" else 1 for t in vocab])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]])
    w.add_tensor("t", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return folder / "tokenizer.json", folder / "vocab.gguf"


def encode_bench(folder: Path, size: int, repeat: int) -> None:
    from tokenizers import Tokenizer
    from tensorloupe.opening.beside import Found
    from tensorloupe.tokens.hf import JsonVocabulary
    import json
    tokenizer_json, gguf_path = _build_vocab(folder / str(size), size)
    text = "\n".join(_corpus(4000, seed=1))[:10_000]
    text = text[:9_900] + " <|endoftext|> café 日本 😀\t\n  "
    timings: dict[str, list[float]] = {}

    def timed(label, fn):
        start = time.perf_counter()
        value = fn()
        timings.setdefault(label, []).append(time.perf_counter() - start)
        return value

    for _ in range(repeat):
        oracle = timed("tokenizers build", lambda: Tokenizer.from_file(str(tokenizer_json)))
        want = timed("tokenizers encode", lambda: oracle.encode(text).ids)
        data = json.loads(tokenizer_json.read_text())
        vocab = JsonVocabulary(Found(data, str(tokenizer_json)), Found(None, "tokenizer_config.json"))
        timed("json build", vocab.encoder)
        got = timed("json encode", lambda: vocab.encode(text))
        assert got == want, "tokenizer.json ids differ from tokenizers'"
        source = FileSource(gguf_path)
        ckpt = timed("gguf build", lambda: tensorloupe.open(source))
        gv = tokens.vocabulary(ckpt)
        timed("gguf build", gv.encoder)
        timings["gguf build"][-2:] = [sum(timings["gguf build"][-2:])]
        got = timed("gguf encode", lambda: gv.encode(text))
        assert got == want, "GGUF ids differ from tokenizers'"
        timed("json encode again", lambda: vocab.encode(text))
    best = {k: min(v) * 1000 for k, v in timings.items()}
    print(f"\n{size:,}-token vocabulary, {len(text):,} characters -> {len(want):,} tokens (ids equal)")
    print(f"  build: tokenizer.json {best['json build']:8.1f} ms   GGUF (open + read vocabulary) "
          f"{best['gguf build']:8.1f} ms   tokenizers {best['tokenizers build']:8.1f} ms")
    print(f"  encode 10 KB: tokenizer.json {best['json encode']:8.1f} ms   GGUF {best['gguf encode']:8.1f} ms"
          f"   tokenizers {best['tokenizers encode']:8.1f} ms   ratio {best['json encode'] / best['tokenizers encode']:.0f}x")
    print(f"  encode again (words cached): {best['json encode again']:8.1f} ms; "
          f"GGUF bytes read: {source.bytes_read:,} of {gguf_path.stat().st_size:,}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--encode-only", action="store_true", help="only the encoding benchmark")
    args = parser.parse_args()
    if not args.encode_only:
        page_bench(args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        # the Unicode classes are built once per process (charclass.py): paid by the first build
        start = time.perf_counter()
        from tensorloupe.tokens.codec import charclass
        charclass.translate(QWEN2)
        print(f"\nUnicode classes for the pre-tokenizer regex, once per process: "
              f"{(time.perf_counter() - start) * 1000:.0f} ms")
        for size in ENCODE_SIZES:
            encode_bench(Path(tmp), size, args.repeat)


def page_bench(repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vocab.gguf"
        gguf_open.build(path)
        best_ours = min(ours(path) for _ in range(repeat))
        best_theirs = min(theirs(path) for _ in range(repeat))
    elapsed, opened, paged, span = best_ours
    print(f"tensorloupe open + summary + 2 pages: {elapsed * 1000:8.1f} ms")
    print(f"gguf.GGUFReader + the same tokens:    {best_theirs * 1000:8.1f} ms")
    print(f"ratio (tensorloupe / gguf-py):        {elapsed / best_theirs:8.2f}")
    print(f"bytes read to open:                   {opened:,}")
    print(f"bytes read for summary + 2 pages:     {paged:,} (vocabulary array: {span:,} bytes, "
          f"{paged / span * 100:.1f}%)")


if __name__ == "__main__":
    main()
