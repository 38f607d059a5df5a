"""Write a safetensors file (or a transformers shard set) from a checkpoint, streaming.

The spec (safetensors README, "Format"): an 8-byte little-endian header length N, N bytes of
JSON ({name: {dtype, shape, data_offsets}}, optional "__metadata__" of strings), then the tensors'
bytes, contiguous, in data_offsets order. The header is computed from descriptors (plan.py) and
written first; then each tensor's bytes, read through the sampler's paths in chunks of at most
CHUNK_BYTES, so a conversion holds one chunk, never a tensor or the file.

Each file is written to `NAME.tmp-XXXX` beside its final name and renamed only when every file
of the set is complete: an interrupted write never leaves a file under a name that looks done.
No output may be one of the input files.

A tensor whose bytes fail to read while it is written (a shard truncated since it was opened, a
server that stops answering) is left out: the file is cut back to where it began and the rest
follow; at the end each file that lost a tensor gets the header of what it holds, with the tensor
and its reason in `__metadata__["skipped"]`, as the index's metadata has them (rewrite.py). With
`strict`, the first such failure ends the write and nothing is left behind.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from array import array
from typing import Callable, Iterator, NamedTuple

from ..errors import FormatError, UsageError
from ..model import Checkpoint
from ..sampler.gather import dtype_of, gather_windows, read_batched, read_windows, storage_positions
from . import plan, rewrite
from .encode import ENCODERS
from .plan import Entry, Shard

CHUNK_BYTES = 16 << 20       # bytes read (and held) at once for one tensor
# Elements decoded at once where values are written (ggml blocks): a Python float list costs
# ~32 bytes an element, so this bounds the decoded floats held to ~8 MB.
VALUES_CHUNK = 1 << 18
LENGTH = struct.Struct("<Q")  # the spec: u64 little-endian header length
# element size -> array typecode for byte swapping (complex: each part swapped on its own)
SWAP_CODES = {2: "H", 4: "I", 8: "Q"}
SWAP_PART = {"C64": 4}


def tensor_chunks(e: Entry, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The bytes of one entry as safetensors holds them (row-major, little-endian), in chunks."""
    t = e.tensor
    info = dtype_of(t)
    if e.how == "values":
        # decoded by the sampler (ggml blocks, or floats cast to another dtype), then encoded
        # in the entry's dtype (float32 holds every ggml value exactly)
        encoded = ENCODERS[e.dtype]
        elems = min(VALUES_CHUNK, chunk_bytes // 4)
        per = max(info.block_elems, elems // info.block_elems * info.block_elems)
        windows = ((t, s, min(per, t.numel - s)) for s in range(0, t.numel, per))
        for part in gather_windows(windows, batch_bytes=chunk_bytes):
            yield encoded(part)
        return
    be, bb = info.block_elems, info.block_bytes
    per = max(be, (chunk_bytes // bb) * be)
    if t.contiguous:
        windows = ((t, s, min(per, t.numel - s)) for s in range(0, t.numel, per))
        chunks = (w.data for w in read_windows(windows, batch_bytes=chunk_bytes))
    else:
        chunks = _strided_chunks(t, bb, per)
    # a big-endian file's elements swapped (complex: each part); packed sub-byte types have none
    swap = SWAP_PART.get(t.dtype, bb) if t.big_endian and be == 1 else 1
    for data in chunks:
        yield _swapped(data, swap) if swap > 1 else data


def entry_chunks(e: Entry) -> Iterator[bytes]:
    """One entry's bytes, checked against the byte count its shape needs (the header says so)."""
    written = 0
    for data in tensor_chunks(e):
        written += len(data)
        yield data
    if written != e.nbytes:
        raise FormatError(f"tensor {e.tensor.name!r} gave {written:,} bytes, "
                          f"not the {e.nbytes:,} its shape needs")


def entry_bytes(entries: list[Entry]) -> Iterator[bytes]:
    """The data section of a file of these entries, chunk after chunk."""
    for e in entries:
        yield from entry_chunks(e)


def file_head(entries: list[Entry], meta: dict[str, str] | None) -> bytes:
    """The length prefix and the header: the first bytes of the file."""
    head = plan.header(entries, meta)
    return LENGTH.pack(len(head)) + head


def _strided_chunks(t, elem_bytes: int, per: int) -> Iterator[bytes]:
    """A torch view's elements in row-major order: each chunk's storage positions, cut into
    runs of consecutive elements, read together (the sampler's read batching)."""
    for start in range(0, t.numel, per):
        positions = storage_positions(t, range(start, min(start + per, t.numel)))
        runs = []
        first = prev = positions[0]
        for p in positions[1:]:
            if p != prev + 1:
                runs.append((first, prev))
                first = p
            prev = p
        runs.append((first, prev))
        ranges = [(t.offset + a * elem_bytes, (b - a + 1) * elem_bytes) for a, b in runs]
        yield b"".join(read_batched(t.source, ranges, CHUNK_BYTES))


def _swapped(data: bytes, size: int) -> bytes:
    a = array(SWAP_CODES[size])
    a.frombytes(data)
    a.byteswap()
    return a.tobytes()


def inputs(ckpt: Checkpoint) -> list[str]:
    """The local files the checkpoint is read from (a URL's source has no path)."""
    paths = (getattr(s.root(), "path", None) for s in ckpt.sources)
    return [os.path.realpath(p) for p in paths if isinstance(p, str)]


def _refuse_inputs(ckpt: Checkpoint, targets: list[str]) -> None:
    paths = inputs(ckpt)
    for target in targets:
        real = os.path.realpath(target)
        for source in paths:
            same = real == source or (os.path.exists(real) and os.path.exists(source)
                                      and os.path.samefile(real, source))
            if same:
                raise UsageError(f"refusing to write {target}: it is an input of the conversion")


class Layout(NamedTuple):
    files: list[tuple[str, Shard]]   # (final path, its tensors) of every safetensors file
    index: dict | None               # model.safetensors.index.json's content (a shard set)
    metadata: dict[str, str]         # every file's __metadata__


def layout(ckpt: Checkpoint, out: str, entries: list[Entry], max_shard_size: int | None,
           version: str, extra: dict[str, str] | None = None) -> Layout:
    """What is written where. With a shard size, `out` is a folder; else it is the file.
    `extra`: more `__metadata__` entries (what a prune dropped, what was skipped)."""
    meta = {**plan.metadata(ckpt, entries, version), **(extra or {})}
    if max_shard_size is None:
        return Layout([(out, Shard(os.path.basename(out), entries))], None, meta)
    parts = plan.shards(entries, max_shard_size)
    files = [(os.path.join(out, s.name), s) for s in parts]
    return Layout(files, index_of(parts, meta) if len(parts) > 1 else None, meta)


def without(where: Layout, skipped: list[tuple[str, str]]) -> Layout:
    """The layout as written: without the tensors `skipped` names (their reads failed)."""
    gone = {name for name, _ in skipped}
    files = [(p, Shard(s.name, [e for e in s.entries if e.tensor.name not in gone]))
             for p, s in where.files]
    return where._replace(files=files)


def index_of(parts: list[Shard], meta: dict[str, str]) -> dict:
    """model.safetensors.index.json's content for these shards."""
    return {"metadata": {"total_size": sum(s.nbytes for s in parts), **meta},
            "weight_map": {e.tensor.name: s.name for s in parts for e in s.entries}}


def write(ckpt: Checkpoint, out: str, entries: list[Entry], max_shard_size: int | None = None,
          version: str = "", progress: Callable[[int, int], object] | None = None,
          extra: dict[str, str] | None = None, strict: bool = True,
          skipped: list[tuple[str, str]] | None = None) -> list[str]:
    """Write the entries; returns the paths written (the index last). `skipped`: the tensors
    left out before writing, each with its reason (in `extra["skipped"]` already); a tensor
    whose read fails is appended to it, unless `strict`, where the failure ends the write."""
    files, index, meta = layout(ckpt, out, entries, max_shard_size, version, extra)
    finals = [path for path, _ in files] + ([os.path.join(out, plan.INDEX_NAME)] if index else [])
    _refuse_inputs(ckpt, finals)
    if max_shard_size is not None:
        os.makedirs(out, exist_ok=True)
    skipped = [] if skipped is None else skipped
    known = len(skipped)
    count = rewrite.Counter(plan.total_size(entries), progress)
    temporaries: list[tuple[str, str]] = []
    written: list[rewrite.Written] = []
    try:
        for path, shard in files:
            tmp = temporary(path)
            temporaries.append((tmp, path))
            with open(tmp, "wb") as f:
                head = file_head(shard.entries, meta)
                f.write(head)
                kept = [e for e in shard.entries
                        if rewrite.write_entry(f, e, entry_chunks(e), count, strict, skipped)]
            written.append(rewrite.Written(tmp, path, Shard(shard.name, kept),
                                           len(kept) < len(shard.entries), len(head)))
        if len(skipped) > known:
            meta = rewrite.refit(written, meta, skipped, temporaries, temporary, file_head)
            if index is not None:
                index = index_of([w.shard for w in written], meta)
        if index is not None:
            tmp = temporary(finals[-1])
            temporaries.append((tmp, finals[-1]))
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
        for tmp, path in temporaries:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in temporaries:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        raise
    return finals


def temporary(path: str) -> str:
    """A fresh `NAME.tmp-XXXX` beside `path` (created, so no two writers share one)."""
    folder, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f"{name}.tmp-", dir=folder)
    os.close(fd)
    return tmp
