"""Benchmark: list the tensors of a large PyTorch state_dict, tensorloupe vs torch.load.

    PYTHONPATH=pylib python3 bench/torch_open.py [--layers 320] [--keep DIR]

Writes a transformer-shaped bf16 state_dict (9 tensors per layer; the default 320 layers give
2,882 tensors and ~1.1 GiB) to a temporary directory with torch.save, then times, in the same run:
  - tensorloupe.open(path) + reading every descriptor (name, dtype, shape)
  - torch.load(path, mmap=True, weights_only=True) + the same listing
and prints the ratio and the bytes tensorloupe read. Both are timed warm (best of --repeat) after
one untimed run, so both read from the page cache.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "pylib"))

import torch  # noqa: E402

import tensorloupe  # noqa: E402


def build(path: Path, layers: int, hidden: int = 384, ffn: int = 1024) -> int:
    embed = torch.empty(4096, hidden, dtype=torch.bfloat16)
    state: dict[str, torch.Tensor] = {"model.embed_tokens.weight": embed}
    shapes = {"self_attn.q_proj.weight": (hidden, hidden), "self_attn.k_proj.weight": (hidden, hidden),
              "self_attn.v_proj.weight": (hidden, hidden), "self_attn.o_proj.weight": (hidden, hidden),
              "mlp.gate_proj.weight": (ffn, hidden), "mlp.up_proj.weight": (ffn, hidden),
              "mlp.down_proj.weight": (hidden, ffn), "input_layernorm.weight": (hidden,),
              "post_attention_layernorm.weight": (hidden,)}
    for layer in range(layers):
        for name, shape in shapes.items():
            state[f"model.layers.{layer}.{name}"] = torch.full(shape, layer / layers, dtype=torch.bfloat16)
    state["lm_head.weight"] = torch.empty(4096, hidden, dtype=torch.bfloat16)
    torch.save(state, path)
    return len(state)


def listing_tensorloupe(path: Path):
    with tensorloupe.open(path) as ckpt:
        rows = [(t.name, t.dtype, t.shape) for t in ckpt.tensors]
        return rows, ckpt.bytes_read(), ckpt.reads()


def listing_torch(path: Path):
    state = torch.load(path, mmap=True, weights_only=True)
    return [(name, str(t.dtype), tuple(t.shape)) for name, t in state.items()]


def best(fn, repeat: int):
    fn()  # warm the page cache and imports
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=320)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="write the checkpoint here instead of a temp dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = (args.keep or Path(tmp)) / "bench_state_dict.pt"
        start = time.perf_counter()
        count = build(path, args.layers)
        size = os.path.getsize(path)
        print(f"wrote {count} tensors, {size / 2**30:.2f} GiB in {time.perf_counter() - start:.1f} s")
        ours, (rows, bytes_read, reads) = best(lambda: listing_tensorloupe(path), args.repeat)
        theirs, torch_rows = best(lambda: listing_torch(path), args.repeat)
        assert [(n, tuple(s)) for n, _, s in rows] == [(n, s) for n, _, s in torch_rows]
        print(f"tensorloupe: {ours * 1000:8.1f} ms  ({reads} reads, {bytes_read:,} bytes read = "
              f"{bytes_read / size:.4%} of the file)")
        print(f"torch.load(mmap=True, weights_only=True): {theirs * 1000:8.1f} ms")
        print(f"ratio tensorloupe / torch: {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
