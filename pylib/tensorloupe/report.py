"""Human-readable and JSON renderings of checkpoints, shared by the CLI and the web worker."""

from __future__ import annotations

import json
import math


from .model import Checkpoint, Tensor
from .jsonable import FULL, Limits, bounded, json_number

BAR = "█▉▊▋▌▍▎▏"


# How formats/pytorch/safety.py renders a tensor, and the main state_dict subtree, in metadata.
TENSOR_REF_KEYS = ({"tensor", "dtype", "shape"}, {"tensors", "tree"})
_GONE = object()


def shown_metadata(ckpt: Checkpoint, limits: Limits = FULL) -> dict:
    """The metadata a person reads: for a torch checkpoint, its non-tensor entries only (the
    tensors are in the table). JSON output keeps the whole rendered object."""
    shown = bounded(ckpt.metadata, limits)
    if ckpt.format.startswith("pytorch"):
        shown = _without_tensors(shown)
        shown = {} if shown is _GONE else shown
    return shown


def _without_tensors(value):
    """`value` minus tensor references, and minus containers that held nothing but them."""
    if isinstance(value, dict):
        if set(value) in TENSOR_REF_KEYS:
            return _GONE
        kept = {k: v for k, v in ((k, _without_tensors(v)) for k, v in value.items()) if v is not _GONE}
        return _GONE if value and not kept else kept
    if isinstance(value, list):
        kept = [v for v in map(_without_tensors, value) if v is not _GONE]
        return _GONE if value and not kept else kept
    return value


def checkpoint_json(ckpt: Checkpoint, limits: Limits = FULL, tensors: bool = True) -> dict:
    """The one JSON shape of a checkpoint: `inspect --json` prints it, the page's model payload
    is built on it (web/handlers.py, which sends the tensors in a table of its own: `tensors`
    False leaves the records out). Never reads: an offset not known yet is null (see
    Checkpoint.locate_all). `limits` bound metadata and extras (the page previews them)."""
    by_dtype = ckpt.parameters_by_dtype()   # their sum is parameter_count: one walk, not two
    out = {"file": ckpt.name, "files": ckpt.files, "format": ckpt.format, "size": ckpt.size,
           "tensor_count": len(ckpt.tensors), "parameters": sum(by_dtype.values()),
           "parameters_by_dtype": by_dtype, "metadata": bounded(ckpt.metadata, limits),
           "warnings": [str(w) for w in ckpt.warnings], "extras": bounded(ckpt.extras, limits)}
    if tensors:
        out["tensors"] = [t.to_json() for t in ckpt.tensors]
    return out


TABLE_COLUMNS = ("name", "dtype", "shape", "numel", "nbytes", "offset", "file")


def tensor_table(ckpt: Checkpoint, fmt: str) -> str:
    """The tensor table as CSV (shape as 4x3x2) or JSON (inspect --json's tensor records)."""
    import csv
    import io
    import json
    ckpt.locate_all()
    records = [t.to_json() for t in ckpt.tensors]
    if fmt == "json":
        return json.dumps(records, indent=1, allow_nan=False)
    if fmt != "csv":
        raise ValueError(f"unknown table format {fmt!r}")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TABLE_COLUMNS)
    for r in records:
        writer.writerow([("x".join(map(str, r["shape"])) if key == "shape" else r.get(key))
                         for key in TABLE_COLUMNS])
    return out.getvalue()


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
    files = ckpt.files
    print(ckpt.name + (f"  ({len(files)} files)" if len(files) > 1 else ""))
    print(f"  format      {ckpt.format}")
    print(f"  size        {human_bytes(ckpt.size)} ({ckpt.size:,} bytes)"
          + (f" in {len(files)} files" if len(files) > 1 else ""))
    print(f"  tensors     {len(ckpt.tensors)}")
    print(f"  parameters  {exact_count(ckpt.parameter_count)} ({by_dtype})")
    card = ckpt.extras.get("model_card")
    if card:
        print("\nModel card")
        for label, value in card.items():
            print(f"  {label:<22} {short(value)}")
    metadata = shown_metadata(ckpt)
    if metadata:
        print("\nMetadata")
        for key, value in metadata.items():
            print(f"  {key}: {short(value)}")
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
    if len(files) > 1:   # offsets are within each tensor's own file: say which
        rows = [r + (t.file or "?",) for r, t in zip(rows, ckpt.tensors)]
        header += ("file",)
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
    # Sampled figures say so on every line: a sample's min/max are not the tensor's extremes.
    if entry["exact"]:
        how, label, of = f"all {entry['numel']:,} elements, exact", "exact  ", f"all {entry['numel']:,} elements"
    else:
        how = f"{entry['samples']:,} of {entry['numel']:,} elements sampled: estimates"
        label, of = "sampled", f"{entry['samples']:,} sampled values (not every element)"
    print(f"{entry['name']}  {entry['dtype']}  {shape}  ({how})")
    print(f"  {label}  min {_fmt(s['min'])}  max {_fmt(s['max'])}  mean {_fmt(s['mean'])}"
          f"  std {_fmt(s['std'])}  near-zero {s['zeros'] * 100:.2f}%  nan {s['nan']}"
          f"  +inf {s['posinf']}  -inf {s['neginf']}")
    if s.get("percentiles"):
        print(f"  {label}  " + "  ".join(f"{k} {_fmt(v)}" for k, v in s["percentiles"].items()))
    hist = entry["histogram"]
    print(f"  histogram of {of}")
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
    mode = ("exact (every element)" if result.exact else
            f"sampled (up to {result.samples} elements per tensor; smaller tensors whole)")
    print(f"A: {result.a.name} ({result.a.format}, {len(result.a.tensors)} tensors)")
    print(f"B: {result.b.name} ({result.b.format}, {len(result.b.tensors)} tensors)")
    print(f"matched {s['matched']} pairs" + (f" through the {result.name_map} name map" if result.name_map else "")
          + f"; values {mode}; byte identity decided on bytes")
    # what the comparison read beyond the headers (their cached blocks serve small files whole)
    print(f"bytes read for the comparison: A {result.bytes_read['a']:,}, B {result.bytes_read['b']:,}")
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
