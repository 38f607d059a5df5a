"""The comparison as the CLI prints it (`tensorloupe diff`)."""

from __future__ import annotations

import math

from ..display import counted, escaped


def _db(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return "inf" if value == math.inf else f"{value:.1f}"


def print_diff(result, top: int = 15) -> None:
    """The comparison as text: headline, counts, the ranking, per-role SNR by layer, layers."""
    s = result.summary
    mode = ("exact (every element)" if result.exact else
            f"sampled (up to {counted(result.samples, 'element')} per tensor; smaller tensors whole)")
    print(f"A: {escaped(result.a.name)} ({result.a.format}, {counted(len(result.a.tensors), 'tensor')})")
    print(f"B: {escaped(result.b.name)} ({result.b.format}, {counted(len(result.b.tensors), 'tensor')})")
    print(f"matched {counted(s['matched'], 'pair')}" + (f" through the {result.name_map} name map" if result.name_map else "")
          + f"; values {mode}; byte identity decided on bytes")
    # what the comparison read beyond the headers (their cached blocks serve small files whole)
    print(f"bytes read for the comparison: A {result.bytes_read['a']:,}, B {result.bytes_read['b']:,}")
    print(s["headline"])
    print("  " + ", ".join(f"{k.replace('_', ' ')}: {v:,}" for k, v in s["counts"].items()))
    differ = {r.name: r for r in result.rows}
    if s["ranked"] and top:
        print(f"\nmost changed (relative error ‖a−b‖/‖a‖), top {min(top, len(s['ranked'])):,}:")
        print(f"  {'tensor':48} {'rel err':>10} {'SNR dB':>7} {'cosine':>9} {'max|a-b|':>10}")
        for name in s["ranked"][:top]:
            d = differ[name].diff
            print(f"  {escaped(name)[:48]:48} {d.rel_error:10.3e} {_db(d.snr_db):>7} {d.cosine:9.6f} {d.max_abs:10.3e}")
    if s["roles"] and not s["different_models"]:
        print("\nSNR dB per role by layer:")
        for role, points in s["roles"].items():
            print(f"  {role[:48]:48} " + " ".join(_db(p["snr_db"]) for p in points))
    changed = [e for e in s["layers"] if e["changed"]]
    if changed and not s["different_models"]:   # layer by layer means nothing across models
        print("\nlayers changed most:")
        for e in changed[:top]:
            said = (f"pooled rel err {e['rel_error']:.3e}, SNR {_db(e['snr_db'])} dB"
                    if e["values_compared"] else "shapes changed, no values compared")
            print(f"  layer {e['layer']:>4}: {e['changed']:,}/{counted(e['tensors'], 'tensor')} "
                  f"changed, {said}")
    others = [r for r in result.rows if r.category in ("only_in_a", "only_in_b", "shape_changed", "unreadable")]
    for r in others[:top]:
        print(f"  {r.category.replace('_', ' ')}: {escaped(r.name)}" + (f" ({escaped(r.message)})" if r.message else ""))
    if len(others) > top:
        print(f"  … and {len(others) - top:,} more (see --json)")
    regrouped = [r for r in result.rows if r.pair.regrouped and r.category != "shape_changed"]
    for r in regrouped[:top]:
        print(f"  regrouped: {escaped(r.name)} ({escaped(r.pair.notes[0])})")
    if len(regrouped) > top:
        print(f"  … and {len(regrouped) - top:,} more regrouped (see --json)")
