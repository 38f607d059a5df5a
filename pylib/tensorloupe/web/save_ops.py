"""The page's "Save as safetensors…": the open checkpoint written by the CLI's engine (writing/:
the same choices, entries, headers and bytes as `convert`, `extract` and `prune`), one chunk per
request, so that the page streams it into a file or a folder (the File System Access API), or a
download (the service worker's stream, else a Blob of chunks): the worker holds one chunk at a
time, never the file.

  save_begin  {dtype?, hf_names?, match?, drop?, shard_size?, folder?, allow_dangerous?, retry?}
              -> {files: [{name, size}], size, tensors, skipped, kept?, dropped?, config_left_out?}:
              what will be written, file by file. `drop`: "L:E,..." or "recommended" (the
              Experts analysis' recommendation, which must have run); `shard_size` ("500MB"):
              a shard set and its index, written only into a `folder` (the page's directory
              handle), where a prune's config.json goes too. A file whose pickle is dangerous
              needs allow_dangerous (the page asks the user first);
  save_chunk  {} -> {file, done, size, finished} and the next bytes of files[file] (about
              SAVE_CHUNK_BYTES; a chunk never spans two files), or, when a tensor's bytes fail to
              read, {restart: true, failed: {name, why}}: the page drops what it wrote and calls
              save_begin again with retry, which leaves that tensor out with its reason in
              `__metadata__["skipped"]`, as `convert` does (a stream cannot rewrite its header);
  save_recommended {threshold?} -> {drop: "L:E,..."}: the experts the Experts analysis finds
              redundant (at `threshold`: the one the Experts tab shows), for the page's drop field;
  save_end    {} -> drops the write in progress (cancelled, or the page failed to write: a later
              save_chunk is refused).
Opening another checkpoint ends a write in progress too.
"""

from __future__ import annotations

import json
import os
from typing import Iterator

from .. import __version__
from ..errors import UsageError

SAVE_CHUNK_BYTES = 8 << 20
CONFIG_NAME = "config.json"


class ReadFailed(Exception):
    """A tensor's bytes failed to read while its file was streamed: (name, reason)."""

    def __init__(self, failure: tuple[str, str]):
        super().__init__(failure[1])
        self.failure = failure


class Saving:
    """A write in progress: (file index, bytes) pieces, and how many bytes have gone."""

    def __init__(self, pieces: Iterator[tuple[int, bytes]], size: int):
        self.pieces, self.done, self.size = pieces, 0, size
        self.held: tuple[int, bytes] | None = None      # the first piece of the next file

    def next(self) -> tuple[int, bytes]:
        out, file, held = [], None, 0
        while held < SAVE_CHUNK_BYTES:
            piece = self.held or next(self.pieces, None)
            self.held = None
            if piece is None:
                break
            if file is not None and piece[0] != file:
                self.held = piece
                break
            file = piece[0]
            out.append(piece[1])
            held += len(piece[1])
        data = b"".join(out)
        self.done += len(data)
        return (file or 0), data

    @property
    def finished(self) -> bool:
        return self.done >= self.size


def saved_name(name: str) -> str:
    stem, ext = os.path.splitext(os.path.basename(name) or "checkpoint")
    return f"{stem}{'-saved' if ext == '.safetensors' else ''}.safetensors"


def _pieces(files, meta, tail: list[bytes]) -> Iterator[tuple[int, bytes]]:
    """Each file's bytes: its head, then its tensors' (a failed read becomes ReadFailed), then
    the files after the weights (the index, config.json)."""
    from ..writing import rewrite, safetensors as writer
    for k, (_, shard) in enumerate(files):
        yield k, writer.file_head(shard.entries, meta)
        for e in shard.entries:
            try:
                for data in writer.entry_chunks(e):
                    yield k, data
            except rewrite.READ_FAILURES as error:
                raise ReadFailed(rewrite.failure(e, error)) from error
    for k, data in enumerate(tail, len(files)):
        yield k, data


class SaveOps:
    saving: Saving | None = None
    save_failed: tuple[tuple[str, str], ...] = ()   # tensors whose read failed, this save

    def _save_choice(self, args):
        from ..writing import options, prune
        drop = args.get("drop") or None
        if drop == "recommended":           # the analysis the Experts tab ran, at its threshold
            drop = prune.recommended(self.measured())
        return options.Choice(dtype=args.get("dtype") or None, hf_names=bool(args.get("hf_names")),
                              match=args.get("match") or None, drop=drop)

    def op_save_begin(self, args):
        # the writer is imported by the first save: the page's boot does not pay for it
        from ..writing import options, plan, safetensors as writer
        ckpt = self.current()
        safety = ckpt.extras.get("safety") or {}
        if (safety.get("dangerous") or safety.get("torch_reading")) and not args.get("allow_dangerous"):
            raise UsageError(f"{ckpt.name}: the pickle names a dangerous global: it is saved only "
                             "when you confirm (its tensors are data; the pickle is never run)")
        self.saving = None
        if not args.get("retry"):
            self.save_failed = ()
        folder = bool(args.get("folder"))
        size = plan.parse_size(args["shard_size"]) if folder and args.get("shard_size") else None
        chosen = options.choose(ckpt, self._save_choice(args), False, self.config,
                                list(self.save_failed))
        # names as the CLI gives them: a folder's shards (or model.safetensors), else the file's
        target = "" if size is not None else plan.SINGLE_NAME if folder else saved_name(ckpt.name)
        files, index, meta = writer.layout(chosen.ckpt, target, chosen.entries, size,
                                           __version__, chosen.extra)
        tail, names = [], [os.path.basename(path) for path, _ in files]
        if index is not None:
            tail.append((json.dumps(index, indent=2, sort_keys=True) + "\n").encode("utf-8"))
            names.append(plan.INDEX_NAME)
        config = chosen.pruned.config if chosen.pruned else None
        if folder and config is not None:    # as writing/folder.py writes it
            tail.append((json.dumps(config, indent=2, sort_keys=True) + "\n").encode("utf-8"))
            names.append(CONFIG_NAME)
        sizes = [len(writer.file_head(s.entries, meta)) + s.nbytes for _, s in files]
        sizes += [len(t) for t in tail]
        self.saving = Saving(_pieces(files, meta, tail), sum(sizes))
        out = {"files": [{"name": n, "size": b} for n, b in zip(names, sizes)], "size": sum(sizes),
               "tensors": len(chosen.entries),
               "skipped": [{"name": n, "why": why} for n, why in chosen.skipped]}
        if chosen.pruned:
            out.update(kept={str(k): v for k, v in chosen.pruned.kept.items()},
                       dropped={str(k): v for k, v in chosen.pruned.dropped.items()},
                       config_left_out=config is not None and not folder)
        return out, []

    def op_save_chunk(self, args):
        saving = self.saving
        if saving is None:
            raise UsageError("no save is in progress")
        try:
            file, data = saving.next()
        except ReadFailed as failed:
            self.saving = None
            self.save_failed = (*self.save_failed, failed.failure)
            name, why = failed.failure
            return {"restart": True, "failed": {"name": name, "why": why}}, []
        except BaseException:
            self.saving = None
            raise
        if saving.finished:
            self.saving = None
        return {"file": file, "done": saving.done, "size": saving.size,
                "finished": saving.finished}, [data]

    def op_save_recommended(self, args):
        from ..writing import prune
        analysis = self.measured()
        if args.get("threshold") is not None:
            analysis = analysis.with_threshold(float(args["threshold"]))
        drops = prune.recommended(analysis)
        return {"drop": ",".join(f"{layer}:{e}" for layer, experts in sorted(drops.items())
                                 for e in sorted(experts))}, []

    def op_save_end(self, args):
        ended, self.saving = self.saving is not None, None
        return {"ended": ended}, []
