"""Benchmark: a Llama-7B-shaped PEFT LoRA adapter (32 layers, q/k/v/o_proj, r 16, hidden 4096,
BF16 factors: 33.6 MB) opened, and one 4096 x 4096 ΔW viewed: sampled statistics, a 256 x 256
heatmap lattice, the health scan of every ΔW, exact statistics, each timed with its bytes read, against numpy computing the
whole ΔW (`scale * B @ A` in float64) in the same run.

    python bench/adapters.py
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

import tensorloupe
from tensorloupe.sampler.sampling import exact_stats, grid, sample

LAYERS, HIDDEN, R, ALPHA = 32, 4096, 16, 32
NAME = "model.layers.7.self_attn.q_proj.weight"


def write(folder: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for i in range(LAYERS):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            stem = f"base_model.model.model.layers.{i}.self_attn.{proj}."
            tensors[stem + "lora_A.weight"] = (torch.randn(R, HIDDEN, generator=gen) * 0.01).bfloat16()
            tensors[stem + "lora_B.weight"] = (torch.randn(HIDDEN, R, generator=gen) * 0.01).bfloat16()
    save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    (folder / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": R, "lora_alpha": ALPHA, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}))


def timed(label: str, ckpt, fn):
    before = ckpt.bytes_read()
    start = time.perf_counter()
    out = fn()
    print(f"  {label:<34} {time.perf_counter() - start:8.3f} s  {ckpt.bytes_read() - before:>12,} bytes read")
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write(folder)
        size = (folder / "adapter_model.safetensors").stat().st_size
        print(f"adapter: {size:,} bytes, {LAYERS * 4} pairs, r {R}")
        start = time.perf_counter()
        ckpt = tensorloupe.open(folder)
        print(f"  {'open (ΔW listed)':<34} {time.perf_counter() - start:8.3f} s  {ckpt.bytes_read():>12,} bytes read")
        t = ckpt.tensor(NAME)
        timed("sampled stats (65,536 values)", ckpt, lambda: sample(t, 65536))
        timed("heatmap lattice 256 x 256", ckpt, lambda: grid(t, 256, 256))
        report = timed("health scan (every ΔW, 32 KiB each)", ckpt, lambda: tensorloupe.health(ckpt))
        print(f"  health flags: {report.counts()}")
        stats = timed("exact stats (16.8M values)", ckpt, lambda: exact_stats(t))
        a, b = (p.numpy().astype(np.float64) for p in t.parts)
        start = time.perf_counter()
        ref = (ALPHA / R * (b @ a)).astype(np.float32)
        print(f"  {'numpy: whole ΔW, float64':<34} {time.perf_counter() - start:8.3f} s")
        print(f"  exact mean {stats.mean:.9g} vs numpy {ref.astype(np.float64).mean():.9g}; "
              f"min/max equal: {stats.min == ref.min() and stats.max == ref.max()}")
        ckpt.close()


if __name__ == "__main__":
    main()
