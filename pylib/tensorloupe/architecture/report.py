"""The architecture and memory block, as JSON and as text: shared by `tensorloupe inspect` and the
page's Summary, so both show the same numbers with the same sources and formulas."""

from __future__ import annotations

from .. import architecture
from . import memory
from .components import LABELS
from ..display import counted
from ..model import Checkpoint


def describe(ckpt: Checkpoint, config: dict | None = None, config_where: str = "config.json",
             context: int | None = None, cache_type: str = "f16", found_moe=None, progress=None) -> dict:
    """{"architecture": ..., "memory": ...} (schema in README.md, "JSON output"); `found_moe` is
    moe.detect(ckpt, config) if the caller has it; `progress`: architecture.summarize's."""
    arch = architecture.summarize(ckpt, config, config_where, found_moe, progress)
    return {"architecture": arch.to_json(), "memory": memory.estimate(arch, context, cache_type)}


def _value(key: str, value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if key == "sliding_layers" and isinstance(value, list):
        return f"{counted(len(value), 'layer')}: {_ranges(value)}"
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return f"per layer {min(value):,}-{max(value):,}"
    if value is None:
        return "none"
    return str(value)


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 4] -> "0-2, 4"."""
    out, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            out.append(f"{start:,}" if start == n else f"{start:,}-{n:,}")
            start = None
    return ", ".join(out)


def print_block(doc: dict) -> None:
    arch, mem = doc["architecture"], doc["memory"]
    print("Architecture" + (f" (configs read: {'; '.join(arch['sources'])})" if arch["sources"] else
                            " (no config found: values from the file itself)"))
    if not arch["fields"]:
        print("  nothing known: no config, no GGUF keys, and no recognisable tensor names")
    for f in arch["fields"]:
        print(f"  {f['label']:<26} {_value(f['key'], f['value']):<24} {f['source']}")
    params = arch["parameters"]
    line = f"\nParameters  {params['total']:,}"
    if params["active"] is not None and params["active"] != params["total"]:
        line += f", active per token {params['active']:,} ({params['active_formula']})"
    elif params["active"] is None:
        line += f"; active per token unknown: {params['active_formula']}"
    print(line)
    total = params["total"] or 1
    for key, c in params["by_component"].items():
        print(f"  {LABELS[key]:<18} {c['parameters']:>16,}  {c['parameters'] / total * 100:5.1f}%"
              f"  {c['tensors']:>5} tensors")
    if params["buffers"]["tensors"]:
        b = params["buffers"]
        told = f"; told apart by {' and '.join(b['evidence'])}" if b.get("evidence") else ""
        print(f"  (buffers, not parameters: {b['parameters']:,} in {counted(b['tensors'], 'tensor')}, "
              f"e.g. {b['example']}{told})")
    if params["training_state"]:
        print("Training state (stored in the file, not counted as parameters)")
        for key, c in params["training_state"].items():
            print(f"  {key:<18} {c['parameters']:>16,}  {c['tensors']:>5} tensors  e.g. {c['example']}")
    print_memory(mem)


def print_memory(mem: dict) -> None:
    print("\nMemory")
    for w in mem["weights"]:
        print(f"  weights {w['precision']:<8} {memory.human(w['bytes']):>12}   {w['formula']}")
    kv = mem["kv_cache"]
    if kv.get("none"):
        print(f"  KV cache: none ({kv['reason']})")
    elif not kv["available"]:
        print(f"  KV cache: cannot be estimated: {kv['reason']}")
    else:
        print(f"  KV cache ({kv['kind']})")
        for p in kv["per_token"]:
            print(f"    per token {p['cache_type']:<5} {p['bytes']:>10,} B   {p['formula']}")
        types = [p["cache_type"] for p in kv["per_token"]]
        print("    context      " + "".join(f"{t:>14}" for t in types))
        for n in kv["contexts"]:
            cells = {a["cache_type"]: a["bytes"] for a in kv["at"] if a["context"] == n}
            mark = " (model max)" if n == kv["max_context"] else ""
            print(f"    {n:>9,}    " + "".join(f"{memory.human(cells[t]):>14}" for t in types) + mark)
    fits = mem["fits"]
    kv_text = (f"{fits['cache_type']} KV cache at {fits['context']:,} tokens "
               f"({memory.human(fits['kv_bytes'])})" if fits["kv_included"]
               else f"no KV cache ({fits.get('no_kv', 'unknown')})")
    print(f"  Fits? weights + {kv_text}")
    precisions = [c["precision"] for c in fits["rows"][0]["cells"]]
    print("    memory  " + "".join(f"{p:>12}" for p in precisions))
    for row in fits["rows"]:
        print(f"    {row['memory_gb']:>3} GB  " + "".join(f"{'yes' if c['fits'] else 'no':>12}"
                                                      for c in row["cells"]))
    print(f"  ({mem['note']})")
