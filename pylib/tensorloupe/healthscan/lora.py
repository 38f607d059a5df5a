"""Health of a LoRA adapter (adapters/), judged on its factors A and B, read whole and exactly
(they are r values a row: small), not on ΔW's samples:

  untrained   B all zero: PEFT's initialisation (ΔW = 0); info, not a fault: the scan's "dead"
              flag on that ΔW is replaced by this one.
  dead pair   A all zero while B is not: the pair changes nothing, though it was trained.
  nonfinite   NaN or Inf in A or B, counted and named by factor (replaces the scan's ΔW flag,
              which saw only its samples of the product).
  exploding   ‖ΔW‖_F (exact, from the r×r Gram matrices: ‖s·B·A‖²_F = s²·Σ (AAᵀ)∘(BᵀB), no
              ΔW materialised) at least EXPLODE_WARN times the median of the adapter's pairs.

LyCORIS modules (LoHa, LoKr, LoCon Tucker; adapters/lycoris.py) are judged the same way on their
factors: NaN/Inf named by factor; a factor all zero makes ΔW zero (untrained when it is one the
libraries start at zero, INIT_ZERO, else a dead module); ‖ΔW‖_F exact from the factors:
  LoKr   ‖s·w1 ⊗ w2‖ = |s|·‖w1‖·‖w2‖
  LoHa   (w1_a·w1_b) ⊙ (w2_a·w2_b) = K_A·K_B with K_A's row p = w1_a[p] ⊗ w2_a[p] and K_B's
         column q = w1_b[:, q] ⊗ w2_b[:, q] (the face-splitting product): a rank r1·r2 LoRA,
         whose Gram formula costs (r1·r2)²·(out + in) products; a Tucker LoHa is one per kernel
         position (tucker.py `mixed`). Past NORM_PRODUCTS products it is not computed (a module
         of r 16: 65,536·(out + in)) and the module takes no part in the median.
  LoCon  the Tucker core's Gram form (tucker.py `frobenius_squared`), r³ per kernel position.
"""

from __future__ import annotations

import math
from math import fsum
from operator import mul

from ..dtypes import lookup
from ..model import Checkpoint, Tensor
from .rules import SEVERITIES, Flag, median

EXPLODE_WARN, EXPLODE_ERROR = 10.0, 100.0
NORM_PRODUCTS = 1 << 23
# the factors lycoris and peft initialise at zero (so ΔW starts at zero): all zero means untrained
# (lycoris: lora_up, hada_w2_a, lokr_w2 / lokr_w2_b; peft: hada_w2_b, lokr_w1 / lokr_w1_a)
INIT_ZERO = ("lora_up.weight", "hada_w2_a", "hada_w2_b", "lokr_w1", "lokr_w1_a", "lokr_w2", "lokr_w2_b")
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
        if t.parts and t.info.get("lycoris"):
            replaced.add(t.name)
            flag = _lycoris_fault(t)
            if flag is not None:
                flags.append(flag)
                continue
            norm = lycoris_norm(t)
            if norm is not None:
                norms[t.name] = norm
            continue
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


def _lycoris_fault(t: Tensor) -> Flag | None:
    """A LyCORIS module's NaN/Inf, or a factor all zero (so ΔW is zero), from its factors."""
    factors = [(f, _values(f)) for f in t.parts if not f.name.endswith(".alpha")]
    bad = {f.name: counts for f, v in factors for counts in (_nonfinite(v),) if sum(counts.values())}
    if bad:
        said = "; ".join(f"{n!r} holds " + ", ".join(f"{c:,} {LABELS[k]}" for k, c in counts.items() if c)
                         for n, counts in bad.items())
        return Flag("nonfinite", "error", t.name, f"{said}: every value of this ΔW that meets "
                    "them is NaN or Inf.", {"statistic": "non-finite in the factors",
                                            "value": sum(sum(c.values()) for c in bad.values()),
                                            "siblings_median": None, "factors": bad}, True,
                    related=list(bad))
    zero = [f for f, v in factors if not any(v)]
    if not zero:
        return None
    f = zero[0]
    if f.name.endswith(INIT_ZERO):
        return Flag("untrained", "info", t.name, f"untrained: {f.name!r} is all zero, as the "
                    "LyCORIS and peft initialisations start it, so this ΔW is zero.",
                    {"statistic": "max|factor|", "value": 0.0, "factor": f.name}, True, related=[f.name])
    return Flag("dead_pair", "warning", t.name, f"{f.name!r} is all zero, so this module's ΔW is "
                "zero: it changes nothing.", {"statistic": "max|factor|", "value": 0.0, "factor": f.name},
                True, related=[f.name])


def lycoris_norm(t: Tensor) -> float | None:
    """‖ΔW‖_F of a LyCORIS module, exact from its factors; None past NORM_PRODUCTS (LoHa)."""
    info = t.info.get("lycoris") if t.parts else None
    if info is None:
        return None
    source, scale = t.source, abs(info["scale"])
    factors = source.factors()
    kind = source._kind()
    if kind == "locon":
        from ..adapters.tucker import frobenius_squared
        return scale * math.sqrt(max(frobenius_squared(factors[0]), 0.0))
    if kind == "lokr":
        (_, w1), (_, w2) = factors
        return scale * math.sqrt(fsum(v * v for v in w1)) * math.sqrt(fsum(v * v for v in w2))
    if kind == "loha":
        (a1, c1), (a2, c2) = factors
        r1, r2, kernel, cols = len(c1[0]), len(c2[0]), 1, len(c1)
        out = len(a1) // r1
    else:
        t1, t2 = factors
        r1, r2, kernel, (out, cols) = t1.r, t2.r, t1.kernel, t1.shape
    if (r1 * r2) ** 2 * (out + cols) * kernel > NORM_PRODUCTS:    # before any product is made
        return None
    if kind == "loha":      # K_A rows w1_a[p] ⊗ w2_a[p], K_B columns w1_b[:, q] ⊗ w2_b[:, q]
        slices = [([a1[i * r1:(i + 1) * r1] for i in range(out)], c1,
                   [a2[i * r2:(i + 1) * r2] for i in range(out)], c2)]
    else:                   # a Tucker LoHa: one LoHa per kernel position
        slices = [([t1.mixed(i)[k] for i in range(out)], t1.wb, [t2.mixed(i)[k] for i in range(out)], t2.wb)
                  for k in range(kernel)]
    total = 0.0
    for rows1, cols1, rows2, cols2 in slices:
        ka = [[x * y for x in row1 for y in row2] for row1, row2 in zip(rows1, rows2)]      # [out, r1·r2]
        kb = [[x * y for x in col1 for y in col2] for col1, col2 in zip(cols1, cols2)]      # [in, r1·r2]
        a_rows = [list(c) for c in zip(*kb)]         # K_B's r1·r2 rows over in
        b_cols = [list(c) for c in zip(*ka)]         # K_A's r1·r2 columns over out
        total += _frobenius(a_rows, b_cols, 1.0) ** 2
    return scale * math.sqrt(total)


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
