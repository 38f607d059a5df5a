"""Bytes read to open (list every tensor of) ONNX, .npy, .npz, DDUF and llamafile files of ~32 MiB,
each written by its own library, against the budget issue 26 sets: the file's structure (the
bytes that are not tensor payload: headers, directories, protobuf fields; for a llamafile not its
executable) plus 64 KiB (the first block every open reads). Where the structure is spread between
payloads it is read in small windows, which the budget allows for: 512 bytes per ONNX initializer
after a skipped raw_data (wire.WINDOW), the blocks of a ZIP's central directory (zipfile's reads
go through the 64 KiB block cache), 4 KiB per deflated .npz member (its first inflate), and for a
llamafile what the GGUF reader reads of the bare .gguf (it reads ahead in its metadata).

    python bench/open_containers.py [DIR]      (also printed by bench/open_and_sample.py)
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

import tensorloupe

MIB = 1 << 20
BUDGET = 64 << 10


def _weights(n: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {f"layers.{i}.weight": rng.standard_normal((1024, 2048)).astype(np.float32) for i in range(n)}


def write_onnx(folder: Path, external: bool) -> Path:
    import onnx
    from onnx import helper, numpy_helper
    inits = [numpy_helper.from_array(v, k) for k, v in _weights().items()]
    model = helper.make_model(helper.make_graph([], "bench", [], [], initializer=inits))
    path = folder / ("external" if external else "inline") / "model.onnx"
    path.parent.mkdir(exist_ok=True)
    onnx.save_model(model, str(path), save_as_external_data=external,
                    all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0)
    return path


def write_npy(folder: Path) -> Path:
    np.save(folder / "big.npy", np.concatenate(list(_weights().values())))
    return folder / "big.npy"


def write_npz(folder: Path, compressed: bool) -> Path:
    path = folder / ("compressed.npz" if compressed else "stored.npz")
    (np.savez_compressed if compressed else np.savez)(path, **_weights())
    return path


def write_dduf(folder: Path) -> Path:
    from huggingface_hub import export_folder_as_dduf
    from safetensors.numpy import save_file
    pipe = folder / "pipe"
    weights = list(_weights().items())
    (pipe / "unet").mkdir(parents=True)
    (pipe / "vae").mkdir()
    (pipe / "model_index.json").write_text(json.dumps({"unet": ["d", "U"], "vae": ["d", "V"]}))
    for component, part in (("unet", weights[:2]), ("vae", weights[2:])):
        (pipe / component / "config.json").write_text("{}")
        save_file(dict(part), str(pipe / component / "m.safetensors"))
    export_folder_as_dduf(folder / "pipe.dduf", pipe)
    return folder / "pipe.dduf"


def write_llamafile(folder: Path) -> Path:
    import gguf
    writer = gguf.GGUFWriter(str(folder / "m.gguf"), "llama")
    for name, value in _weights().items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    path = folder / "m.llamafile"
    with open(path, "wb") as f:
        f.write(b"MZqFpD='\n" + b"\0" * MIB)      # an executable's megabyte before the ZIP
        with zipfile.ZipFile(f, "w") as z:
            z.write(folder / "m.gguf", "m.gguf")
    return path


def structure_bytes(ckpt, path: Path, label: str) -> int:
    """Bytes of the file(s) that are no tensor payload (deflated: no member's compressed bytes)."""
    size = path.stat().st_size + sum(s.size for s in ckpt.sources[1:])
    if ckpt.extras.get("npz", {}).get("deflated"):
        with zipfile.ZipFile(path) as z:
            return size - sum(i.compress_size for i in z.infolist())
    if label == "llamafile":
        size -= ckpt.extras["container"]["executable_bytes"]
    return size - sum(t.nbytes for t in ckpt.tensors)


def directory_blocks(path: Path) -> int:
    """The 64 KiB blocks a ZIP's central directory lies in (cached reads are whole blocks)."""
    size = path.stat().st_size
    with zipfile.ZipFile(path) as z:
        first = z.start_dir // BUDGET
    return min(size, ((size - 1) // BUDGET + 1) * BUDGET) - first * BUDGET


def allowance(ckpt, label: str, path: Path) -> int:
    if label.startswith("onnx"):
        return 512 * len(ckpt.tensors)
    if label == "npy":
        return 0
    extra = directory_blocks(path)
    if ckpt.extras.get("npz", {}).get("deflated"):
        extra += 4096 * ckpt.extras["npz"]["deflated"]
    if label == "llamafile":
        with tensorloupe.open(path.parent / "m.gguf") as bare:
            extra += bare.bytes_read()
    return extra


def report(folder: Path) -> list[tuple]:
    files = [("onnx (inline)", write_onnx(folder, False)), ("onnx (external)", write_onnx(folder, True)),
             ("npy", write_npy(folder)), ("npz (stored)", write_npz(folder, False)),
             ("npz (deflated)", write_npz(folder, True)), ("dduf", write_dduf(folder)),
             ("llamafile", write_llamafile(folder))]
    rows = []
    print(f"\n{'format':16} {'file MiB':>8} {'tensors':>7} {'structure B':>11} {'open read B':>11}"
          f" {'reads':>5} {'budget B':>9} {'ms':>6}")
    for label, path in files:
        start = time.perf_counter()
        with tensorloupe.open(path) as ckpt:
            elapsed = time.perf_counter() - start
            size = path.stat().st_size + sum(s.size for s in ckpt.sources[1:])
            structure = structure_bytes(ckpt, path, label)
            budget = structure + BUDGET + allowance(ckpt, label, path)
            read = ckpt.bytes_read()
            rows.append((label, size, len(ckpt.tensors), structure, read, ckpt.reads(), budget))
            print(f"{label:16} {size / MIB:8.1f} {len(ckpt.tensors):7} {structure:>11,} {read:>11,} "
                  f"{ckpt.reads():>5} {budget:>9,} {elapsed * 1e3:6.1f}"
                  + ("" if read <= budget else "   OVER BUDGET"))
    return rows


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tmp)   # [DIR]: keep the files
        folder.mkdir(parents=True, exist_ok=True)
        report(folder)


if __name__ == "__main__":
    main()
