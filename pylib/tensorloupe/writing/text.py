"""The CLI's words for `convert` and `extract`: what would be written, what was left out."""

from __future__ import annotations

from ..display import counted
from ..model import Checkpoint
from .plan import Entry, Shard
from .provenance import non_tensor_entries


def left_out(ckpt: Checkpoint, too_long: list[str] | None = None,
             skipped: list[tuple[str, str]] = ()) -> list[str]:
    """What the output does not hold as the source does: its non-tensor entries (top-level keys
    of the pickle that are not tensors: in `__metadata__` as JSON when the file is written,
    `too_long` names those that were not), the tensors skipped and why, and the calls the
    pickle asks for (never made)."""
    lines = []
    for key in non_tensor_entries(ckpt):
        if too_long is None:
            lines.append(f"entry {key!r}: not a tensor, not written")
        elif key in too_long:
            lines.append(f"entry {key!r}: not a tensor, too long for __metadata__: not written")
        else:
            lines.append(f"entry {key!r}: not a tensor, written as JSON in __metadata__ torch_entries")
    for name, why in skipped:
        lines.append(f"tensor {name!r} skipped: {why}")
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
            how = f" (its {e.dtype} values)" if e.how == "values" else ""
            print(f"    {e.tensor.name}  {e.dtype}{list(e.shape)}  {e.nbytes:,} bytes{how}")


def print_left_out(lines: list[str], stream) -> None:
    if lines:
        print("not written as tensors:", file=stream)
        for line in lines:
            print(f"  - {line}", file=stream)


def print_prune(kept: dict[int, list[int]], dropped: dict[int, list[int]], config: dict | None) -> None:
    for layer, gone in dropped.items():
        print(f"layer {layer}: drop {counted(len(gone), 'expert')} ({', '.join(map(str, gone))}), "
              f"keep {len(kept[layer]):,}: new 0..{len(kept[layer]) - 1:,} are old "
              f"{', '.join(map(str, kept[layer]))}")
    if config is None:
        print("no config.json beside the source: none written")
