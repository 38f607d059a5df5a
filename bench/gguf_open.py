"""Benchmark the GGUF reader against gguf-py, measured in the same run.

    PYTHONPATH=pylib python3 bench/gguf_open.py [--keep DIR] [--repeat N]

1. Open a GGUF with a 262,144-entry token list (plus scores, token types and 250k merges) and 516
   tensors: tensorloupe.open (pure Python, lazy arrays) vs gguf.GGUFReader (numpy memmap, decodes
   every field). Prints both times, the ratio and the byte-source reads tensorloupe used.
2. Dequantize 1M elements of Q4_K and of Q8_0: tensorloupe.values (pure Python) vs
   gguf.quants.dequantize (numpy). Prints elements/s of each and the ratio.

numpy and gguf are the reference here only; tensorloupe itself runs on the standard library.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter
from gguf.quants import dequantize

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pylib"))
sys.path.insert(0, str(ROOT / "fixtures"))

import gguf_files as fx  # noqa: E402

import tensorloupe  # noqa: E402

VOCAB = 262_144
MERGES = 250_000
SMALL_TENSORS = 512
QUANT_ELEMS = 1 << 20


def build(path: Path) -> None:
    rng = random.Random(1)
    letters = "abcdefghijklmnopqrstuvwxyz▁ĠéØ"
    tokens = ["".join(rng.choices(letters, k=rng.randint(1, 10))) + str(i) for i in range(VOCAB)]
    w = GGUFWriter(path, "llama")
    w.add_name("bench-256k-vocab")
    w.add_block_count(SMALL_TENSORS // 2)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_scores([float(i) for i in range(VOCAB)])
    w.add_token_types([1] * VOCAB)
    w.add_token_merges([f"{tokens[i]} {tokens[i + 1]}" for i in range(MERGES)])
    nrng = np.random.default_rng(2)
    for i in range(SMALL_TENSORS):
        w.add_tensor(f"blk.{i // 2}.norm{i % 2}.weight", np.ones(256, dtype=np.float32))
    side = int(QUANT_ELEMS ** 0.5)
    w.add_tensor("q4_k", fx.quantized(Q.Q4_K, (side, side), nrng), raw_dtype=Q.Q4_K)
    w.add_tensor("q8_0", fx.quantized(Q.Q8_0, (side, side), nrng), raw_dtype=Q.Q8_0)
    w.add_tensor("f16", np.ones((side, 64), dtype=np.float16))
    w.add_tensor("f32", np.ones((side, 64), dtype=np.float32))
    fx.finish(w)


def best(fn, repeat: int) -> tuple[float, object]:
    """Best of `repeat` runs; a run slower than 2 s is not repeated (its noise is negligible)."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
        if times[-1] > 2:
            break
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="write the test file here and keep it")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.keep or tmp) / "bench-256k-vocab.gguf"
        path.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        build(path)
        size = path.stat().st_size
        print(f"file: {path.name}, {size:,} bytes, {VOCAB:,} tokens, {MERGES:,} merges, "
              f"{SMALL_TENSORS + 4} tensors (written in {time.perf_counter() - start:.1f} s)")

        def ours():
            ckpt = tensorloupe.open(path)
            ckpt.close()
            return ckpt

        t_ours, ckpt = best(ours, args.repeat)
        t_ref, reader = best(lambda: GGUFReader(path), args.repeat)
        header = ckpt.extras["gguf"]["data_offset"]
        print("\nopen (header, metadata, tensor infos)")
        print(f"  tensorloupe.open     {t_ours * 1000:9.1f} ms   ({len(ckpt.tensors)} tensors, "
              f"{ckpt.reads()} byte-source reads, {ckpt.bytes_read():,} bytes read; "
              f"header is {header:,} bytes)")
        print(f"  gguf.GGUFReader      {t_ref * 1000:9.1f} ms")
        print(f"  ratio                {t_ref / t_ours:9.1f}x (gguf-py time / tensorloupe time)")

        ckpt = tensorloupe.open(path)
        refs = {t.name: t for t in reader.tensors}
        print(f"\ndequantize {QUANT_ELEMS:,} elements")
        for name in ("q4_k", "q8_0"):
            tensor = ckpt.tensor(name)
            t_deq, got = best(lambda: tensorloupe.values(tensor, 0, QUANT_ELEMS), args.repeat)
            ref = refs[name]
            t_np, want = best(lambda: dequantize(ref.data, ref.tensor_type), args.repeat)
            assert np.array_equal(np.float32(got), want.reshape(-1)), f"{name}: values differ"
            ours_rate, ref_rate = QUANT_ELEMS / t_deq, QUANT_ELEMS / t_np
            print(f"  {tensor.dtype:5}  tensorloupe {ours_rate / 1e6:7.2f} M elem/s ({t_deq * 1000:7.1f} ms)"
                  f"   gguf-py numpy {ref_rate / 1e6:7.2f} M elem/s ({t_np * 1000:6.1f} ms)"
                  f"   ratio {ref_rate / ours_rate:5.1f}x slower than numpy")
        ckpt.close()


if __name__ == "__main__":
    main()
