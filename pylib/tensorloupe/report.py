"""Human-readable and JSON renderings of checkpoints, shared by the CLI and the web worker."""

from __future__ import annotations

import json
import math


from .model import Checkpoint, Tensor
from .jsonable import FULL, Limits, bounded, json_number

BAR = "█▉▊▋▌▍▎▏"


def checkpoint_json(ckpt: Checkpoint, limits: Limits = FULL) -> dict:
    """The one JSON shape of a checkpoint: `inspect --json` prints it, the page's model payload
    is built on it (web/handlers.py). Never reads: an offset not known yet is null (see
    Checkpoint.locate_all). `limits` bound metadata and extras (the page previews them)."""
    return {"file": ckpt.name, "format": ckpt.format, "size": ckpt.size,
            "tensor_count": len(ckpt.tensors), "parameters": ckpt.parameter_count,
            "parameters_by_dtype": ckpt.parameters_by_dtype(), "metadata": bounded(ckpt.metadata, limits),
            "warnings": [str(w) for w in ckpt.warnings], "extras": bounded(ckpt.extras, limits),
            "tensors": [t.to_json() for t in ckpt.tensors]}


def inspect_json(ckpt: Checkpoint) -> dict:
    ckpt.locate_all()
    return checkpoint_json(ckpt)


def human_bytes(n: int) -> str:
    # Integer comparisons and division: a header can make a count no float can hold (1e1233).
    for power, unit in enumerate(("B", "KiB", "MiB", "GiB", "TiB")):
        if n < 1024 ** (power + 1) or unit == "TiB":
            if n >= 1024 ** 5 * 1000:
                return f"{scientific(n)} B"
            return f"{n} B" if unit == "B" else f"{n / 1024 ** power:.1f} {unit}"
    return str(n)


def human_count(n: int) -> str:
    if n >= 10**15:
        return scientific(n)
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def exact_count(n: int) -> str:
    """1,234,567; beyond what str() may print (4,300 digits), the scientific form."""
    return f"{n:,}" if n.bit_length() < 14000 else scientific(n)


def scientific(n: int) -> str:
    """A non-negative integer of any size as 1.23e45, by integer arithmetic only (no float
    conversion to overflow, no str() of more than 4,300 digits)."""
    if n < 1000:
        return str(n)
    exponent = int((n.bit_length() - 1) * 0.30102999566398120)
    while 10 ** (exponent + 1) <= n:
        exponent += 1
    while 10 ** exponent > n:
        exponent -= 1
    mantissa = n * 100 // 10 ** exponent  # three significant digits, truncated
    return f"{mantissa // 100}.{mantissa % 100:02d}e{exponent}"


def short(value, width: int = 100) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[:width - 1] + "…"


def print_inspect(ckpt: Checkpoint) -> None:
    ckpt.locate_all()
    by_dtype = ", ".join(f"{d} {human_count(n)}" for d, n in ckpt.parameters_by_dtype().items())
    print(ckpt.name)
    print(f"  format      {ckpt.format}")
    print(f"  size        {human_bytes(ckpt.size)} ({ckpt.size:,} bytes)")
    print(f"  tensors     {len(ckpt.tensors)}")
    print(f"  parameters  {exact_count(ckpt.parameter_count)} ({by_dtype})")
    card = ckpt.extras.get("model_card")
    if card:
        print("\nModel card")
        for label, value in card.items():
            print(f"  {label:<22} {short(value)}")
    if ckpt.metadata:
        print("\nMetadata")
        for key, value in ckpt.metadata.items():
            print(f"  {key}: {short(bounded(value))}")
    safety = ckpt.extras.get("safety")
    if safety:
        print_safety(safety)
    if ckpt.warnings:
        print("\nWarnings")
        for w in ckpt.warnings:
            print(f"  ! {w}")
    print("\nTensors")
    rows = [(t.name, t.dtype, "×".join(map(str, t.shape)) or "scalar", human_bytes(t.nbytes),
             _bits(t), str(t.known_file_offset)) for t in ckpt.tensors]
    header = ("name", "dtype", "shape", "size", "bits", "offset")
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    print("  " + "  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)))


def _bits(t: Tensor) -> str:
    info = t.dtype_info
    return "?" if info is None else f"{info.bits:g}"


def print_safety(safety: dict) -> None:
    print("\nPickle safety report (nothing was executed)")
    for note in safety.get("notes", []):
        print(f"  NOTE: {note}")
    for g in safety.get("globals", []):
        mark = "DANGEROUS" if g["verdict"] == "dangerous" else g["verdict"]
        reason = f"  ({g['reason']})" if g.get("reason") else ""
        print(f"  {mark:<10} {g['name']}  ×{g.get('count', 1)}{reason}")
    for call in safety.get("calls", []):
        args = ", ".join(json.dumps(a, ensure_ascii=False) for a in call.get("args", []))
        kwargs = f", **{json.dumps(call['kwargs'], ensure_ascii=False)}" if call.get("kwargs") else ""
        print(f"  call never made: {call['global']}({args}{kwargs})")
    if safety.get("dangerous"):
        print(f"  This file names {len(safety['dangerous'])} dangerous global(s): "
              f"{', '.join(safety['dangerous'])}. torch.load(weights_only=False) would run them "
              "(names outside the allow-list: may run them).")


def _fmt(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def print_stats(entry: dict) -> None:
    s = entry["stats"]
    shape = "×".join(map(str, entry["shape"])) or "scalar"
    how = "all" if entry["exact"] else f"{entry['samples']:,} sampled of"
    print(f"{entry['name']}  {entry['dtype']}  {shape}  ({how} {entry['numel']:,} elements)")
    print(f"  min {_fmt(s['min'])}  max {_fmt(s['max'])}  mean {_fmt(s['mean'])}  std {_fmt(s['std'])}"
          f"  near-zero {s['zeros'] * 100:.2f}%  nan {s['nan']}  +inf {s['posinf']}  -inf {s['neginf']}")
    if s.get("percentiles"):
        print("  " + "  ".join(f"{k} {_fmt(v)}" for k, v in s["percentiles"].items()))
    hist = entry["histogram"]
    top = max(hist["counts"]) or 1
    for left, count in zip(hist["edges"], hist["counts"]):
        eighths = round(count / top * 40 * 8)
        bar = BAR[0] * (eighths // 8) + (BAR[8 - eighths % 8] if eighths % 8 else "")
        print(f"  {_fmt(left):>12} │{bar} {count}")
    print()


def print_values(t: Tensor, start: int, got: list) -> None:
    print(f"{t.name}  {t.dtype}  {'×'.join(map(str, t.shape)) or 'scalar'}")
    for i, v in enumerate(got, start):
        # repr, not a rounded format: these are the exact stored values.
        print(f"  [{', '.join(map(str, unravel(i, t.shape)))}]  {v!r}")


def unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for dim in reversed(shape):
        flat, i = divmod(flat, dim)
        index.append(i)
    return list(reversed(index))


def print_moe(analysis) -> None:
    found = analysis.moe
    if not found.detected:
        print(f"No Mixture-of-Experts structure: {found.reason}.")
        return
    top_k = f"{found.top_k} (from {found.top_k_source})" if found.top_k else "unknown (no metadata says)"
    print(f"Mixture of Experts: {len(found.layers)} layers, {found.expert_count} experts, top-k {top_k}")
    print(f"Redundancy from weights alone: {analysis.samples_per_matrix} elements per matrix per expert, "
          f"{human_bytes(analysis.bytes_read)} read; threshold {analysis.threshold}")
    for layer, measured in zip(found.layers, analysis.layers):
        router = ", ".join(layer.router) or "none found"
        kind = "stacked" if layer.stacked else "per-expert tensors"
        shared = f", shared: {len(layer.shared)} tensors" if layer.shared else ""
        print(f"\n{layer.prefix}: {layer.expert_count} experts ({kind}), router {router}{shared}")
        print(f"  signature matrices: {', '.join(measured.matrices)}")
        experts = [p.expert for p in measured.experts]
        print("  cosine " + "".join(f"{e:>6}" for e in experts) + "   score")
        for profile, row in zip(measured.experts, measured.similarity):
            print(f"  {profile.expert:>6} " + "".join(f"{v:6.2f}" for v in row) + f"   {profile.score:.3f}")
        if measured.clusters:
            print("  near-duplicate clusters: " + "  ".join("{" + ", ".join(map(str, c)) + "}"
                                                         for c in measured.clusters))
        for r in measured.recommendations:
            print(f"  -> {r.text}")
        if not measured.recommendations:
            print("  no expert is redundant at this threshold")


def _db(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return "inf" if value == math.inf else f"{value:.1f}"


def print_diff(result, top: int = 15) -> None:
    """The comparison as text: headline, counts, the ranking, per-role SNR by layer, layers."""
    s = result.summary
    mode = "exact (every element)" if result.exact else f"sampled ({result.samples} elements per tensor)"
    print(f"A: {result.a.name} ({result.a.format}, {len(result.a.tensors)} tensors)")
    print(f"B: {result.b.name} ({result.b.format}, {len(result.b.tensors)} tensors)")
    print(f"matched {s['matched']} pairs" + (f" through the {result.name_map} name map" if result.name_map else "")
          + f"; values {mode}; byte identity decided on bytes")
    print(f"bytes read: A {result.bytes_read['a']:,}, B {result.bytes_read['b']:,}")
    print(s["headline"])
    print("  " + ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in s["counts"].items()))
    differ = {r.name: r for r in result.rows}
    if s["ranked"] and top:
        print(f"\nmost changed (relative error ‖a−b‖/‖a‖), top {min(top, len(s['ranked']))}:")
        print(f"  {'tensor':48} {'rel err':>10} {'SNR dB':>7} {'cosine':>9} {'max|a-b|':>10}")
        for name in s["ranked"][:top]:
            d = differ[name].diff
            print(f"  {name[:48]:48} {d.rel_error:10.3e} {_db(d.snr_db):>7} {d.cosine:9.6f} {d.max_abs:10.3e}")
    if s["roles"]:
        print("\nSNR dB per role by layer:")
        for role, points in s["roles"].items():
            print(f"  {role[:48]:48} " + " ".join(_db(p["snr_db"]) for p in points))
    changed = [e for e in s["layers"] if e["changed"]]
    if changed:
        print("\nlayers changed most:")
        for e in changed[:top]:
            print(f"  layer {e['layer']:>4}: {e['changed']}/{e['tensors']} tensors changed, "
                  f"pooled rel err {e['rel_error']:.3e}, SNR {_db(e['snr_db'])} dB")
    others = [r for r in result.rows if r.category in ("only_in_a", "only_in_b", "shape_changed", "unreadable")]
    for r in others[:top]:
        print(f"  {r.category.replace('_', ' ')}: {r.name}" + (f" ({r.message})" if r.message else ""))
    if len(others) > top:
        print(f"  … and {len(others) - top} more (see --json)")
