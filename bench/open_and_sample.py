"""Benchmark: open (list tensors) and sample the biggest tensor, tensorloupe vs safetensors.safe_open.

Two files are generated in a temp dir: a sparse 8 GiB safetensors (one huge BF16 tensor plus a
few small ones; the holes cost no disk) and a dense 256 MiB one with random F16 weights. For
each, both libraries list the tensors and compute statistics of 65,536 elements of the biggest
tensor taken from the same 32 windows; we print wall times, their ratio, and tensorloupe's bytes
read (safetensors memory-maps, so its bytes are whatever the page cache touches).

    python bench/open_and_sample.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import struct
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors import safe_open

import tensorloupe
from tensorloupe.sampler.sampling import plan_windows

SAMPLES = 65536
REPEAT = 5


def write_sparse(path: Path) -> None:
    rows, cols = 131072, 32768  # BF16: 8 GiB
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for i in range(8):
        header[f"small.{i}"] = {"dtype": "F32", "shape": [64], "data_offsets": [offset, offset + 256]}
        offset += 256
    header["huge"] = {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [offset, offset + rows * cols * 2]}
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.write(np.random.default_rng(0).standard_normal(8 * 64).astype(np.float32).tobytes())
        f.truncate(8 + len(text) + offset + rows * cols * 2)


def write_dense(path: Path) -> None:
    from safetensors.numpy import save_file
    rng = np.random.default_rng(1)
    tensors = {f"layers.{i}.mlp.weight": (rng.standard_normal((4096, 8192), dtype=np.float32) * 0.02)
               .astype(np.float16) for i in range(4)}
    tensors.update({f"layers.{i}.norm.weight": np.ones(4096, np.float16) for i in range(4)})
    save_file(tensors, str(path))


def best(fn):
    times = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def ours_list(path):
    ckpt = tensorloupe.open(path)
    names = [t.name for t in ckpt.tensors]
    ckpt.close()
    return names


def ours_sample(path, name):
    ckpt = tensorloupe.open(path)
    stats = tensorloupe.sample(ckpt.tensor(name), SAMPLES).stats
    read = ckpt.bytes_read(), ckpt.reads()
    ckpt.close()
    return stats, read


def reference_list(path):
    with safe_open(str(path), "np") as f:
        return list(f.keys())


def reference_sample(path, name):
    # the same windows, sliced through safe_open (which memory-maps), statistics by numpy
    with safe_open(str(path), "pt") as f:
        view = f.get_slice(name)
        shape = view.get_shape()
        cols = int(np.prod(shape[1:]))
        parts = []
        for start, count in plan_windows(int(np.prod(shape)), SAMPLES):
            r0, r1 = start // cols, (start + count - 1) // cols + 1
            block = view[r0:r1].float().numpy().reshape(-1)
            offset = start - r0 * cols
            parts.append(block[offset:offset + count])
        x = np.concatenate(parts).astype(np.float64)
        return x.min(), x.max(), x.mean(), x.std()


def report(label, path, biggest):
    t_list, names = best(lambda: ours_list(path))
    r_list, ref_names = best(lambda: reference_list(path))
    assert sorted(names) == sorted(ref_names)
    ckpt = tensorloupe.open(path)
    open_bytes, open_reads = ckpt.bytes_read(), ckpt.reads()
    ckpt.close()
    t_sample, (stats, (sample_bytes, sample_reads)) = best(lambda: ours_sample(path, biggest))
    r_sample, ref = best(lambda: reference_sample(path, biggest))
    assert abs(stats.mean - ref[2]) <= 1e-9 + 1e-6 * abs(ref[2]), (stats.mean, ref[2])
    size = path.stat().st_size
    print(f"\n{label}: {path.name}, {size / 2**30:.2f} GiB, {len(names)} tensors, biggest {biggest!r}")
    print(f"  list tensors   tensorloupe {t_list * 1e3:8.2f} ms   safe_open {r_list * 1e3:8.2f} ms"
          f"   ratio {t_list / r_list:6.2f}x   bytes read {open_bytes:,} in {open_reads} reads")
    print(f"  sample {SAMPLES} tensorloupe {t_sample * 1e3:8.2f} ms   safe_open+numpy {r_sample * 1e3:8.2f} ms"
          f"   ratio {t_sample / r_sample:6.2f}x   bytes read {sample_bytes:,} in {sample_reads} reads"
          f" ({sample_bytes / size * 100:.4f}% of the file)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="write the files here instead of a temp dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        sparse, dense = folder / "sparse-8gib.safetensors", folder / "dense-256mib.safetensors"
        if not sparse.exists():
            write_sparse(sparse)
        if not dense.exists():
            write_dense(dense)
        print(f"best of {REPEAT} runs; ratio = tensorloupe / reference (below 1 is faster)")
        report("sparse", sparse, "huge")
        report("dense", dense, "layers.0.mlp.weight")
        import open_containers   # ONNX, NumPy, DDUF, llamafile: bytes read at open (issue 26)
        open_containers.report(folder)
    import open_hdf5   # bench/open_hdf5.py: HDF5, Keras, NeMo, diffusers folders (issue 26)
    print()
    open_hdf5.main()


if __name__ == "__main__":
    main()
