"""What a torch checkpoint holds besides tensors, and what its pickle would have run.

`render` turns the unpickled object into bounded JSON for Checkpoint.metadata: tensors become
references by name, the main state_dict subtree a count, markers {"global", "args", ...}, and
every container, string and nesting level is cut at a limit so a hostile pickle cannot make the
metadata large. `safety_report` is the shape the CLI and the web UI render as extras["safety"].
"""

from __future__ import annotations

from ...jsonable import json_number
from ...unpickling.values import Marker, StandIn
from .globals import NumpyData, StorageRef, TensorRef
from ...unpickling.machine import Unpickled

METADATA_NODES = 2000      # JSON values in Checkpoint.metadata
METADATA_ITEMS = 64        # entries shown per container
METADATA_DEPTH = 24
METADATA_TEXT = 256        # characters shown per string
MAX_LISTED = 10            # unknown globals named in the warning


def segment(key) -> str:
    """A dict key as a path segment or JSON key, without repr() of arbitrary data."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool) or key is None or isinstance(key, float):
        return str(key)
    if isinstance(key, int):
        return str(key) if key.bit_length() < 64 else hex(key)  # str() refuses > 4300 digits
    if isinstance(key, (bytes, bytearray)):
        return bytes(key[:METADATA_TEXT]).decode("utf-8", "replace")
    return f"<{type(key).__name__}>"


def render(root, names: dict[int, str], main=None, main_count: int = 0, prefix: str = ""):
    """Bounded JSON of `root`; `main` (the prefix subtree) is summarised as a tensor count."""
    return _Renderer(names, main, main_count, prefix)(root)


class _Renderer:
    def __init__(self, names: dict[int, str], main, main_count: int, prefix: str):
        self.names, self.main, self.main_count, self.prefix = names, main, main_count, prefix
        self.budget = METADATA_NODES
        self.on_path: set[int] = set()

    def __call__(self, obj, depth: int = 0):
        self.budget -= 1
        if self.budget < 0 or depth > METADATA_DEPTH:
            return "…"
        if obj is None or isinstance(obj, (bool, str, float, int)):
            if isinstance(obj, str) and len(obj) > METADATA_TEXT:
                return obj[:METADATA_TEXT] + f"… ({len(obj)} characters)"
            if isinstance(obj, int) and not isinstance(obj, bool) and obj.bit_length() > 63:
                return hex(obj)
            return json_number(obj) if isinstance(obj, float) else obj
        if isinstance(obj, (bytes, bytearray)):
            return {"bytes": len(obj), "head": bytes(obj[:16]).hex()}
        if isinstance(obj, complex):
            return [json_number(obj.real), json_number(obj.imag)]
        if isinstance(obj, TensorRef):
            return {"tensor": self.names.get(id(obj)), "dtype": obj.dtype, "shape": list(obj.size)}
        if isinstance(obj, StorageRef):
            return {"storage": obj.key, "dtype": obj.dtype, "numel": obj.numel}
        if isinstance(obj, StandIn):
            return {"global": obj.name}
        if self.main is not None and obj is self.main:
            return {"tensors": self.main_count, "tree": self.prefix}
        if id(obj) in self.on_path:
            return "<cycle>"
        self.on_path.add(id(obj))
        try:
            return self._container(obj, depth + 1)
        finally:
            self.on_path.discard(id(obj))

    def _container(self, obj, depth):
        if isinstance(obj, dict):
            out = {segment(k)[:METADATA_TEXT]: self(v, depth)
                   for k, v in list(obj.items())[:METADATA_ITEMS]}
            if len(obj) > METADATA_ITEMS:
                out["…"] = f"{len(obj) - METADATA_ITEMS} more entries"
            return out
        if isinstance(obj, (list, tuple, set, frozenset)):
            items = list(obj)[:METADATA_ITEMS] if not isinstance(obj, (set, frozenset)) else \
                sorted(obj, key=lambda x: repr(type(x)))[:METADATA_ITEMS]
            out = [self(v, depth) for v in items]
            if len(obj) > METADATA_ITEMS:
                out.append(f"… {len(obj) - METADATA_ITEMS} more")
            return out
        if isinstance(obj, Marker):
            out = {"global": obj.name, "args": [self(a, depth) for a in obj.args[:METADATA_ITEMS]]}
        elif isinstance(obj, NumpyData):
            return self._numpy(obj, depth)
        else:
            return f"<{type(obj).__name__}>"
        for key in ("kwargs", "state", "items", "dictitems"):
            value = getattr(obj, key, None)
            if value:
                out[key] = self(value, depth)
        return out


    def _numpy(self, obj, depth):
        # ndarray state: (version, shape, dtype, is_fortran, raw bytes or list of objects)
        state = obj.state
        if obj.what == "ndarray" and type(state) is tuple and len(state) == 5:
            dtype = state[2]
            code = dtype.args[0] if isinstance(dtype, NumpyData) and dtype.args else None
            return {"numpy": "ndarray", "shape": self(state[1], depth),
                    "dtype": code if isinstance(code, str) else None,
                    "bytes": len(state[4]) if isinstance(state[4], (bytes, bytearray)) else None}
        if obj.what == "dtype" and obj.args and isinstance(obj.args[0], str):
            return {"numpy": "dtype", "code": obj.args[0][:METADATA_TEXT]}
        return {"numpy": obj.what, "args": [self(a, depth) for a in obj.args[:METADATA_ITEMS]]}


def safety_report(pickles: list[Unpickled]) -> dict:
    """{"globals": [{name, verdict, count}], "dangerous": [names], "opcodes": {name: count}}"""
    counts: dict[str, int] = {}
    verdicts: dict[str, str] = {}
    opcodes: dict[str, int] = {}
    for result in pickles:
        for name, standin in result.globals.items():
            verdicts[name] = standin.verdict
            counts[name] = counts.get(name, 0) + result.global_counts[name]
        for op, n in result.opcodes.items():
            opcodes[op] = opcodes.get(op, 0) + n
    return {"globals": [{"name": n, "verdict": verdicts[n], "count": counts[n]} for n in counts],
            "dangerous": [n for n in counts if verdicts[n] == "dangerous"],
            "opcodes": dict(sorted(opcodes.items()))}




def safety_warnings(safety: dict) -> list[str]:
    warnings = []
    if safety["dangerous"]:
        warnings.append("the pickle names dangerous globals: " + ", ".join(safety["dangerous"])
                        + " (torch.load(weights_only=False) would run them; tensorloupe never does)")
    unknown = [g["name"] for g in safety["globals"] if g["verdict"] == "unknown"]
    if unknown:
        more = " …" if len(unknown) > MAX_LISTED else ""
        warnings.append(f"the pickle names {len(unknown)} globals tensorloupe does not know, shown "
                        "as inert markers: " + ", ".join(unknown[:MAX_LISTED]) + more)
    return warnings
