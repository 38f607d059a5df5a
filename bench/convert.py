"""Benchmark: a PyTorch `.bin` to safetensors, tensorloupe vs torch.load + safetensors' save_file.

    PYTHONPATH=pylib python3 bench/convert.py [--gib 2] [--keep DIR]

Writes a transformer-shaped bf16 state_dict of about --gib GiB with torch.save (the ZIP format
`pytorch_model.bin` has), then converts it, in the same run, each in a child process of its own:
  - tensorloupe.write_safetensors(path, out)                 (stdlib only, the pickle never run)
  - safetensors.torch.save_file(torch.load(path, weights_only=True), out)
and prints both times, their ratio, and each child's peak RSS (VmHWM: Linux carries ru_maxrss
across exec, so a child would report its parent's peak). Each output is checked to be the same
bytes of tensor data as the other's (safe_open, torch.equal per tensor) before anything is said.
Both run warm: one untimed read of the file first puts it in the page cache.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pylib"))

import torch  # noqa: E402

PEAK = """
def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024
"""
OURS = PEAK + """
import sys, time
sys.path.insert(0, {pylib!r})
import tensorloupe
start = time.perf_counter()
tensorloupe.write_safetensors({src!r}, {out!r})
print(time.perf_counter() - start, peak())
"""
THEIRS = PEAK + """
import time
import torch
from safetensors.torch import save_file
start = time.perf_counter()
save_file(torch.load({src!r}, weights_only=True), {out!r}, metadata={{"format": "pt"}})
print(time.perf_counter() - start, peak())
"""


def build(path: Path, gib: float, hidden: int = 2048, ffn: int = 5632) -> int:
    """A Llama-shaped bf16 state dict of about `gib` GiB; returns its tensor bytes."""
    per_layer = 4 * hidden * hidden + 3 * hidden * ffn + 2 * hidden
    embed = 32000 * hidden
    layers = max(1, round((gib * (1 << 30) / 2 - 2 * embed) / per_layer))
    g = torch.Generator().manual_seed(0)
    state = {"model.embed_tokens.weight": torch.randn(32000, hidden, generator=g).to(torch.bfloat16)}
    shapes = {"self_attn.q_proj.weight": (hidden, hidden), "self_attn.k_proj.weight": (hidden, hidden),
              "self_attn.v_proj.weight": (hidden, hidden), "self_attn.o_proj.weight": (hidden, hidden),
              "mlp.gate_proj.weight": (ffn, hidden), "mlp.up_proj.weight": (ffn, hidden),
              "mlp.down_proj.weight": (hidden, ffn), "input_layernorm.weight": (hidden,),
              "post_attention_layernorm.weight": (hidden,)}
    for layer in range(layers):
        for name, shape in shapes.items():
            state[f"model.layers.{layer}.{name}"] = torch.randn(*shape, generator=g).to(torch.bfloat16)
    state["lm_head.weight"] = torch.randn(32000, hidden, generator=g).to(torch.bfloat16)
    torch.save(state, path)
    return sum(t.numel() * t.element_size() for t in state.values())


def child(code: str, **names) -> tuple[float, int]:
    run = subprocess.run([sys.executable, "-c", code.format(pylib=str(ROOT / "pylib"), **names)],
                         capture_output=True, text=True, check=True)
    seconds, peak = run.stdout.split()
    return float(seconds), int(peak)


def same(a: Path, b: Path) -> int:
    from safetensors import safe_open
    with safe_open(str(a), "pt") as fa, safe_open(str(b), "pt") as fb:
        assert sorted(fa.keys()) == sorted(fb.keys())
        for name in fa.keys():
            x, y = fa.get_tensor(name), fb.get_tensor(name)
            assert x.dtype == y.dtype and torch.equal(x, y), name
        return len(list(fa.keys()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, default=2.0, help="size of the .bin (default 2)")
    parser.add_argument("--keep", help="write the files here instead of a temporary folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        src = folder / "pytorch_model.bin"
        data = build(src, args.gib)
        with open(src, "rb") as f:       # into the page cache, for both
            while f.read(64 << 20):
                pass
        ours, theirs = folder / "ours.safetensors", folder / "theirs.safetensors"
        t_ours, m_ours = child(OURS, src=str(src), out=str(ours))
        t_theirs, m_theirs = child(THEIRS, src=str(src), out=str(theirs))
        count = same(ours, theirs)
        size = src.stat().st_size
        print(f"{src.name}: {size / (1 << 30):.2f} GiB, {count} tensors, {data:,} bytes of tensor data")
        print(f"  tensorloupe convert:            {t_ours:6.2f} s   peak RSS {m_ours / 1e6:7.0f} MB")
        print(f"  torch.load + save_file:         {t_theirs:6.2f} s   peak RSS {m_theirs / 1e6:7.0f} MB")
        print(f"  time ratio (ours / theirs): {t_ours / t_theirs:.2f}; peak RSS ratio "
              f"{m_ours / m_theirs:.3f}; outputs equal tensor for tensor")


if __name__ == "__main__":
    main()
