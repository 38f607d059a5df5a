"""The page's "Save as safetensors…": the open checkpoint written by the CLI's writer (writing/),
one chunk per request, so that the page streams it into a file (the File System Access API) or
a Blob of chunks (a download): the worker holds one chunk at a time, never the file.

  save_begin  {dtype?, allow_dangerous?} -> {file, size, tensors, skipped} and the first bytes
              (length prefix and header, with the same `__metadata__` `convert` writes); a file
              whose pickle is dangerous needs allow_dangerous (the page asks the user first);
  save_chunk  {} -> {done, size, finished} and the next bytes (about SAVE_CHUNK_BYTES: the
              pieces of small tensors joined, a big tensor's in the writer's own chunks);
  save_end    {} -> drops the write in progress (the user cancelled, or the page failed to
              write: a later save_chunk is refused).
Opening another checkpoint ends a write in progress too.
"""

from __future__ import annotations

import os
from typing import Iterator

from .. import __version__
from ..errors import UsageError

SAVE_CHUNK_BYTES = 8 << 20


class Saving:
    """A write in progress: its data section as chunks, and how many bytes have gone."""

    def __init__(self, chunks: Iterator[bytes], done: int, size: int):
        self.chunks, self.done, self.size = chunks, done, size

    def next(self) -> bytes:
        pieces, held = [], 0
        for data in self.chunks:
            pieces.append(data)
            held += len(data)
            if held >= SAVE_CHUNK_BYTES:
                break
        out = b"".join(pieces)
        self.done += len(out)
        return out

    @property
    def finished(self) -> bool:
        return self.done >= self.size


def saved_name(name: str) -> str:
    stem, ext = os.path.splitext(os.path.basename(name) or "checkpoint")
    return f"{stem}{'-saved' if ext == '.safetensors' else ''}.safetensors"


class SaveOps:
    saving: Saving | None = None

    def op_save_begin(self, args):
        # the writer is imported by the first save: the page's boot does not pay for it
        from ..writing import plan, provenance, safetensors as writer
        ckpt = self.current()
        safety = ckpt.extras.get("safety") or {}
        if (safety.get("dangerous") or safety.get("torch_reading")) and not args.get("allow_dangerous"):
            raise UsageError(f"{ckpt.name}: the pickle names a dangerous global: it is saved only "
                             "when you confirm (its tensors are data; the pickle is never run)")
        dtype = args.get("dtype") or None
        extra: dict[str, str] = {}
        entries, skipped, _ = provenance.described(ckpt, list(ckpt.tensors), dtype, False, extra)
        head = writer.file_head(entries, {**plan.metadata(ckpt, entries, __version__), **extra})
        size = len(head) + plan.total_size(entries)
        self.saving = Saving(writer.entry_bytes(entries), len(head), size)
        return {"file": saved_name(ckpt.name), "size": size, "tensors": len(entries),
                "skipped": [{"name": n, "why": why} for n, why in skipped]}, [head]

    def op_save_chunk(self, args):
        saving = self.saving
        if saving is None:
            raise UsageError("no save is in progress")
        try:
            data = saving.next()
        except BaseException:
            self.saving = None
            raise
        if saving.finished:
            self.saving = None
        return {"done": saving.done, "size": saving.size, "finished": saving.finished}, [data]

    def op_save_end(self, args):
        ended, self.saving = self.saving is not None, None
        return {"ended": ended}, []
