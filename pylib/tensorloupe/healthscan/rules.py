"""The health rules: from every tensor's measure to flags, each with a severity, a sentence and the
numbers it rests on (the tensor's value and the median of its role's siblings).

Statistical rules compare a tensor with its role siblings (the same role in other layers and
experts), never with an absolute threshold: a healthy rms is 0.02 in one model and 1.0 in another.

  scale        log(rms) against the role's layer-wise trend (a Theil-Sen line through
               (layer, median log rms of the layer), robust to the outlier it looks for); the residual's robust z
               (residual / (1.4826 MAD), MAD floored at MIN_SPREAD) must reach Z_MIN and the
               factor rms / trend must reach SCALE_WARN (or its inverse). The same must hold for
               mean|w| in the same direction: the bulk of the values moved, not a few huge ones
               (one weight of 40 among 4096 of 0.02 multiplies the rms by 30, mean|w| by 1.6).
  blow-up      max|w| / median of the siblings' max|w| >= BLOWUP_WARN while the rms is in line
               (a scaled tensor is explained by its scale flag).
  norm         a norm weight ("*norm*.weight", "ln_*.weight", ...) all 1 or all 0 is untrained;
               one whose rms is a downward scale outlier has collapsed.
Rules on one tensor alone: non-finite values, all zero (dead), one value everywhere (constant).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from dataclasses import dataclass, field

from ..jsonable import json_number
from .measure import Measure

SEVERITIES = ("error", "warning", "info")
MIN_SIBLINGS = 4           # a role needs this many measured members for statistical rules
Z_MIN = 5.0
MIN_SPREAD = math.log(1.15)   # layer-to-layer noise below 15% is not "tight": no huge z from tiny MAD
SCALE_WARN, SCALE_ERROR = 3.0, 10.0
BLOWUP_WARN, BLOWUP_ERROR = 20.0, 1000.0
# Fewer elements than this may agree by chance (a 1-element bias is always "constant").
MIN_CONSTANT_ELEMS = 8
MAD_TO_SIGMA = 1.4826

NORM = re.compile(r"(^|\.)([^.]*norm[^.]*|ln_?[^.]*|[^.]*_ln)\.(weight|gamma|scale)$", re.IGNORECASE)
# A bias by name: ".bias", packed ones named "<what>_bias" (gpt-oss' experts.down_proj_bias,
# DeepSeek's e_score_correction_bias), and torch's RNN biases (lstm.bias_ih_l0, bias_hh_l1_reverse).
BIAS = re.compile(r"(^|\.)(bias|beta|[^.]*_bias|bias_(ih|hh)_l\d+(_reverse)?)$")


@dataclass
class Flag:
    kind: str
    severity: str
    tensor: str
    message: str
    evidence: dict
    exact: bool                    # the evidence covers every element (or was decided on bytes)
    related: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "tensor": self.tensor,
                "message": self.message, "exact": self.exact, "related": self.related,
                "evidence": {k: json_number(v) if isinstance(v, float) else v
                             for k, v in self.evidence.items()}}


def is_norm(name: str, shape) -> bool:
    return len(shape) == 1 and bool(NORM.search(name))


def how(m: Measure) -> str:
    return f"all {m.numel:,} values" if m.exact else f"{m.samples:,} sampled values of {m.numel:,}"


def lone_flags(m: Measure) -> list[Flag]:
    """Rules about one tensor alone. A dead or constant tensor gets no statistical rule after."""
    out = []
    if m.nonfinite:
        parts = [f"{n:,} {label}" for n, label in ((m.nan, "NaN"), (m.posinf, "+Inf"), (m.neginf, "-Inf")) if n]
        out.append(Flag("nonfinite", "error", m.name,
                        f"{' and '.join(parts)} among {how(m)}: any of them poisons every output it reaches.",
                        {"value": m.nonfinite, "nan": m.nan, "posinf": m.posinf, "neginf": m.neginf,
                         "samples": m.samples, "numel": m.numel}, m.exact))
    if m.constant is None or m.numel < MIN_CONSTANT_ELEMS:
        return out
    if is_norm(m.name, m.shape) and m.constant in (0.0, 1.0):
        out.append(Flag("norm_untrained", "warning", m.name,
                        f"Norm weight is exactly {m.constant:g} in {how(m)}: its initial value, "
                        f"as if it was never trained.", {"value": m.constant, "samples": m.samples}, m.exact))
    elif m.constant == 0.0 and BIAS.search(m.name):
        # A zero bias is the same as no bias: initialised and never updated (real checkpoints
        # have them, e.g. an unused pooler's), which is worth knowing but not a fault.
        out.append(Flag("zero_bias", "info", m.name,
                        f"All zero ({how(m)}): this bias does nothing, as if it was never trained.",
                        {"value": 0.0, "samples": m.samples}, m.exact))
    elif m.constant == 0.0:
        out.append(Flag("dead", "error", m.name,
                        f"All zero ({how(m)}): this tensor contributes nothing.",
                        {"value": 0.0, "samples": m.samples}, m.exact))
    else:
        out.append(Flag("constant", "warning", m.name,
                        f"Every value is {m.constant:g} ({how(m)}): a trained weight is never constant.",
                        {"value": m.constant, "samples": m.samples}, m.exact))
    return out


def sibling_flags(members: list[Measure]) -> list[Flag]:
    """Statistical rules within one role. `members` are its measured, non-constant tensors with
    finite values."""
    if len(members) < MIN_SIBLINGS:
        return []
    out = []
    rms = _deviations(members, [m.rms for m in members])
    bulk = _deviations(members, [m.mean_abs for m in members])
    rms_sorted = sorted(m.rms for m in members)
    max_sorted = sorted(m.max_abs for m in members)
    for i, m in enumerate(members):
        z, factor, expected = rms[i]
        if _outlier(z, factor) and _outlier(*bulk[i][:2]) and (factor > 1) == (bulk[i][1] > 1):
            out.append(_scale_flag(m, factor, z, expected, _median_without(rms_sorted, m.rms), bulk[i][1]))
            continue
        others = _median_without(max_sorted, m.max_abs)
        ratio = m.max_abs / others if others > 0 else math.inf
        if ratio >= BLOWUP_WARN:
            severity = "error" if ratio >= BLOWUP_ERROR else "warning"
            bound = "" if m.exact else "at least "
            out.append(Flag("blowup", severity, m.name,
                            f"max|w| is {bound}{m.max_abs:.4g}, {ratio:.3g}x the median of its "
                            f"{len(members) - 1} siblings ({others:.4g}) while its rms is in line: "
                            f"a few huge weights.",
                            {"statistic": "max|w|", "value": m.max_abs, "siblings_median": others, "ratio": ratio,
                             "rms": m.rms, "siblings": len(members) - 1}, m.exact))
    return out


def median(values) -> float:
    """statistics.median, imported when first needed: statistics (with fractions and decimal) is
    a slow import in Pyodide, and importing tensorloupe brings this module."""
    from statistics import median as of
    return of(values)


def _deviations(members: list[Measure], values: list[float]) -> list[tuple[float, float, float]]:
    """Per member: (robust z, factor over the trend, the trend's value) of log(value) against the
    role's layer-wise Theil-Sen line."""
    points = [(_x(m, i), math.log(v)) for i, (m, v) in enumerate(zip(members, values))]
    trend = _theil_sen(points)
    residuals = [y - trend(x) for x, y in points]
    centre = median(residuals)
    spread = max(MAD_TO_SIGMA * median(abs(r - centre) for r in residuals), MIN_SPREAD)
    return [((r - centre) / spread, math.exp(r - centre), math.exp(trend(x) + centre))
            for (x, _), r in zip(points, residuals)]


def _median_without(ordered: list[float], value: float) -> float:
    """The median of sorted `ordered` without one occurrence of `value`, in O(log n): a role of
    thousands of experts would otherwise sort its siblings once per member."""
    gap = bisect_left(ordered, value)
    n = len(ordered) - 1

    def at(k: int) -> float:
        return ordered[k if k < gap else k + 1]
    return (at((n - 1) // 2) + at(n // 2)) / 2


def _outlier(z: float, factor: float) -> bool:
    return abs(z) >= Z_MIN and max(factor, 1 / factor) >= SCALE_WARN


def _scale_flag(m: Measure, factor: float, z: float, expected: float, siblings_rms: float,
                bulk_factor: float) -> Flag:
    severe = max(factor, 1 / factor) >= SCALE_ERROR
    evidence = {"statistic": "rms", "value": m.rms, "siblings_median": siblings_rms, "trend": expected,
                "factor": factor, "z": z, "mean_abs_factor": bulk_factor}
    if factor < 1 and is_norm(m.name, m.shape):
        return Flag("norm_collapsed", "error" if severe else "warning", m.name,
                    f"Norm weight has collapsed: rms {m.rms:.4g} is {1 / factor:.3g}x below its "
                    f"layer trend ({expected:.4g}; siblings' median {siblings_rms:.4g}), so it "
                    f"nearly zeroes its layer's input.", evidence, m.exact)
    direction = f"{factor:.3g}x above" if factor >= 1 else f"{1 / factor:.3g}x below"
    return Flag("scale", "error" if severe else "warning", m.name,
                f"rms {m.rms:.4g} is {direction} its role's layer trend ({expected:.4g}; "
                f"siblings' median {siblings_rms:.4g}); robust z {z:+.1f}.", evidence, m.exact)


def _x(m: Measure, i: int) -> float:
    # Members without a layer index (experts of an unnumbered block) are placed in order.
    return float(m.layer) if m.layer is not None else float(i)


def _theil_sen(points: list[tuple[float, float]]):
    """The median-of-slopes line (Theil-Sen): a layer-wise drift is followed, an outlier is not.
    Fitted through each layer's median, so that thousands of experts cost layers^2 slopes."""
    by_x: dict[float, list[float]] = {}
    for x, y in points:
        by_x.setdefault(x, []).append(y)
    centres = sorted((x, median(ys)) for x, ys in by_x.items())
    slopes = [(y2 - y1) / (x2 - x1) for k, (x1, y1) in enumerate(centres) for x2, y2 in centres[k + 1:]]
    slope = median(slopes) if slopes else 0.0
    intercept = median(y - slope * x for x, y in points)
    return lambda x: intercept + slope * x
