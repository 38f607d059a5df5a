"""Benchmark: `tensorloupe.compare` of a 32-layer model, HF safetensors against a GGUF Q8_0,
against numpy doing the same statistics.

Two pairs of files are generated in a temp dir:
- sparse (bytes): a Llama-3-8B-shaped model (32 layers, vocab 128,256, hidden 4,096, GQA 32/8,
  ffn 14,336): BF16 safetensors (16 GB) and Q8_0 GGUF (8.5 GB), holes only, no disk used. We print
  the bytes tensorloupe reads for a sampled comparison, against the bytes numpy needs to compute
  the same statistics on every element (both files), and the ratio.
- dense (time): the same layout at hidden 128 / ffn 352 / vocab 1,024 (6.2 M parameters): random
  F32 safetensors and its Q8_0 GGUF made like llama.cpp's converter makes it (Q/K rows permuted,
  gguf-py's Q8_0 quantizer). We time tensorloupe sampled and exact, and numpy computing the same
  statistics on the same positions (numpy reads the GGUF with gguf-py and dequantises with
  gguf.quants), and print the ratios. The numbers are checked to agree before they are printed.

    python bench/compare.py
"""

from __future__ import annotations

import json
import struct
import sys
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures"))
sys.path.insert(0, str(ROOT / "pylib"))

import gguf_files as fx  # noqa: E402

import tensorloupe  # noqa: E402
from tensorloupe import namemap  # noqa: E402
from tensorloupe.sampler.sampling import plan_windows  # noqa: E402

LAYERS = 32
BIG = {"vocab": 128256, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8}
SMALL = {"vocab": 1024, "hidden": 128, "ffn": 352, "heads": 8, "kv_heads": 4}
Q8_0, F32, BF16 = 8, 0, 30
SAMPLES = 16384


def shapes(d: dict) -> dict[str, tuple[int, ...]]:
    h, kv = d["hidden"], d["hidden"] // d["heads"] * d["kv_heads"]
    out = {"model.embed_tokens.weight": (d["vocab"], h)}
    for n in range(LAYERS):
        p = f"model.layers.{n}."
        out.update({p + "input_layernorm.weight": (h,), p + "self_attn.q_proj.weight": (h, h),
                    p + "self_attn.k_proj.weight": (kv, h), p + "self_attn.v_proj.weight": (kv, h),
                    p + "self_attn.o_proj.weight": (h, h), p + "post_attention_layernorm.weight": (h,),
                    p + "mlp.gate_proj.weight": (d["ffn"], h), p + "mlp.up_proj.weight": (d["ffn"], h),
                    p + "mlp.down_proj.weight": (h, d["ffn"])})
    out.update({"model.norm.weight": (h,), "lm_head.weight": (d["vocab"], h)})
    return out


def gguf_name(hf: str) -> str:
    return namemap.to_gguf(hf, "llama").gguf


def write_sparse(folder: Path) -> tuple[Path, Path]:
    table = shapes(BIG)
    header, offset = {}, 0
    for name, shape in table.items():
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    st = folder / "big-bf16.safetensors"
    with open(st, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + offset)
    tensors, offset = [], 0
    for name, shape in table.items():
        qtype = Q8_0 if len(shape) == 2 else F32
        n = int(np.prod(shape)) // 32 * 34 if qtype == Q8_0 else int(np.prod(shape)) * 4
        tensors.append((gguf_name(name), tuple(reversed(shape)), qtype, offset))
        offset += n + (-n % 32)
    kvs = [("general.architecture", fx.STRING_T, "llama"), ("llama.attention.head_count", 4, BIG["heads"]),
           ("llama.attention.head_count_kv", 4, BIG["kv_heads"]), ("llama.block_count", 4, LAYERS)]
    head = fx.raw_gguf(kvs, tensors)
    gg = folder / "big-q8_0.gguf"
    with open(gg, "wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)
    return st, gg


def converter_permute(w, n_head):
    # LlamaModel.permute from llama.cpp's conversion/llama.py
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_dense(folder: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(5)
    table = shapes(SMALL)
    hf = {name: (1.0 + 0.1 * rng.standard_normal(shape) if len(shape) == 1 else
                 0.02 * rng.standard_normal(shape)).astype(np.float32) for name, shape in table.items()}
    st = folder / "small-f32.safetensors"
    save_file(hf, str(st))
    gg = folder / "small-q8_0.gguf"
    w = gguf.GGUFWriter(str(gg), "llama")
    w.add_head_count(SMALL["heads"])
    w.add_head_count_kv(SMALL["kv_heads"])
    w.add_block_count(LAYERS)
    for name, a in hf.items():
        if name.endswith("q_proj.weight"):
            a = converter_permute(a, SMALL["heads"])
        elif name.endswith("k_proj.weight"):
            a = converter_permute(a, SMALL["kv_heads"])
        if a.ndim == 2:
            w.add_tensor(gguf_name(name), gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(gguf_name(name), a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return st, gg


def numpy_compare(st: Path, gg: Path, sampled: bool) -> dict[str, float]:
    """The same statistics with numpy: SNR per tensor, on every element or on the positions
    tensorloupe samples (the same plan_windows)."""
    hf = load_file(str(st))
    reader = gguf.GGUFReader(str(gg))
    by_name = {t.name: t for t in reader.tensors}
    out = {}
    for name, a in hf.items():
        t = by_name[gguf_name(name)]
        b = gguf.quants.dequantize(t.data, t.tensor_type).reshape(a.shape)
        heads = {"q_proj": SMALL["heads"], "k_proj": SMALL["kv_heads"]}.get(name.split(".")[-2])
        if heads:
            b = b[np.argsort(converter_permute(np.arange(a.shape[0]), heads))]
        a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
        if sampled:
            index = np.concatenate([np.arange(s, s + n) for s, n in plan_windows(a.size, SAMPLES, 32)])
            a64, b64 = a64[index], b64[index]
        d = a64 - b64
        out[name] = (10 * np.log10((a64 @ a64) / (d @ d)) if d.any() else np.inf,
                     np.abs(d).max(), np.linalg.norm(d) / np.linalg.norm(a64),
                     a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))
    return out


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        st, gg = write_sparse(folder)
        seconds, result = timed(lambda: tensorloupe.compare(st, gg, samples=SAMPLES))
        assert result.summary["matched"] == len(shapes(BIG))
        ours = result.bytes_read["a"] + result.bytes_read["b"]
        full = sum(t.nbytes for t in tensorloupe.open(st).tensors) + sum(t.nbytes for t in tensorloupe.open(gg).tensors)
        print(f"sparse, 32 layers, {len(shapes(BIG))} tensor pairs, BF16 {st.stat().st_size / 1e9:.1f} GB vs "
              f"Q8_0 {gg.stat().st_size / 1e9:.1f} GB, {SAMPLES} samples per tensor:")
        print(f"  tensorloupe sampled: {ours:,} bytes read (A {result.bytes_read['a']:,}, "
              f"B {result.bytes_read['b']:,}) in {seconds:.2f} s")
        print(f"  numpy, same statistics on every element: {full:,} bytes (both tensors' bytes)")
        print(f"  ratio bytes read: {ours / full:.5f} ({full / ours:,.0f}x fewer)")

        st, gg = write_dense(folder)
        rows = []
        for label, exact in (("sampled", False), ("exact", True)):
            ours_s, result = timed(lambda: tensorloupe.compare(st, gg, samples=SAMPLES, exact=exact))
            ref_s, ref = timed(lambda: numpy_compare(st, gg, sampled=not exact))
            worst = 0.0
            for row in result.rows:
                expected = ref[row.name]
                if row.diff is not None:
                    worst = max(worst, abs(row.diff.snr_db - expected[0]))
            assert worst < 1e-6, worst
            rows.append((label, ours_s, ref_s, result.bytes_read["a"] + result.bytes_read["b"], worst))
        params = sum(int(np.prod(s)) for s in shapes(SMALL).values())
        print(f"\ndense, 32 layers, {params / 1e6:.1f} M parameters, F32 safetensors vs Q8_0 GGUF (Q/K permuted):")
        print(f"  {'mode':8} {'tensorloupe':>12} {'numpy':>9} {'ratio':>7} {'bytes read':>12}  max |SNR diff|")
        for label, ours_s, ref_s, read, worst in rows:
            print(f"  {label:8} {ours_s:10.2f} s {ref_s:7.2f} s {ours_s / ref_s:6.1f}x {read:12,}  {worst:.1e} dB")
        print(f"  median SNR (Q8_0 vs F32): {result.summary['median_snr_db']:.2f} dB")


if __name__ == "__main__":
    main()
