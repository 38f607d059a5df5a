"""Model health: which tensors look broken, from a bounded read of every tensor.

    report = tensorloupe.health(ckpt)                  # 32 KiB per tensor, stated by health_cost()
    for flag in report.flags: print(flag.severity, flag.tensor, flag.message)

Every tensor is measured from a few windows within a byte budget (`measure.py`; whole when it fits,
and then exact), tensors are grouped by role (`roles.py`) and judged against their siblings
(`rules.py`); what the samples suggest about copies and dead tensors is then decided on bytes
(`confirm.py`); flags a model's own conventions explain (a fresh model's norms, Mamba's init)
become information (`conventions.py`). A package rather than one module so that each of those jobs stays one file.

Cost: the scan reads the planned windows of every measurable tensor (`health_cost` counts them
without reading); confirmations then read whole only the tensors the scan singled out (copies,
tensors of one value), each at most `confirm_bytes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..errors import Cancelled, UsageError
from ..jsonable import json_number
from ..model import Checkpoint
from ..opening import shards
from . import confirm, conventions
from .confirm import DEFAULT_CONFIRM_BYTES
from ..sampler.layout import window_cost
from .measure import DEFAULT_BUDGET, Measure, exact_view, measure_steps, pieces, skip_reason, windows
from .reads import read_ahead
from .rules import SEVERITIES, Flag, lone_flags, median, sibling_flags

__all__ = ["health", "health_steps", "health_cost", "Report", "Cost", "Flag", "Measure",
           "DEFAULT_BUDGET", "DEFAULT_CONFIRM_BYTES"]


@dataclass
class Cost:
    """What the scan reads, before it runs."""
    tensors: int                 # tensors that will be measured
    skipped: int                 # tensors without weight values (integer buffers, empty, unknown dtype)
    budget: int | None           # bytes per tensor (None: every byte)
    scan_bytes: int              # bytes the scan reads
    exact: bool                  # False if torch storages still need their ZIP headers read first,
                                 # or a long strided window is costed by its span (an upper bound)
    confirm_bytes: int | None    # the most a confirmation reads of one flagged tensor
    elements: int = 0            # values the scan decodes (a stride-0 view's stored ones once)

    def to_json(self) -> dict:
        return {"tensors": self.tensors, "skipped": self.skipped, "budget": self.budget,
                "scan_bytes": self.scan_bytes, "exact": self.exact, "confirm_bytes": self.confirm_bytes,
                "elements": self.elements}


@dataclass
class Report:
    file: str
    format: str
    cost: Cost
    measures: list[Measure]
    flags: list[Flag] = field(default_factory=list)
    bytes_read: int = 0
    complete: bool = False
    phase: str = "scan"          # "scan", "confirm", "done"

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for f in self.flags if f.severity == s) for s in SEVERITIES}

    def profile(self) -> list[dict]:
        """Per role with layers: each member's rms and max|w| by layer, flagged points marked."""
        roles: dict[str, list[Measure]] = {}
        for m in self.measures:
            if m.measured and m.layer is not None:
                roles.setdefault(m.role, []).append(m)
        return [{"role": role, "points": [
                    {"layer": m.layer, "expert": m.expert, "tensor": m.name, "rms": json_number(m.rms),
                     "max_abs": json_number(m.max_abs), "mean_abs": json_number(m.mean_abs), "exact": m.exact, "flags": list(m.flags)}
                    for m in members]}
                for role, members in roles.items() if len({m.layer for m in members}) > 1]

    def to_json(self) -> dict:
        return {"file": self.file, "format": self.format, "complete": self.complete,
                "cost": self.cost.to_json(), "bytes_read": self.bytes_read, "counts": self.counts(),
                "flags": [f.to_json() for f in self.flags], "profile": self.profile(),
                "tensors": [m.to_json() for m in self.measures]}


def health_cost(checkpoint: Checkpoint, budget: int | None = DEFAULT_BUDGET,
                confirm_bytes: int | None = DEFAULT_CONFIRM_BYTES,
                max_elements: int | None = None) -> Cost:
    """What the scan will read and decode; with budget None (every element), refused before
    anything is read if a tensor's view would decode more elements than its bytes hold
    (sampler.repeats; `max_elements` allows more)."""
    _check(budget, confirm_bytes)
    measured = [t for t in checkpoint.tensors if skip_reason(t) is None]
    views = [exact_view(t, budget, max_elements)[0] for t in measured]
    plans = [(v, windows(v, budget)) for v in views]
    costs = [window_cost(v, s, n) for v, plan in plans for s, n in pieces(plan)]   # as measured
    total = sum(n for n, _ in costs)
    elements = sum(n for _, plan in plans for _, n in plan)
    exact = all(t.known_file_offset is not None for t in measured) and all(e for _, e in costs)
    return Cost(len(measured), len(checkpoint.tensors) - len(measured), budget, total, exact,
                confirm_bytes, elements)


def health(checkpoint: Checkpoint, budget: int | None = DEFAULT_BUDGET,
           confirm_bytes: int | None = DEFAULT_CONFIRM_BYTES,
           progress: Callable[[int, int], object] | None = None,
           max_elements: int | None = None) -> Report:
    """Measure and judge every tensor. `budget` bytes are read per tensor (None: every byte);
    `progress(done, total)` (tensors, then confirmation steps) returning False cancels."""
    report = None
    for done, total, report in health_steps(checkpoint, budget, confirm_bytes, max_elements):
        if progress is not None and progress(done, total) is False:
            raise Cancelled("the health scan was cancelled")
    return report


def health_steps(checkpoint: Checkpoint, budget: int | None = DEFAULT_BUDGET,
                 confirm_bytes: int | None = DEFAULT_CONFIRM_BYTES,
                 max_elements: int | None = None) -> Iterator[tuple[int, int, Report]]:
    """The scan in small steps, yielding (done, total, report so far): one tensor (or one piece of
    a large tensor) per step, then one piece of a confirmation. The last report is complete."""
    cost = health_cost(checkpoint, budget, confirm_bytes, max_elements)
    return _steps(checkpoint, cost, budget, confirm_bytes, max_elements)


def _steps(checkpoint, cost, budget, confirm_bytes, max_elements=None):
    start = checkpoint.bytes_read()
    report = Report(checkpoint.name, checkpoint.format, cost, [])
    total = len(checkpoint.tensors)
    ahead = read_ahead(checkpoint.tensors, budget)
    for i, tensor in enumerate(checkpoint.tensors):
        m = None
        for m in measure_steps(tensor, budget, max_elements, next(ahead)):
            report.bytes_read = checkpoint.bytes_read() - start
            yield i, total, report
        report.measures.append(m)
        yield i + 1, total, report
    report.phase = "confirm"
    lone: dict[str, list[Flag]] = {}
    for m in report.measures:
        if m.measured and m.constant is not None and not m.exact:
            yield from _confirm_constant(checkpoint, m, confirm_bytes, report, start, total)
        lone[m.name] = lone_flags(m) if m.measured else []
    copies: list[Flag] = []
    for group in confirm.candidates(report.measures):
        copies += (yield from _confirm_copies(checkpoint, group, confirm_bytes, report, start, total))
    report.flags = _incomplete(checkpoint) + _judge(report.measures, lone, copies)
    if "adapter" in checkpoint.extras:   # a LoRA adapter: judged on its factors too (lora.py)
        from .lora import adjusted
        report.flags = adjusted(checkpoint, report.flags, report.measures)
    report.bytes_read = checkpoint.bytes_read() - start
    report.complete, report.phase = True, "done"
    yield total, total, report


def _confirm_constant(checkpoint, m: Measure, limit, report, start, total):
    tensor = checkpoint.tensor(m.name)
    if not confirm.confirmable(tensor, limit):
        return
    answer = None
    for answer in confirm.constant_steps(tensor, m.constant):
        report.bytes_read = checkpoint.bytes_read() - start
        yield total, total, report
    if answer:
        m.exact, m.samples = True, m.numel
    else:
        m.constant = None  # not one value after all: judged with its siblings


def _confirm_copies(checkpoint, group: list[Measure], limit, report, start, total):
    """Flags for one group of candidates: names over the same bytes are tied (no read needed);
    distinct storages are hashed whole and equal hashes are copies."""
    tensors = [checkpoint.tensor(m.name) for m in group]
    owner: list[int] = []                 # each member's first member over the same bytes
    for i, tensor in enumerate(tensors):
        owner.append(next((j for j in range(i) if owner[j] == j and confirm.same_bytes(tensors[j], tensor)), i))
    flags = []
    for j in sorted(set(owner)):
        sharing = [i for i in range(len(group)) if owner[i] == j]
        if len(sharing) > 1:
            flags.append(confirm.duplicate_flag(group[j], [group[i] for i in sharing[1:]], None,
                                                tensors[j].nbytes, True))
    storages = sorted(set(owner))
    if len(storages) < 2:
        return flags
    if not confirm.confirmable(tensors[0], limit):
        return flags + [confirm.unconfirmed_flag([group[j] for j in storages], limit)]
    digests: dict[str, list[int]] = {}
    for j in storages:
        digest = group[j].digest if group[j].exact else None
        for step in ([] if digest else confirm.full_digest_steps(tensors[j])):
            digest = step
            report.bytes_read = checkpoint.bytes_read() - start
            yield total, total, report
        digests.setdefault(digest, []).append(j)
    for digest, members in digests.items():
        if len(members) > 1:
            flags.append(confirm.duplicate_flag(group[members[0]], [group[j] for j in members[1:]],
                                                digest, tensors[members[0]].nbytes, False))
    return flags


def _judge(measures: list[Measure], lone: dict[str, list[Flag]], copies: list[Flag]) -> list[Flag]:
    roles: dict[str, list[Measure]] = {}
    for m in measures:
        if m.measured:
            roles.setdefault(m.role, []).append(m)
    flags: list[Flag] = []
    for members in roles.values():
        for m in members:
            for f in lone[m.name]:
                f.evidence.update(_siblings(f, m, members))
            flags += lone[m.name]
        healthy = [m for m in members if m.constant is None and m.mean_abs > 0 and math.isfinite(m.rms)]
        flags += sibling_flags(healthy)
    flags = conventions.calibrate(flags + copies, measures)
    by_name = {m.name: m for m in measures}
    for f in flags:
        by_name[f.tensor].flags.append(f.kind)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    index = {m.name: i for i, m in enumerate(measures)}
    return sorted(flags, key=lambda f: (order[f.severity], index[f.tensor], f.kind))


def _incomplete(checkpoint: Checkpoint) -> list[Flag]:
    """A shard set with parts missing (or tensors its index names that no part holds) is an
    error, said first: its tensors were not scanned. The flag's `tensor` is the missing file
    (there is no tensor to name); the rest of the set is still judged."""
    report = checkpoint.extras.get("shards") or {}
    missing = report.get("missing") or []
    flags = []
    for sentence in shards.errors(checkpoint):
        named = next((m for m in missing if f"({m})" in sentence), None)
        kind = "missing_part" if named or "parts are missing" in sentence else "not_in_shards"
        flags.append(Flag(kind, "error", named or checkpoint.name, sentence,
                          {"statistic": "parts missing", "value": report.get("missing_count", 0),
                           "siblings_median": None}, True))
    return flags


def _siblings(flag: Flag, m: Measure, members: list[Measure]) -> dict:
    """The statistic a lone flag rests on, for the tensor and the median of its role siblings."""
    others = [x for x in members if x is not m]
    if flag.kind == "nonfinite":
        return {"statistic": "non-finite count",
                "siblings_median": median(x.nonfinite for x in others) if others else None}
    finite = [x.rms for x in others if math.isfinite(x.rms)]
    return {"statistic": "rms", "value": m.rms if math.isfinite(m.rms) else None,
            "constant": m.constant, "siblings_median": median(finite) if finite else None}


def _check(budget, confirm_bytes) -> None:
    if budget is not None and budget < 1:
        raise UsageError("the byte budget per tensor must be at least 1 (or None for every byte)")
    if confirm_bytes is not None and confirm_bytes < 0:
        raise UsageError("the confirmation limit must be at least 0 bytes (or None for no limit)")
