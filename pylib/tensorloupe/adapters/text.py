"""The adapter's Summary lines for `inspect` (the page's card says the same, web/summary.js)."""

from __future__ import annotations

from ..display import counted, escaped, exact_count, short


def _number(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def lines(adapter: dict) -> list[str]:
    """`ckpt.extras["adapter"]` as label/value lines."""
    out = [("adapter", f"{adapter['kind']} (from {adapter['source']})")]
    if adapter.get("problem"):
        return out + [("ΔW", adapter["problem"])]
    if adapter.get("base_model"):
        out.append(("base model", short(adapter["base_model"])))
    ranks, alphas, scales = adapter["ranks"], adapter["alphas"], adapter["scales"]
    out.append(("rank", ", ".join(map(_number, ranks)) or "?"))
    out.append(("alpha", ", ".join(map(_number, alphas)) or "?"))
    out.append(("scale", (", ".join(f"{s:.6g}" for s in scales) or "?")
                + (" (alpha/√r: rsLoRA)" if adapter.get("rslora") else " (alpha/r)")))
    targets = adapter.get("targets")
    if targets:
        out.append(("targets", targets if isinstance(targets, str) else ", ".join(targets)))
    for key, label in (("rank_pattern", "rank pattern"), ("alpha_pattern", "alpha pattern")):
        if adapter.get(key):
            out.append((label, ", ".join(f"{k}: {_number(v)}" for k, v in adapter[key].items())))
    if adapter.get("modules_to_save"):
        out.append(("modules saved", ", ".join(adapter["modules_to_save"])))
    if adapter.get("dora"):
        out.append(("DoRA", "yes: ΔW shown is the LoRA part only; the merged weight is also "
                            "rescaled per output row by the magnitude vector"))
    out.append(("parameters", f"{exact_count(adapter['parameters'])} stored in the adapter; "
                              f"{counted(adapter['delta'], 'weight')} shown as ΔW "
                              f"({exact_count(adapter['delta_values'])} values)"))
    if adapter.get("biases"):
        out.append(("lora_bias", f"{counted(adapter['biases'], 'bias', 'biases')} shown as "
                                 "Δb = scale · lora_B.bias"))
    return out   # kohya's ss_* training facts are the file's metadata, printed below it


def print_adapter(adapter: dict) -> None:
    print("\nAdapter")
    for label, value in lines(adapter):
        print(f"  {label:<14} {escaped(str(value))}")


def print_applied(applied: dict) -> None:
    """What `diff --adapter` added to A (adapters/merge.py)."""
    print(f"A = the base + ΔW of {escaped(applied['adapter'])}: {counted(len(applied['applied']), 'weight')} "
          f"changed, {counted(len(applied['replaced']), 'weight')} replaced (modules_to_save)")
    for problem in applied["problems"]:
        print(f"  ! not applied: {escaped(problem)}")
    print()
