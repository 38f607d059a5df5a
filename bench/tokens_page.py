"""Benchmark a page of a 262,144-token GGUF vocabulary against gguf-py, measured in the same run.

    PYTHONPATH=pylib python3 bench/tokens_page.py [--repeat N]

Builds the 262k-vocabulary GGUF of bench/gguf_open.py, then:
  tensorloupe: open + the tokenizer summary + page 1 (50 tokens) + a page at the end, on an
               uncached file source, so every byte asked for is counted;
  gguf-py:     GGUFReader (decodes every field) and the same 100 tokens from its parts.
Prints both times, the ratio, and the bytes tensorloupe read for the pages against the bytes of
the vocabulary array.
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vocab.gguf"
        gguf_open.build(path)
        best_ours = min(ours(path) for _ in range(args.repeat))
        best_theirs = min(theirs(path) for _ in range(args.repeat))
    elapsed, opened, paged, span = best_ours
    print(f"tensorloupe open + summary + 2 pages: {elapsed * 1000:8.1f} ms")
    print(f"gguf.GGUFReader + the same tokens:    {best_theirs * 1000:8.1f} ms")
    print(f"ratio (tensorloupe / gguf-py):        {elapsed / best_theirs:8.2f}")
    print(f"bytes read to open:                   {opened:,}")
    print(f"bytes read for summary + 2 pages:     {paged:,} (vocabulary array: {span:,} bytes, "
          f"{paged / span * 100:.1f}%)")


if __name__ == "__main__":
    main()
