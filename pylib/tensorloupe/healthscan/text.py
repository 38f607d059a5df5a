"""`tensorloupe health` as text: what it will read, the flags table, and a compact layer profile
(one row per layer, one column per role; `!` marks a flagged point)."""

from __future__ import annotations

import math
import os
from statistics import median

from ..display import counted, escaped, human_bytes
from . import Cost, Report

PROFILE_STATISTICS = (("rms", "rms"), ("max_abs", "max|w|"))


def cost_line(cost: Cost, name: str) -> str:
    per = f"every byte ({cost.elements:,} values decoded)" if cost.budget is None else \
        f"at most {human_bytes(cost.budget)} of each"
    about = "" if cost.exact else "about "
    skipped = f" ({cost.skipped:,} without weight values skipped)" if cost.skipped else ""
    return (f"{escaped(name)}: reading {about}{human_bytes(cost.scan_bytes)}, {per} of "
            f"{counted(cost.tensors, 'tensor')}{skipped}; copies and constant tensors are then confirmed on their bytes")


def render(report: Report) -> str:
    counts = report.counts()
    said = ", ".join(counted(counts[s], word) for s, word in (("error", "error"), ("warning", "warning"),
                                                              ("info", "note")))
    # Bytes the header reads already brought in (a small file's tensors share its first blocks)
    # are served from memory, so a scan can read less than the cost stated before it.
    cached = " (the rest was in memory from opening the file)" if report.bytes_read < report.cost.scan_bytes else ""
    lines = [f"{escaped(report.file)}: {counted(len(report.measures), 'tensor')}, {human_bytes(report.bytes_read)} read"
             f"{cached}; {said}", ""]
    if report.flags:
        rows = [(f.severity, f.kind, escaped(f.tensor), _evidence(f), "exact" if f.exact else "sampled")
                for f in report.flags]
        lines += _table(("severity", "flag", "tensor", "evidence", "read"), rows)
        lines.append("")
        lines += [f"{escaped(f.tensor)}: {escaped(f.message)}" for f in report.flags]
    else:
        lines.append("no flags")
    profile = report.profile()
    for key, label in PROFILE_STATISTICS:
        if profile:
            lines += ["", f"layer profile: {label} by layer (! flagged; experts: their median)"]
            lines += _profile_table(profile, key)
    return "\n".join(lines)


def _evidence(flag) -> str:
    e = flag.evidence
    value, siblings = e.get("value"), e.get("siblings_median")
    if e.get("shared_storage"):
        return "the same bytes in the file"
    if e.get("statistic", "").endswith("sha256"):
        return f"sha256 {str(value)[:12]}…"
    text = f"{e.get('statistic')} {_num(value)}"
    return text + (f" vs siblings' median {_num(siblings)}" if siblings is not None else "")


def _num(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _table(header, rows) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip()] + [fmt.format(*map(str, r)).rstrip() for r in rows]


def _profile_table(profile: list[dict], key: str) -> list[str]:
    """Layers down and roles across, or roles down when there are more roles than layers (the
    longer side goes down so that the table stays narrow)."""
    names = _short_names([p["role"] for p in profile])
    layers = sorted({pt["layer"] for p in profile for pt in p["points"]})
    cells = {(i, layer): _cell([pt for pt in p["points"] if pt["layer"] == layer], key)
             for i, p in enumerate(profile) for layer in layers}
    if len(profile) > len(layers):
        rows = [[name] + [cells[i, layer] for layer in layers] for i, name in enumerate(names)]
        return _table(["role \\ layer", *map(str, layers)], rows)
    rows = [[str(layer)] + [cells[i, layer] for i in range(len(profile))] for layer in layers]
    return _table(["layer", *names], rows)


def _cell(points: list[dict], key: str) -> str:
    values = [pt[key] for pt in points if isinstance(pt[key], float) and math.isfinite(pt[key])]
    mark = "!" if any(pt["flags"] for pt in points) else ""
    return f"{median(values):.3g}{mark}" if values else ("-" + mark if points else "")


def _short_names(roles: list[str]) -> list[str]:
    """Column names: the module name (`q_proj`) where that is unambiguous, else the role without
    its shared prefix (`self_attn.q_proj.bias`)."""
    prefix = os.path.commonprefix(roles)
    prefix = prefix[:prefix.rfind("*.") + 2] if "*." in prefix else ""
    longer = [role[len(prefix):] for role in roles]
    longer = [r[:-len(".weight")] if r.endswith(".weight") else r for r in longer]
    shortest = [r.rsplit(".", 1)[-1] for r in longer]
    return shortest if len(set(shortest)) == len(shortest) else longer
