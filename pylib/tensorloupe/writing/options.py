"""The choices of a write, taken the same way by `convert`, `extract`, `prune` and the page's
Save as: which tensors (all, some by name or regex, or a prune's), under which names (a GGUF
file's, or Hugging Face's), in which dtype; and what they make (the entries to write, the tensors
skipped with their reasons, the `__metadata__` extras). One function, so that the page writes the
bytes the CLI writes for the same choices."""

from __future__ import annotations

import copy
from typing import NamedTuple

from ..model import Checkpoint
from . import hfnames, plan, provenance, prune
from .rewrite import nothing_written
from .plan import Entry


class Choice(NamedTuple):
    dtype: str | None = None              # F32, F16, BF16: floating-point tensors as those values
    hf_names: bool = False                # a GGUF file's tensors under Hugging Face's names
    names: list[str] | None = None        # only these tensors
    match: str | None = None              # only the tensors whose name this regex finds
    drop: str | dict | None = None        # prune: "L:E,..." or {layer: [experts]}
    recommended: bool = False             # prune: the experts the Experts analysis finds redundant
    threshold: float | None = None        # ... at this similarity


class Chosen(NamedTuple):
    ckpt: Checkpoint                      # as written (a renamed copy for hf_names)
    entries: list[Entry]
    skipped: list[tuple[str, str]]        # (name, reason) of each tensor not written
    too_long: list[str]                   # non-tensor entries too long for __metadata__
    extra: dict[str, str]                 # __metadata__ beyond plan.metadata's
    pruned: prune.Pruned | None


def prunes(choice: Choice) -> bool:
    return choice.drop is not None or choice.recommended


def choose(ckpt: Checkpoint, choice: Choice, strict: bool, config: dict | None = None,
           failed: list[tuple[str, str]] = ()) -> Chosen:
    """What a write of `ckpt` with `choice` writes. `config`: the model's config.json (a prune
    updates its expert count); `failed`: tensors whose read failed in an earlier attempt (the
    page's save starts again without them), skipped with those reasons."""
    extra: dict[str, str] = {}
    pruned = None
    if prunes(choice):
        pruned = prune.plan(ckpt, config, choice.drop, choice.recommended, choice.threshold)
        extra.update(prune.metadata(pruned))
        tensors = pruned.tensors
    else:
        if choice.hf_names:
            renamed = hfnames.hf_tensors(ckpt)
            ckpt = copy.copy(ckpt)           # the open checkpoint keeps its own names
            ckpt.replace_tensors(renamed.tensors)
            extra.update(hfnames.metadata(renamed))
        tensors = plan.select(ckpt, choice.names, choice.match)
    entries, skipped, too_long = provenance.described(ckpt, tensors, choice.dtype, strict, extra)
    if failed:
        gone = {name for name, _ in failed}
        entries = [e for e in entries if e.tensor.name not in gone]
        if not entries:           # as the CLI's write ends when every read failed
            raise nothing_written(failed)
        skipped = [*skipped, *failed]
        extra.update(provenance.skipped_metadata(skipped))
    return Chosen(ckpt, entries, skipped, too_long, extra, pruned)
