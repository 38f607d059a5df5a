"""The CLI's words for `convert` and `extract`: what would be written, what was left out."""

from __future__ import annotations

from ..display import counted
from ..model import Checkpoint
from .plan import Entry, Shard


def left_out(ckpt: Checkpoint) -> list[str]:
    """What the source holds that no safetensors file does: its non-tensor entries (top-level
    keys of the pickle that are not tensors) and the calls the pickle asks for (never made)."""
    lines = []
    meta = ckpt.metadata if ckpt.format.startswith("pytorch") else {}
    for key, value in meta.items():
        if not (isinstance(value, dict) and "tensor" in value):
            lines.append(f"entry {key!r}: not a tensor, not written")
    for call in (ckpt.extras.get("safety") or {}).get("calls") or []:
        lines.append(f"call of {call.get('global')} (dangerous, never run): not written")
    return lines


def print_plan(files: list[tuple[str, Shard]], index: str | None, entries: list[Entry],
               dry_run: bool) -> None:
    verb = "would write" if dry_run else "wrote"
    total = sum(e.nbytes for e in entries)
    print(f"{verb} {counted(len(entries), 'tensor')}, {total:,} bytes of tensor data, in "
          f"{counted(len(files), 'file')}:")
    for path, shard in files:
        print(f"  {path}: {counted(len(shard.entries), 'tensor')}, {shard.nbytes:,} bytes")
    if index:
        print(f"  {index}: the index")
    if dry_run:
        for e in entries:
            how = " (its float32 values)" if e.how == "values" else ""
            print(f"    {e.tensor.name}  {e.dtype}{list(e.shape)}  {e.nbytes:,} bytes{how}")


def print_left_out(lines: list[str], stream) -> None:
    if lines:
        print("left out:", file=stream)
        for line in lines:
            print(f"  - {line}", file=stream)

