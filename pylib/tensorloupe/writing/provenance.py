"""What a converted file says about where it came from, beyond its tensors (`__metadata__`, whose
values the spec wants as strings):

  torch_entries     a torch checkpoint's non-tensor entries (epoch, step, hyper-parameters,
                    config dicts; a tensor inside one is its descriptor {tensor, dtype, shape}) as
                    one JSON object, bounded: an entry whose JSON passes ENTRY_CHARS, or that
                    would take the whole past TOTAL_CHARS, is left out and named in
                    torch_entries_left_out (strings, containers and nesting cut as
                    jsonable.PREVIEW cuts them, so no pickle can make a huge header);
  header_sha256     sha256 of each source file's header bytes where the format says how long
                    its header is (safetensors: the length prefix and JSON; GGUF: everything
                    before the tensor data), read through the source's cache: already read;
  skipped           tensors that could not be written, each with its reason.
"""

from __future__ import annotations

import hashlib
import json

from ..jsonable import PREVIEW, bounded
from ..model import Checkpoint, Tensor
from . import plan
from .plan import Entry

ENTRY_CHARS = 64 << 10
TOTAL_CHARS = 1 << 20
LENGTH_PREFIX = 8                   # safetensors: u64 header length, then the header
HEADER_HASH_MAX = 100 << 20         # the spec's header cap: never hash more than that


def non_tensor_entries(ckpt: Checkpoint) -> dict:
    """The top-level entries of a torch checkpoint's pickle that are not tensors."""
    if not ckpt.format.startswith("pytorch"):
        return {}
    return {k: v for k, v in ckpt.metadata.items() if not (isinstance(v, dict) and "tensor" in v)}


def entries_metadata(ckpt: Checkpoint) -> tuple[dict[str, str], list[str]]:
    """(`__metadata__` entries, the names of entries left out as too long)."""
    kept: dict[str, str] = {}
    left: list[str] = []
    total = 0
    for key, value in non_tensor_entries(ckpt).items():
        text = json.dumps(bounded(value, PREVIEW), ensure_ascii=False, allow_nan=False)
        if len(text) > ENTRY_CHARS or total + len(text) > TOTAL_CHARS:
            left.append(key)
            continue
        kept[key] = text
        total += len(text) + len(key)
    out = {}
    if kept:
        out["torch_entries"] = "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in kept.items()) + "}"
    if left:
        out["torch_entries_left_out"] = json.dumps(left) + \
            f" (their JSON passes {ENTRY_CHARS:,} characters, or all of it {TOTAL_CHARS:,})"
    return out, left


def header_length(ckpt: Checkpoint) -> int | None:
    """The header length of a one-file checkpoint whose format states it."""
    if len(ckpt.sources) != 1:
        return None
    if ckpt.format == "safetensors" and isinstance(ckpt.extras.get("header_bytes"), int):
        return LENGTH_PREFIX + ckpt.extras["header_bytes"]
    offset = (ckpt.extras.get("gguf") or {}).get("data_offset")
    return offset if ckpt.format.startswith("gguf") and isinstance(offset, int) else None


def provenance(ckpt: Checkpoint) -> dict[str, str]:
    n = header_length(ckpt)
    if n is None or not 0 < n <= min(HEADER_HASH_MAX, ckpt.sources[0].size):
        return {}
    digest = hashlib.sha256(ckpt.sources[0].read(0, n)).hexdigest()
    return {"header_sha256": f"{digest} (the source's first {n:,} bytes: its header)"}


def skipped_metadata(skipped: list[tuple[str, str]]) -> dict[str, str]:
    if not skipped:
        return {}
    return {"skipped": json.dumps(dict(skipped), ensure_ascii=False) + " (tensors not written, "
                       "each with its reason)"}


def described(ckpt: Checkpoint, tensors: list[Tensor], dtype: str | None, strict: bool,
              extra: dict[str, str]) -> tuple[list[Entry], list[tuple[str, str]], list[str]]:
    """What convert, extract, prune and write_safetensors write: the entries, the tensors
    skipped (with `strict` the first ends it) and the entries too long for `__metadata__`;
    `extra` is filled with the provenance, the non-tensor entries and the skipped tensors."""
    entries, skipped = plan.entries(tensors, dtype, strict=strict)
    extra.update(provenance(ckpt))
    found, too_long = entries_metadata(ckpt)
    extra.update(found)
    extra.update(skipped_metadata(skipped))
    return entries, skipped, too_long
