"""Bytes read to open (list every tensor of) the container formats of issue 26 read by
formats/hdf5, formats/nemo.py and opening/pipeline.py, against each file's size: opening must
read at most the header/directory plus 64 KiB.

    python bench/open_hdf5.py              (bench/open_and_sample.py prints it too)

Files, written by the real libraries in a temp dir: an h5py file of 16 MiB (contiguous and
chunked+deflate datasets), the same as Keras's layout in a stored .keras ZIP, a NeMo-layout tar
around a 16 MiB torch.save, and the tiny diffusers pipeline folder of fixtures/. Then the paged
chunk indexes of fixtures/hdf5_files.py's h5py-paged.h5: bytes at open, and the bytes one
chunk's read costs against its whole chunk index (a lookup reads one page).
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))

import hdf5_files  # noqa: E402

import tensorloupe
from tensorloupe.source import FileSource

LIMIT = 64 << 10


def write_h5(path: Path) -> Path:
    import h5py
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        for i in range(4):
            f[f"layers/dense_{i}/vars/0"] = rng.standard_normal((1024, 512)).astype("f4")
            f.create_dataset(f"layers/dense_{i}/vars/1", data=rng.standard_normal((512, 1024)).astype("f4"),
                             chunks=(64, 1024), compression="gzip")
            f[f"layers/dense_{i}/vars"].attrs["name"] = f"dense_{i}"
    return path


def write_keras(h5: Path, path: Path) -> Path:
    config = {"class_name": "Sequential", "config": {"name": "bench", "layers": [
        {"class_name": "Dense", "config": {"name": f"dense_{i}"}} for i in range(4)]}}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("config.json", json.dumps(config))
        z.write(h5, "model.weights.h5")
    return path


def write_nemo(path: Path) -> Path:
    import torch
    import nemo_files
    g = torch.Generator().manual_seed(0)
    buffer = io.BytesIO()
    torch.save({f"encoder.layers.{i}.weight": torch.randn(1024, 1024, generator=g) for i in range(4)},
               buffer)
    with tarfile.open(path, "w:") as tar:
        for name, data in (("./model_config.yaml", nemo_files.CONFIG.encode()),
                           ("./model_weights.ckpt", buffer.getvalue())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def measure(label: str, target) -> None:
    paths = [p for p in Path(target).rglob("*") if p.is_file()] if Path(target).is_dir() else [Path(target)]
    size = sum(p.stat().st_size for p in paths)
    start = time.perf_counter()
    if Path(target).is_dir():
        ckpt = tensorloupe.open(target)
        read = ckpt.bytes_read()
        directory = sum(p.stat().st_size for p in paths if p.suffix == ".json")
    else:
        source = FileSource(target)
        ckpt = tensorloupe.open(source)
        read, directory = source.bytes_read, 0
    took = time.perf_counter() - start
    data = sum(t.nbytes for t in ckpt.tensors)
    verdict = "ok" if read <= max(size - data, directory) + LIMIT else "OVER"
    print(f"  {label:<10} {ckpt.format:<10} {len(ckpt.tensors):>4} tensors  file {size:>11,} B"
          f"  read at open {read:>9,} B ({read / size * 100:6.3f}%)  {took * 1e3:7.1f} ms  {verdict}")
    ckpt.close()


def measure_paged(path: Path) -> None:
    """One chunk of each paged index: what its read costs, against what all its pages cost."""
    for name, at in (("fixed/plain", 1500), ("extensible/plain", hdf5_files.EA_PAGED_START + 3 * 2048 + 1035)):
        source = FileSource(path)
        t = tensorloupe.open(source).tensor(name)
        before = source.bytes_read
        tensorloupe.values(t, at, 1)
        one = source.bytes_read - before
        before = source.bytes_read
        tensorloupe.values(t, 0, t.numel)
        rest = source.bytes_read - before
        print(f"  {name:<17} one chunk reads {one:>7,} B (header, prefix, one page); every chunk "
              f"{one + rest:>7,} B ({(one + rest) / one:4.1f}x)")


def main() -> None:
    print("bytes read to list every tensor (limit: the non-tensor bytes + 64 KiB)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        h5 = write_h5(folder / "bench.weights.h5")
        measure("hdf5", h5)
        measure("keras", write_keras(h5, folder / "bench.keras"))
        measure("nemo", write_nemo(folder / "bench.nemo"))
        import diffusers_files
        pipeline = diffusers_files.write_all(folder)["diffusers_pipeline"]
        measure("diffusers", pipeline)
        paged = hdf5_files.write_paged(folder / "h5py-paged.h5")
        measure("hdf5-paged", paged)
        measure_paged(paged)


if __name__ == "__main__":
    main()
