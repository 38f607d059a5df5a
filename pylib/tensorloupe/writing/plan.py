"""What a conversion writes, decided from descriptors alone (no tensor bytes are read here).

Each tensor becomes one `Entry`: the safetensors dtype it is written in and how its bytes are
made. A tensor whose dtype safetensors holds is copied as its own bytes ("raw", little-endian);
a ggml-quantised tensor is written as its float32 values, the values the sampler decodes
("values"). A dtype with no safetensors name (torch complex128) is refused, naming it.

safetensors has no aliasing (`safetensors.torch.save_file` refuses tensors that share memory):
two names of one torch storage (`Tensor.info["same_as"]`) are written as two copies, and
`__metadata__["shared"]` says which names were one tensor in the source.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import NamedTuple

from ..dtypes import lookup
from ..dtypes.plain import SAFETENSORS_DTYPES
from ..errors import UnsupportedError, UsageError
from ..model import Checkpoint, Tensor
from .encode import ENCODERS

ALIGN = 8                                    # the spec: the header is padded to 8 bytes
SINGLE_NAME = "model.safetensors"            # transformers' names (SAFE_WEIGHTS_NAME, ..._INDEX_NAME)
INDEX_NAME = "model.safetensors.index.json"
SHARD_NAME = "model-{k:05d}-of-{n:05d}.safetensors"
# --max-shard-size units, as transformers' convert_file_size_to_int reads them
UNITS = {"": 1, "B": 1, "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "TB": 10 ** 12,
         "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}


class Entry(NamedTuple):
    tensor: Tensor
    dtype: str                 # the safetensors dtype written
    shape: tuple[int, ...]
    nbytes: int                # bytes written for it
    how: str                   # "raw": the tensor's own bytes; "values": its float32 values


class Shard(NamedTuple):
    name: str                  # file name inside the output folder (or the output file's own)
    entries: list[Entry]

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)


def entry(tensor: Tensor, dtype: str | None = None) -> Entry:
    """How `tensor` is written. `dtype` (F32, F16 or BF16; `convert --dtype`): every floating-point
    tensor, dequantised ones too, is written as its values in that dtype; others as they are."""
    if tensor.problem:
        raise UnsupportedError(f"tensor {tensor.name!r} cannot be written: {tensor.problem}")
    info = lookup(tensor.dtype)
    if info is None:
        raise UnsupportedError(f"tensor {tensor.name!r} has dtype {tensor.dtype!r}, which "
                               "tensorloupe cannot decode: it cannot be written")
    if dtype is not None and dtype not in ENCODERS:
        raise UsageError(f"--dtype {dtype!r} is not one of {', '.join(ENCODERS)}")
    if info.kind in ("quant", "float") and dtype is not None and dtype != tensor.dtype:
        return Entry(tensor, dtype, tensor.shape, lookup(dtype).nbytes(tensor.numel), "values")
    if info.kind == "quant":   # ggml blocks: their exact values, in float32 (holds them all)
        return Entry(tensor, "F32", tensor.shape, 4 * tensor.numel, "values")
    if tensor.dtype not in SAFETENSORS_DTYPES:
        raise UnsupportedError(f"tensor {tensor.name!r} has dtype {tensor.dtype}, which "
                               "safetensors cannot hold")
    blocks = -(-tensor.numel // info.block_elems)
    if info.block_elems > 1 and not tensor.contiguous:
        raise UnsupportedError(f"tensor {tensor.name!r} is a strided view of packed "
                               f"{tensor.dtype} elements: it cannot be written")
    return Entry(tensor, tensor.dtype, tensor.shape, blocks * info.block_bytes, "raw")


def entries(tensors: list[Tensor], dtype: str | None = None,
            strict: bool = True) -> tuple[list[Entry], list[tuple[str, str]]]:
    """The entries of the tensors that can be written, and (name, reason) of those that cannot:
    with `strict`, the first of those ends the conversion instead."""
    out, skipped = [], []
    for t in tensors:
        try:
            out.append(entry(t, dtype))
        except UnsupportedError as e:
            if strict:
                raise
            skipped.append((t.name, e.message))
    if not out and skipped:
        raise UnsupportedError(f"no tensor can be written: {skipped[0][1]}"
                               + (f" (and {len(skipped) - 1:,} more)" if len(skipped) > 1 else ""))
    return out, skipped


def select(ckpt: Checkpoint, names: list[str] | None = None, match: str | None = None) -> list[Tensor]:
    """The tensors to write: all or those `match` finds (in file order), or those named (a
    dequantised weight's stored parts too: `Checkpoint.tensor` finds them)."""
    if names is not None:   # in the order given; an unknown name is refused (UsageError)
        return [ckpt.tensor(name) for name in dict.fromkeys(names)]
    if match is not None:
        try:
            pattern = re.compile(match)
        except re.error as e:
            raise UsageError(f"--match {match!r} is not a regular expression: {e}") from None
        found = [t for t in ckpt.tensors if pattern.search(t.name)]
        if not found:
            raise UsageError(f"no tensor name matches {match!r}")
        return [s for t in found for s in _as_stored(t)]
    return [s for t in ckpt.tensors for s in _as_stored(t)]


def _as_stored(t: Tensor) -> list[Tensor]:
    """An adapter (adapters/) is written as the file holds it, so that it stays an adapter: a
    ΔW as its factors, a modules_to_save copy under its stored name. A ΔW named explicitly is
    written as its values."""
    if "computed as" in t.info:
        return list(t.parts)
    if "stored as" in t.info:
        return [dataclasses.replace(t, name=t.info["stored as"])]
    return [t]


def parse_size(text: str | int) -> int:
    """`5GB`, `200KB`, `1GiB` or a byte count."""
    if isinstance(text, int):
        size = text
    else:
        found = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
        if not found or found.group(2).upper() not in UNITS:
            raise UsageError(f"{text!r} is not a size (a byte count, or e.g. 5GB, 500MB, 1GiB)")
        size = int(found.group(1)) * UNITS[found.group(2).upper()]
    if size < 1:
        raise UsageError(f"the shard size must be at least 1 byte, not {text!r}")
    return size


def shards(entries: list[Entry], max_shard_size: int | None) -> list[Shard]:
    """One file, or the shard set transformers would write: tensors in order, a new shard when
    the next tensor would pass the limit (a tensor bigger than the limit has a shard alone)."""
    if max_shard_size is None:
        return [Shard(SINGLE_NAME, entries)]
    groups: list[list[Entry]] = [[]]
    held = 0
    for e in entries:
        if groups[-1] and held + e.nbytes > max_shard_size:
            groups.append([])
            held = 0
        groups[-1].append(e)
        held += e.nbytes
    if len(groups) == 1:
        return [Shard(SINGLE_NAME, groups[0])]
    return [Shard(SHARD_NAME.format(k=k, n=len(groups)), g) for k, g in enumerate(groups, 1)]


def metadata(ckpt: Checkpoint, entries: list[Entry], version: str) -> dict[str, str]:
    """`__metadata__` (string to string, as the spec requires): what the file was made from."""
    out = {"format": "pt",     # transformers refuses a safetensors file without it
           "source": ", ".join(os.path.basename(f) for f in ckpt.files) or ckpt.name,
           "source_format": ckpt.format,
           "converted_by": f"tensorloupe {version} without executing the pickle"}
    shared = {e.tensor.name: e.tensor.info["same_as"] for e in entries
              if "same_as" in e.tensor.info}
    if shared:
        out["shared"] = json.dumps(shared) + " (names of one torch tensor in the source, " \
                        "written as copies: safetensors has no aliasing)"
    deltas = [e.tensor.name for e in entries if "computed as" in e.tensor.info]
    dequantised = [e.tensor.name for e in entries
                   if (lookup(e.tensor.dtype).kind == "quant" or e.tensor.parts) and e.tensor.name not in deltas]
    if dequantised:
        names = set(dequantised)
        written = sorted({e.dtype for e in entries if e.tensor.name in names})
        out["dequantised"] = json.dumps(dequantised) + f" (written as their values in {', '.join(written)})"
    if deltas:
        out["adapter_delta"] = json.dumps(deltas) + " (an adapter's ΔW = scale·B·A, written as its float32 values)"
    cast = sorted({f"{e.tensor.dtype} to {e.dtype}" for e in entries
                   if e.how == "values" and lookup(e.tensor.dtype).kind == "float"})
    if cast:
        out["cast"] = ", ".join(cast) + " (rounded to nearest even, as torch's .to() rounds)"
    return out


def header(entries: list[Entry], meta: dict[str, str] | None) -> bytes:
    """The length prefix's payload: the JSON header, padded with spaces to 8 bytes."""
    doc: dict = {"__metadata__": meta} if meta else {}
    start = 0
    for e in entries:
        doc[e.tensor.name] = {"dtype": e.dtype, "shape": list(e.shape),
                              "data_offsets": [start, start + e.nbytes]}
        start += e.nbytes
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return text + b" " * (-(8 + len(text)) % ALIGN)


def total_size(entries: list[Entry]) -> int:
    return sum(e.nbytes for e in entries)
