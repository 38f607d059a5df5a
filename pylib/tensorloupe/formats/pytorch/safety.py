"""What a torch checkpoint holds besides tensors, and what its pickle would have run.

`render` turns the unpickled object into bounded JSON for Checkpoint.metadata: tensors become
references by name, the main state_dict subtree a count, markers {"global", "args", ...}, and
every container, string and nesting level is cut at a limit so a hostile pickle cannot make the
metadata large. `safety_report` is the shape the CLI and the web UI render as extras["safety"].
"""

from __future__ import annotations

from ...jsonable import NOT_MINE, PICKLED, bounded, key_text
from ...unpickling.values import Marker, StandIn
from .globals import NumpyData, StorageRef, TensorRef
from ...unpickling.machine import Unpickled

MAX_LISTED = 10            # unknown globals named in the warning


def segment(key) -> str:
    """A dict key as a path segment, without repr() of arbitrary data."""
    return key_text(key)


def render(root, names: dict[int, str], main=None, main_count: int = 0, prefix: str = ""):
    """Bounded JSON of `root`; `main` (the prefix subtree) is summarised as a tensor count."""

    def torch_values(obj, child):
        if isinstance(obj, TensorRef):
            return {"tensor": names.get(id(obj)), "dtype": obj.dtype, "shape": child(list(obj.size))}
        if isinstance(obj, StorageRef):
            return {"storage": obj.key, "dtype": obj.dtype, "numel": child(obj.numel)}
        if isinstance(obj, StandIn):
            return {"global": obj.name}
        if main is not None and obj is main:
            return {"tensors": main_count, "tree": prefix}
        if isinstance(obj, Marker):
            out = {"global": obj.name, "args": child(list(obj.args))}
            for key in ("kwargs", "state", "items", "dictitems"):
                value = getattr(obj, key, None)
                if value:
                    out[key] = child(value)
            return out
        if isinstance(obj, NumpyData):
            return _numpy(obj, child)
        return NOT_MINE

    return bounded(root, PICKLED, torch_values)


def _numpy(obj: NumpyData, child):
    # ndarray state: (version, shape, dtype, is_fortran, raw bytes or list of objects)
    state = obj.state
    if obj.what == "ndarray" and type(state) is tuple and len(state) == 5:
        dtype = state[2]
        code = dtype.args[0] if isinstance(dtype, NumpyData) and dtype.args else None
        return {"numpy": "ndarray", "shape": child(state[1]),
                "dtype": child(code) if isinstance(code, str) else None,
                "bytes": len(state[4]) if isinstance(state[4], (bytes, bytearray)) else None}
    if obj.what == "dtype" and obj.args and isinstance(obj.args[0], str):
        return {"numpy": "dtype", "code": child(obj.args[0])}
    return {"numpy": obj.what, "args": child(list(obj.args))}


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
