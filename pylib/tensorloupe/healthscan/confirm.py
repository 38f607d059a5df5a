"""Deciding on bytes what the sampled windows only suggest: that two tensors are copies, and that a
tensor is dead (one value everywhere).

Duplicates: tensors of one dtype and shape whose sampled windows hash the same are candidates;
each is then hashed whole (sha256 streamed over its bytes) and only equal full hashes are reported.
Tensors laid over the same bytes (shared torch storage) are equal without reading, and tied on
purpose. Tied embeddings (input embedding and output head) and buffers computed at load time are
information too, not faults.

A constant candidate is confirmed by comparing every byte with its first element's encoding
(C speed), falling back to decoding a piece where the encodings differ (0.0 and -0.0).
"""

from __future__ import annotations

import re
from typing import Iterator

from ..sampler.gather import MAX_READ_BYTES, dtype_of
from ..model import Tensor
from .measure import Measure
from .rules import Flag

DEFAULT_CONFIRM_BYTES = 256 << 20   # at most this many bytes of one tensor are read to confirm it
PIECE_BYTES = min(MAX_READ_BYTES, 8 << 20)

# One side of a tied pair each: the input embedding and the output head share their values.
EMBEDDING = re.compile(r"(^|\.)(embed_tokens|token_embd|tok_embeddings|wte|word_embeddings|embed_in|"
                       r"embeddings?|shared)\.weight$")
HEAD = re.compile(r"(^|\.)(lm_head|output|embed_out|head|decoder)\.weight$")
# Buffers the model computes at load time: identical in every layer by construction.
BUFFERS = re.compile(r"(^|\.)(inv_freq|position_ids|masked_bias|freqs_cis|cos_cached|sin_cached|"
                     r"rotary_emb\.[^.]+)$|(^|\.)attn\.bias$")


def candidates(measures: list[Measure]) -> list[list[Measure]]:
    """Groups of measured, non-constant tensors whose sampled bytes hash the same."""
    groups: dict[tuple, list[Measure]] = {}
    for m in measures:
        if m.measured and m.digest and m.constant is None:
            groups.setdefault((m.dtype, m.shape, m.samples, m.digest), []).append(m)
    return [g for g in groups.values() if len(g) > 1]


def confirmable(tensor: Tensor, limit: int | None) -> bool:
    # An adapter's ΔW is judged exactly on its factors (lora.py), never computed whole here.
    return "lora" not in tensor.info and (limit is None or tensor.nbytes <= limit)


def full_digest_steps(tensor: Tensor) -> Iterator[str | None]:
    """sha256 of the tensor's bytes, a piece per step (None until the last step)."""
    import hashlib   # here: importing tensorloupe brings this module, few runs confirm a copy
    digest = hashlib.sha256()
    for start in range(0, tensor.nbytes, PIECE_BYTES):
        digest.update(tensor.source.read_data(tensor.offset + start, min(PIECE_BYTES, tensor.nbytes - start)))
        yield None
    yield digest.hexdigest()


def same_bytes(a: Tensor, b: Tensor) -> bool:
    """Laid over the very same bytes (shared storage): equal without reading."""
    return (a.source is not None and a.source.root() is b.source.root() and a.contiguous and b.contiguous
            and a.known_file_offset is not None and a.known_file_offset == b.known_file_offset)


def duplicate_flag(kept: Measure, copies: list[Measure], digest: str | None, nbytes: int,
                   shared: bool) -> Flag:
    names = [kept.name] + [c.name for c in copies]
    evidence = {"statistic": "sha256", "value": digest, "siblings_median": None, "nbytes": nbytes, "copies": len(copies),
                "shared_storage": shared}
    how = "share the same bytes in the file" if shared else f"are byte-identical ({nbytes:,} bytes each, sha256 {digest[:12]}…)"
    if len(names) == 2 and _tied(*names):
        head, embedding = names if HEAD.search(names[0]) else names[::-1]
        return Flag("tied", "info", head,
                    f"Tied with {embedding} (input embedding and output head {how}): common and intended.",
                    evidence, True, [embedding])
    if shared:
        # One tensor saved under several names (torch writes a shared storage once): the model
        # ties these parameters on purpose; a copy-paste would have written the bytes twice.
        return Flag("tied", "info", copies[0].name,
                    f"Tied with {kept.name}: the names {how}, one tensor stored once, so the model "
                    f"shares these weights on purpose.", evidence, True, names[:1] + names[2:])
    if all(BUFFERS.search(n) for n in names):
        return Flag("duplicate_buffer", "info", copies[0].name,
                    f"{len(names):,} buffers {how}: they are computed, not trained, so this is expected.",
                    evidence, True, names[:1] + names[2:])
    others = ", ".join(c.name for c in copies[1:])
    also = f" (and {others})" if others else ""
    return Flag("duplicate", "warning", copies[0].name,
                f"Exact copy of {kept.name}{also}: the tensors {how}, though they should differ "
                f"(a copy-paste or a bad merge).", evidence, True, names[:1] + names[2:])


def unconfirmed_flag(group: list[Measure], limit: int) -> Flag:
    names = [m.name for m in group]
    return Flag("possible_duplicate", "info", names[1],
                f"Its sampled bytes equal those of {names[0]}, but the tensors are larger than the "
                f"{limit:,}-byte confirmation limit, so they were not compared whole.",
                {"statistic": "sampled sha256", "value": group[0].digest, "siblings_median": None, "samples": group[0].samples},
                False, names[:1] + names[2:])


def _tied(a: str, b: str) -> bool:
    return bool((EMBEDDING.search(a) and HEAD.search(b)) or (EMBEDDING.search(b) and HEAD.search(a)))


def constant_steps(tensor: Tensor, value: float) -> Iterator[bool | None]:
    """Whether every element of `tensor` equals `value`: None per piece read, then the answer."""
    info = dtype_of(tensor)
    if not tensor.contiguous:
        yield False
        return
    bb = info.block_bytes
    piece = max(bb, PIECE_BYTES // bb * bb)
    pattern = None
    for start in range(0, tensor.nbytes, piece):
        data = tensor.source.read_data(tensor.offset + start, min(piece, tensor.nbytes - start))
        if pattern is None:
            pattern = data[:bb]
        # Whole blocks equal to the first one are equal values; otherwise decode and compare
        # (0.0 and -0.0, or quantized blocks encoding one value differently).
        if data != pattern * (len(data) // bb):
            values = info.decode(data, tensor.big_endian)[:tensor.numel - start // bb * info.block_elems]
            if any(v != value for v in values):
                yield False
                return
        yield None
    yield True
