"""Human-readable and JSON renderings of checkpoints, shared by the CLI and the web worker."""

from __future__ import annotations


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
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def human_count(n: int) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


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
    print(f"  parameters  {ckpt.parameter_count:,} ({by_dtype})")
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
    for g in safety.get("globals", []):
        mark = {"dangerous": "DANGEROUS", "unknown": "unknown", "allowed": "allowed"}.get(g["verdict"], g["verdict"])
        print(f"  {mark:<10} {g['name']}  ×{g.get('count', 1)}")
    if safety.get("dangerous"):
        print(f"  This file names {len(safety['dangerous'])} dangerous global(s): "
              f"{', '.join(safety['dangerous'])}. torch.load(weights_only=False) would run them.")


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
