"""Values made safe for JSON, and safe to show: the one renderer every output goes through.

JSON has no NaN or Infinity (`json_number`). And what a checkpoint carries is data an attacker may
have written: a pickle can nest a million lists, hold an integer of 100,000 digits (`str()` refuses
more than 4,300), share one list a billion times, or loop back on itself. `bounded` turns any such
value into JSON-able data within stated limits, without calling `str()` or `repr()` on anything it
does not know, so the CLI's `--json`, the page's Summary and error messages cannot be made to hang,
recurse without end or grow without bound.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, NamedTuple


def json_number(value):
    """JSON has no NaN or Infinity: they travel as the strings "nan", "inf", "-inf"."""
    if isinstance(value, complex):
        return [json_number(value.real), json_number(value.imag)]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


class Limits(NamedTuple):
    depth: int                 # nesting levels rendered; deeper values become "…"
    items: int | None          # entries rendered per container (None: all)
    text: int | None           # characters rendered per string (None: all)
    nodes: int | None          # values rendered in all (None: no budget)


# `inspect --json`: everything, but still no unbounded recursion.
FULL = Limits(depth=32, items=None, text=None, nodes=None)
# The page's Summary: metadata can hold whole tokenizers (150k strings).
PREVIEW = Limits(depth=16, items=48, text=4000, nodes=20_000)
# Values that came out of a pickle (torch metadata, error messages): small on every axis.
PICKLED = Limits(depth=24, items=64, text=256, nodes=2000)
# One value quoted inside a one-line message.
MESSAGE = Limits(depth=4, items=8, text=80, nodes=40)

CUT = "…"
# A hook for types a caller knows (torch references, markers): it returns the rendering, or
# NOT_MINE, and renders children through the function it is given (so limits still apply).
NOT_MINE = object()
Custom = Callable[[Any, Callable[[Any], Any]], Any]


def bounded(value, limits: Limits = FULL, custom: Custom | None = None):
    return _Renderer(limits, custom).render(value, 0)


def quoted(value) -> str:
    """A short, safe text for a value in an error message (never str() of raw data)."""
    return json.dumps(bounded(value, MESSAGE), ensure_ascii=False)


def key_text(key) -> str:
    """A dict key as a JSON key, without str() or repr() of arbitrary data."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool) or key is None or isinstance(key, float):
        return str(key)
    if isinstance(key, int):
        return str(key) if key.bit_length() < 64 else hex(key)  # str() refuses > 4300 digits
    if isinstance(key, (bytes, bytearray)):
        return bytes(key[:256]).decode("utf-8", "replace")
    return f"<{type(key).__name__}>"


class _Renderer:
    def __init__(self, limits: Limits, custom: Custom | None):
        self.limits, self.custom = limits, custom
        self.budget = limits.nodes
        self.on_path: set[int] = set()

    def render(self, obj, depth: int):
        if self.budget is not None:
            self.budget -= 1
            if self.budget < 0:
                return CUT
        if depth >= self.limits.depth:
            return CUT
        if obj is None or isinstance(obj, (bool, str, int, float, complex)):
            return self._scalar(obj)
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return {"bytes": len(obj), "head": bytes(obj[:16]).hex()}
        if self.custom is not None:
            out = self.custom(obj, lambda child: self.render(child, depth + 1))
            if out is not NOT_MINE:
                return out
        if id(obj) in self.on_path:
            return "<cycle>"
        self.on_path.add(id(obj))
        try:
            return self._container(obj, depth + 1)
        finally:
            self.on_path.discard(id(obj))

    def _scalar(self, obj):
        if isinstance(obj, str):
            cap = self.limits.text
            if cap is not None and len(obj) > cap:
                return f"{obj[:cap]}{CUT} ({len(obj):,} characters)"
            return obj
        if isinstance(obj, int) and not isinstance(obj, bool) and obj.bit_length() > 64:
            return hex(obj)  # exact, and str() would refuse more than 4,300 digits
        return json_number(obj)

    def _container(self, obj, depth: int):
        cap = self.limits.items
        if isinstance(obj, dict):
            entries = obj.items() if cap is None else _head(obj.items(), cap)
            out = {key_text(k): self.render(v, depth) for k, v in entries}
            if cap is not None and len(obj) > cap:
                out[CUT] = f"{len(obj) - cap:,} more entries"
            return out
        if isinstance(obj, (list, tuple, set, frozenset)):
            items = obj
            if isinstance(obj, (set, frozenset)):  # a stable order, without comparing the items
                items = sorted(obj, key=lambda x: type(x).__name__)
            head = items if cap is None else _head(items, cap)
            out = [self.render(v, depth) for v in head]
            if cap is not None and len(obj) > cap:
                out.append(f"{CUT} {len(obj) - cap:,} more ({len(obj):,} items)")
            return out
        to_json = getattr(type(obj), "to_json", None)
        if to_json is not None:
            return self.render(to_json(obj), depth)
        return f"<{type(obj).__name__}>"


def _head(items, n: int) -> list:
    out = []
    for item in items:
        if len(out) == n:
            break
        out.append(item)
    return out
