"""Health of a LoRA adapter (adapters/), judged on its factors A and B, read whole and exactly
(they are r values a row: small), not on ΔW's samples:

  untrained   B all zero: PEFT's initialisation (ΔW = 0); info, not a fault: the scan's "dead"
              flag on that ΔW is replaced by this one.
  dead pair   A all zero while B is not: the pair changes nothing, though it was trained.
  nonfinite   NaN or Inf in A or B, counted and named by factor (replaces the scan's ΔW flag,
              which saw only its samples of the product).
  exploding   ‖ΔW‖_F (exact, from the r×r Gram matrices: ‖s·B·A‖²_F = s²·Σ (AAᵀ)∘(BᵀB), no
              ΔW materialised) at least EXPLODE_WARN times the median of the adapter's pairs.
"""

from __future__ import annotations

import math
from math import fsum
from operator import mul

from ..dtypes import lookup
from ..model import Checkpoint, Tensor
from .rules import SEVERITIES, Flag, median

EXPLODE_WARN, EXPLODE_ERROR = 10.0, 100.0
MIN_PAIRS = 3          # a median of fewer pairs says nothing
REPLACED = ("dead", "nonfinite")
LABELS = {"nan": "NaN", "posinf": "+Inf", "neginf": "-Inf"}


def _values(t: Tensor) -> list:
    return lookup(t.dtype).decode(t.source.read_data(t.offset, t.nbytes), t.big_endian)


def _rows(values: list, n: int) -> list[list]:
    width = len(values) // n if n else 0
    return [values[i * width:(i + 1) * width] for i in range(n)]


def _gram(rows: list[list]) -> list[list[float]]:
    """Symmetric: each dot product computed once."""
    n = len(rows)
    g = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i, n):
            g[i][j] = g[j][i] = fsum(map(mul, rows[i], rows[j]))
    return g


def _frobenius(a_rows: list[list], b_cols: list[list], scale: float) -> float:
    ga, gb = _gram(a_rows), _gram(b_cols)
    total = fsum(x * y for ra, rb in zip(ga, gb) for x, y in zip(ra, rb))
    return abs(scale) * math.sqrt(max(total, 0.0))


def _nonfinite(values: list) -> dict:
    return {"nan": sum(1 for v in values if v != v),
            "posinf": values.count(math.inf), "neginf": values.count(-math.inf)}


def adapter_flags(ckpt: Checkpoint) -> tuple[list[Flag], set[str]]:
    """The adapter's flags, and the ΔW names whose scan flags of REPLACED kinds they replace."""
    flags, replaced, norms = [], set(), {}
    for t in ckpt.tensors:
        lora = t.info.get("lora") if t.parts else None
        if lora is None:
            continue
        a, b = t.parts[0], t.parts[1]
        r = lora["r"]
        av, bv = _values(a), _values(b)
        bad = {name: counts for name, counts in ((a.name, _nonfinite(av)), (b.name, _nonfinite(bv)))
               if sum(counts.values())}
        replaced.add(t.name)
        if bad:
            said = "; ".join(f"{n!r} holds " + ", ".join(f"{c:,} {LABELS[k]}" for k, c in counts.items() if c)
                             for n, counts in bad.items())
            flags.append(Flag("nonfinite", "error", t.name, f"{said}: every value of this ΔW "
                              "that meets them is NaN or Inf.",
                              {"statistic": "non-finite in A, B", "value": sum(sum(c.values()) for c in bad.values()),
                               "siblings_median": None, "factors": bad, "r": r}, True,
                              related=list(bad)))
            continue
        if not any(bv):
            flags.append(Flag("untrained", "info", t.name, f"untrained (B = 0): {b.name!r} is all "
                              "zero, PEFT's initialisation, so this ΔW is zero.",
                              {"statistic": "max|B|", "value": 0.0, "factor": b.name}, True,
                              related=[b.name]))
            continue
        if not any(av):
            flags.append(Flag("dead_pair", "warning", t.name, f"A ({a.name!r}) is all zero while B "
                              "is not: this pair changes nothing.",
                              {"statistic": "max|A|", "value": 0.0, "factor": a.name},
                              True, related=[a.name]))
            continue
        a_rows = _rows(av, r)
        b_cols = [list(c) for c in zip(*_rows(bv, len(bv) // r))]
        norms[t.name] = _frobenius(a_rows, b_cols, lora["scale"])
    if len(norms) >= MIN_PAIRS:
        for name, norm in norms.items():
            others = median([v for n, v in norms.items() if n != name])
            ratio = norm / others if others > 0 else math.inf
            if ratio >= EXPLODE_WARN:
                flags.append(Flag("exploding", "error" if ratio >= EXPLODE_ERROR else "warning", name,
                                  f"‖ΔW‖ is {norm:.4g}, {ratio:.3g}x the median of the adapter's "
                                  f"other {len(norms) - 1} pairs ({others:.4g}).",
                                  {"statistic": "‖ΔW‖_F", "value": norm, "siblings_median": others,
                                   "ratio": ratio}, True))
    return flags, replaced


def adjusted(ckpt: Checkpoint, flags: list[Flag], measures) -> list[Flag]:
    """The scan's flags with the adapter's: its own replace the scan's dead/nonfinite flags on ΔW."""
    own, replaced = adapter_flags(ckpt)
    kept = [f for f in flags if not (f.tensor in replaced and f.kind in REPLACED)]
    by_name = {m.name: m for m in measures}
    for name in replaced:
        if name in by_name:
            by_name[name].flags = [k for k in by_name[name].flags if k not in REPLACED]
    for f in own:
        if f.tensor in by_name:
            by_name[f.tensor].flags.append(f.kind)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(kept + own, key=lambda f: order[f.severity])
