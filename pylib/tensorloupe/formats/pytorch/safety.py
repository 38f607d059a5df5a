"""What a torch checkpoint holds besides tensors, and what its pickle would have run.

`render` turns the unpickled object into bounded JSON for Checkpoint.metadata: tensors become
references by name, the main state_dict subtree a count, markers {"global", "args", ...}, and
every container, string and nesting level is cut at a limit so a hostile pickle cannot make the
metadata large. `safety_report` is the shape the CLI and the web UI render as extras["safety"].
"""

from __future__ import annotations

from ...jsonable import NOT_MINE, PICKLED, Limits, bounded, key_text
from ...unpickling.objects import Marker, SafeKey, StandIn
from . import torchscript
from .allowlist import NumpyData, StorageRef, TensorRef
from ...unpickling.machine import Unpickled

MAX_LISTED = 10            # globals named in a warning
# What a call carried (os.system's command): enough to read it, never the whole pickle.
CALL_ARGS = Limits(depth=6, items=8, text=300, nodes=60)
MAX_SHOWN_CALLS = 20


def segment(key) -> str:
    """A dict key as a path segment, without repr() of arbitrary data."""
    return key_text(key.value if type(key) is SafeKey else key)


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
        return _unwrapped(obj, child)

    return bounded(root, PICKLED, torch_values)


def _unwrapped(obj, child):
    """Containers holding SafeKeys (keys whose hash a pickle could choose) shown with the keys'
    values; everything else is left to the generic renderer."""
    if type(obj) is SafeKey:
        return child(obj.value)
    if type(obj) is dict:
        head = [k for _, k in zip(range(PICKLED.items), obj)]
        if any(type(k) is SafeKey for k in head):
            # one entry fewer than the renderer shows, so that the count of the rest is ours
            keep = PICKLED.items - 1 if len(obj) > PICKLED.items else PICKLED.items
            shown = {segment(k): obj[k] for k in head[:keep]}
            if len(obj) > keep:
                shown["…"] = f"{len(obj) - keep:,} more entries"
            return child(shown)
    return NOT_MINE


def _call_args(args, kwargs):
    def torch_values(obj, child):
        if isinstance(obj, (StandIn, Marker)):
            return {"global": obj.name} if isinstance(obj, StandIn) else \
                {"global": obj.name, "args": child(list(obj.args))}
        if isinstance(obj, (TensorRef, StorageRef)):
            return f"<{type(obj).__name__}>"
        return _unwrapped(obj, child)
    out = {"args": bounded(list(args), CALL_ARGS, torch_values)}
    if kwargs:
        out["kwargs"] = bounded(kwargs, CALL_ARGS, torch_values)
    return out


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


def safety_report(pickles: list[Unpickled], notes: list[str] = ()) -> dict:
    """What the pickles would run under torch.load(weights_only=False), as the CLI and the page
    show it: {"globals": [{name, verdict, reason, count}], "dangerous": [names],
    "calls": [{global, args[, kwargs]}] (what calls of not allow-listed globals carried),
    "notes": [the file's deceptive layout, if any], "opcodes": {name: count}}"""
    counts: dict[str, int] = {}
    judged: dict[str, tuple[str, str]] = {}
    opcodes: dict[str, int] = {}
    calls = []
    for result in pickles:
        for name, standin in result.globals.items():
            judged.setdefault(name, (standin.verdict, standin.reason))
            counts[name] = counts.get(name, 0) + result.global_counts[name]
        for name, reason in (result.built or {}).items():
            judged[name] = ("dangerous", reason)
        for op, n in result.opcodes.items():
            opcodes[op] = opcodes.get(op, 0) + n
        for name, args, kwargs in result.calls or ():
            # calls of dangerous globals, and of what calls returned (never of allowed or inert)
            if len(calls) < MAX_SHOWN_CALLS and judged.get(name, ("dangerous",))[0] == "dangerous":
                calls.append({"global": name, **_call_args(args, kwargs)})
    return {"globals": [{"name": n, "verdict": judged[n][0], "reason": judged[n][1],
                         "count": counts[n]} for n in counts],
            "dangerous": [n for n in counts if judged[n][0] == "dangerous"],
            "calls": calls, "notes": list(notes),
            "opcodes": dict(sorted(opcodes.items()))}


def safety_warnings(safety: dict) -> list[str]:
    warnings = []
    dangerous = safety["dangerous"]
    if safety.get("torchscript"):   # its classes are said once, by the TorchScript headline
        dangerous = [n for n in dangerous if not torchscript.folded(n)]
    if dangerous:
        more = " …" if len(dangerous) > MAX_LISTED else ""
        warnings.append(f"the pickle names {len(dangerous):,} dangerous globals (they run or may run "
                        "code): " + ", ".join(dangerous[:MAX_LISTED]) + more
                        + " (torch.load(weights_only=False) would run them; tensorloupe never does)")
    warnings += [f"SAFETY: {note}" for note in safety.get("notes", ())]
    return warnings


def with_danger(error, pickles: list[Unpickled]):
    """`error`, saying which dangerous globals the pickles read before it name: torch.load reads
    those pickles first too, so by the time it fails the same way it has run them."""
    dangerous = [name for result in pickles for name, standin in result.globals.items()
                 if standin.verdict == "dangerous"]
    if dangerous and not error.dangerous:
        error.message += ("; the pickles torch.load(weights_only=False) reads up to here name "
                          f"dangerous globals it would already have run: {', '.join(dangerous)}")
        error.dangerous = tuple(dangerous)
    return error
