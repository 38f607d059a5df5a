"""What a comparison adds up to: counts per category, the tensors ranked by relative error,
SNR per role by layer, and the layers that changed most (for a merge or a fine-tune).

Group figures pool the sums of their tensors (SNR of a role in a layer is 10·log10(Σa²/Σ(a−b)²)
over all its tensors' compared elements), so a stacked-experts tensor of 64 experts counts as
its elements, not as 64 equal votes.
"""

from __future__ import annotations

import math

from ..display import counted, exact_count
from ..roles import role_of
from .metrics import CATEGORIES, Diff

CHANGED = ("values_differ", "shape_changed")
# Pairs whose values were compared (and so say how alike the models are).
COMPARABLE = ("byte_identical", "same_values", "values_differ")
# Below this share of comparable tensors (among every tensor of either side, paired or not), two
# checkpoints are not versions of one model (a BERT against a Llama GGUF: 0 of 30), and the
# comparison says so instead of "no compared value differs".
DIFFERENT_MODELS_SHARE = 0.1


def summarise(comparison) -> dict:
    # Imported here: statistics (with fractions and decimal) is a slow import in Pyodide, and
    # importing tensorloupe brings this module.
    import statistics
    rows = comparison.rows
    counts = {c: 0 for c in CATEGORIES}
    for r in rows:
        counts[r.category] += 1
    differ = [r for r in rows if r.category == "values_differ" and r.diff is not None and r.diff.count]
    ranked = sorted(differ, key=lambda r: -r.diff.rel_error)
    snrs = [r.diff.snr_db for r in differ]
    label = f"{_main_dtype(comparison.b)} vs {_main_dtype(comparison.a)}"
    comparable = sum(counts[c] for c in COMPARABLE)
    out = {"counts": counts, "label": label, "matched": sum(1 for r in rows if r.pair.a and r.pair.b),
           "comparable": comparable,
           "different_models": bool(rows) and comparable < DIFFERENT_MODELS_SHARE * len(rows),
           "median_snr_db": statistics.median(snrs) if snrs else None, "median_over": len(snrs),
           "worst": None, "ranked": [r.name for r in ranked],
           "roles": _roles(rows), "layers": _layers(rows)}
    if ranked:
        worst = min(differ, key=lambda r: r.diff.snr_db)
        out["worst"] = {"name": worst.name, "snr_db": worst.diff.snr_db, "rel_error": worst.diff.rel_error}
    out["headline"] = _headline(out, comparison)
    return out


def _main_dtype(ckpt) -> str:
    by_dtype = ckpt.parameters_by_dtype()
    return next(iter(by_dtype)) if by_dtype else "?"


def _base(name: str) -> str:
    return name.split("[", 1)[0]  # an expert slice "blk.0.ffn_gate_exps.weight[3]" has its tensor's role


def _roles(rows) -> dict:
    """{role: [{"layer", "snr_db", "tensors", "identical"}...]} for roles seen in more than one
    layer, layers ascending; byte-identical tensors count as identical (SNR inf)."""
    groups: dict[str, dict[int, list]] = {}
    for r in rows:
        if r.category not in ("values_differ", "same_values", "byte_identical"):
            continue
        role = role_of(_base(r.name))
        if role.layer is None:
            continue
        groups.setdefault(role.role, {}).setdefault(role.layer, []).append(r)
    out = {}
    for role, layers in groups.items():
        points = []
        for layer in sorted(layers):
            pooled = Diff()
            for r in layers[layer]:
                if r.diff is not None:
                    pooled.merge(r.diff)
            identical = sum(1 for r in layers[layer] if r.category == "byte_identical")
            snr = pooled.snr_db if pooled.count else math.inf
            points.append({"layer": layer, "snr_db": snr, "tensors": len(layers[layer]),
                           "identical": identical})
        out[role] = points
    return out


def _layers(rows) -> list[dict]:
    """Per layer: tensors, how many changed, the pooled relative error of the changed ones;
    most changed first."""
    layers: dict[int, dict] = {}
    for r in rows:
        layer = role_of(_base(r.name)).layer
        if layer is None or r.category in ("only_in_a", "only_in_b", "unreadable"):
            continue
        entry = layers.setdefault(layer, {"layer": layer, "tensors": 0, "changed": 0, "pooled": Diff()})
        entry["tensors"] += 1
        if r.category in CHANGED:
            entry["changed"] += 1
            if r.diff is not None:
                entry["pooled"].merge(r.diff)
    out = []
    for entry in layers.values():
        pooled = entry.pop("pooled")
        entry["rel_error"] = pooled.rel_error if pooled.count else 0.0
        entry["snr_db"] = pooled.snr_db if pooled.count else math.inf
        entry["values_compared"] = pooled.count > 0   # False: only shapes changed (no SNR to say)
        out.append(entry)
    out.sort(key=lambda e: (-e["changed"] / e["tensors"], -e["rel_error"], e["layer"]))
    return out


def _headline(out: dict, comparison) -> str:
    counts = out["counts"]
    differ = [r for r in comparison.rows if r.category == "values_differ"]
    # Tensors no larger than the sample are compared whole: say "every element" only when it holds
    # for every tensor whose numbers the headline quotes.
    if comparison.exact or all(r.exact for r in differ):
        mode = "every element"
    else:
        mode = f"{sum(not r.exact for r in differ):,} of them sampled, {comparison.samples:,} elements each"
    if out["different_models"]:
        text = (f"these look like different models: {counted(out['comparable'], 'comparable tensor')}"
                f" of {exact_count(len(comparison.rows))}")
    elif out["worst"] is not None:
        # the median is of the differing tensors only: said with how many it is over
        text = (f"{out['label']}: median SNR {out['median_snr_db']:.1f} dB over "
                f"{counted(out['median_over'], 'differing tensor')}, worst {out['worst']['name']} "
                f"{out['worst']['snr_db']:.1f} dB ({mode})")
    else:
        text = f"{out['label']}: no compared value differs ({mode})"
    extras = [f"{counts[c]:,} {c.replace('_', ' ')}" for c in ("byte_identical", "same_values", "shape_changed",
                                                            "only_in_a", "only_in_b", "unreadable") if counts[c]]
    return text + ("; " + ", ".join(extras) if extras else "")
