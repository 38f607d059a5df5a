"""What the three torch containers share: one unpickling path, the walk that names tensors, the
tensor descriptors, and the Checkpoint (with safety.py's metadata and safety report).

A reader (zipped, torch_legacy, torch_tar) reads its pickle bytes, calls `load_pickle` with
them, decides where each storage's bytes are, and hands everything to `checkpoint`. Tensor names
are the dotted path through dicts, lists, tuples and module pickles
(`state_dict.model.layers.0.weight`); a module's `_parameters`, `_buffers` and `_modules` add no
segment, so a pickled nn.Module names its tensors as its state_dict() would.
"""

from __future__ import annotations

import math
from typing import Callable

from ...errors import FormatError, LimitError, TensorloupeError
from ...model import Checkpoint, Tensor, contiguous_strides
from ...source import ByteSource
from . import allowlist, moduleslots, subclasses, trainstate, weightsonly, zerostate
from ...unpickling.objects import LIMITS, Limits, Marker, StandIn, shown
from . import packed
from .allowlist import TORCH_DTYPES, StorageRef, TensorRef, dtype_of
from .safety import render, safety_report, safety_warnings, segment
from ...unpickling.machine import Unpickled, unpickle

MAX_DEPTH = LIMITS.max_depth  # nesting of the checkpoint's containers (the unpickler refuses deeper)
# Tensor names (memo sharing multiplies them), counted before any is built. Each name becomes a
# descriptor (~600 bytes) and a row of every report (~1.5 KB and 40 us through `inspect`, measured
# on 100,000 names of one tensor): 65,536 is well above the largest real single-file checkpoints
# (a few ten thousand tensors) and keeps a memo-sharing bomb under ~100 MB and a few seconds.
MAX_NAMES = 1 << 16
# (path, tensor) pairs kept while naming, over every container (~130 bytes each): names times
# their nesting (a pickled nn.Module nests each tensor ~5-10 deep)
MAX_PAIRS = 1 << 19
MAX_DIMS = 64
INT64 = 1 << 63            # torch's sizes, strides, offsets and element counts are int64
MAX_PROBLEM_WARNINGS = 20

MODULE_SLOTS = ("_parameters", "_buffers", "_modules")
# Top-level keys whose subtree is "the model" in training checkpoints, and wrappers inside it.
CHECKPOINT_KEYS = ("state_dict", "model_state_dict", "model", "module", "net", "network",
                   "model_ema", "ema", "params", "weights")
WRAPPER_KEYS = ("model", "module", "state_dict", "model_state_dict", "net", "network", "_orig_mod")

# storage -> (the source holding its bytes or None for the file itself, base offset in that
# source, bytes available, problem)
Locate = Callable[[StorageRef], "tuple[ByteSource | None, int, int, str | None]"]


def storage_loader(legacy: bool = False):
    """persistent_load for torch's ('storage', storage_class, key, location, numel[, view]) ids."""
    storages: dict[str, StorageRef] = {}

    def load(pid):
        if legacy and isinstance(pid, tuple) and len(pid) == 4 and pid[0] in ("module", b"module"):
            return pid[1]  # a pre-1.6 module pickle names its class (and its source) this way
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] in ("storage", b"storage")):
            raise FormatError("a persistent id is not a torch storage reference",
                              expected="('storage', class, key, location, numel)",
                              found=f"a {type(pid).__name__}" if not isinstance(pid, tuple)
                              else f"a tuple of {len(pid):,}")
        storage_class, key, location, numel = pid[1:5]
        if type(numel) is not int or not 0 <= numel < INT64 or not isinstance(key, (str, int)):
            raise FormatError("a storage reference has an invalid key or element count",
                              found=f"key {type(key).__name__}, numel {type(numel).__name__}")
        key = segment(key)
        if len(pid) == 6 and pid[5] is not None:
            key += " (view)"  # pre-1.0 storage views: never located, their tensors get a problem
        ref = storages.get(key)
        if ref is None:
            kind = storage_class.name if isinstance(storage_class, StandIn) else "?"
            ref = storages[key] = StorageRef(key, dtype_of(storage_class), numel,
                                             segment(location)[:40], kind)
        return ref

    load.storages = storages
    return load


def load_pickle(data: bytes, persistent_load, *, start: int = 0, limits: Limits = LIMITS) -> Unpickled:
    return unpickle(data, allowlist.resolve, persistent_load, start=start, limits=limits)


# --- naming -------------------------------------------------------------------------------------

def _children(obj):
    """(segment or None for 'no segment', child) pairs of a container, None for a leaf."""
    kind = type(obj)
    if kind is dict:
        return [(segment(k), v) for k, v in obj.items()]
    if kind is list or kind is tuple:
        return [(str(i), v) for i, v in enumerate(obj)]
    if kind is Marker:
        out = [(str(i), v) for i, v in enumerate(obj.args)]
        out += [(segment(k), v) for k, v in (obj.kwargs or {}).items()]
        state = obj.state
        if type(state) is dict:
            out += [(None if k in MODULE_SLOTS else segment(k), v) for k, v in state.items()]
        elif state is not None:
            out.append((None, state))
        out += [(str(i), v) for i, v in enumerate(obj.items or ())]
        out += [(segment(k), v) for k, v in (obj.dictitems or ())]
        return out
    return None


def _child_values(obj):
    """The children of a container without their segments (counting needs no names: building
    a name per child of a list of 1M memo references costs ~110 MB before any limit)."""
    kind = type(obj)
    if kind is dict:
        return obj.values()
    if kind is list or kind is tuple:
        return obj
    if kind is Marker:
        state = obj.state
        return [*obj.args, *(obj.kwargs or {}).values(),
                *(state.values() if type(state) is dict else () if state is None else (state,)),
                *(obj.items or ()), *(v for _, v in obj.dictitems or ())]
    return None


def find_tensors(root) -> list[tuple[str, TensorRef]]:
    """Every tensor reachable from root with its dotted path, in pickle order.

    A container shared through the pickle memo is walked once. Names are counted first (an int
    per container, shared ones counted once but with their multiplicity), and only built if
    their number and the pairs every container would keep are within the limits: a memo
    "billion laughs" of 923 bytes (10**9 names) fails before a single name exists. Cycles are
    skipped. Recursion is bounded by MAX_DEPTH, well inside Python's default limit.
    """
    counts: dict[int, int] = {}
    on_path: set[int] = set()
    pairs = 0

    def count(obj, depth: int) -> int:
        nonlocal pairs
        if type(obj) is TensorRef:
            inner = _subclass_state(obj)
            return 1 + (count(inner, depth + 1) if inner is not None else 0)
        known = counts.get(id(obj))
        if known is not None:
            return known
        children = _child_values(obj)
        if not children or id(obj) in on_path:
            return 0
        if depth >= MAX_DEPTH:
            raise LimitError(f"the checkpoint's containers nest deeper than {MAX_DEPTH:,} levels",
                             expected=f"at most {MAX_DEPTH:,} levels")
        on_path.add(id(obj))
        total = sum(count(child, depth + 1) for child in children)
        on_path.discard(id(obj))
        if total > MAX_NAMES:
            raise LimitError(f"the checkpoint names more than {MAX_NAMES:,} tensors (a memo-sharing "
                             "bomb?)", expected=f"at most {MAX_NAMES:,}")
        pairs += total
        if pairs > MAX_PAIRS:
            raise LimitError(f"naming the checkpoint's tensors needs more than {MAX_PAIRS:,} paths "
                             "(containers shared or nested too much)", expected=f"at most {MAX_PAIRS:,}")
        counts[id(obj)] = total
        return total

    count(root, 0)
    done: dict[int, list] = {}

    def collect(obj) -> list:
        if type(obj) is TensorRef:
            inner = _subclass_state(obj)   # a subclass, then its inner tensors under its name
            return [((), obj)] + (collect(inner) if inner is not None else [])
        known = done.get(id(obj))
        if known is not None:
            return known
        children = _children(obj)
        if not children or id(obj) in on_path:
            return []
        on_path.add(id(obj))
        out = [(path if name is None else (name,) + path, ref)
               for name, child in children for path, ref in collect(child)]
        on_path.discard(id(obj))
        done[id(obj)] = out
        return out

    return [(".".join(path) or "tensor", ref) for path, ref in collect(root)]


def _subclass_state(ref: TensorRef) -> dict | None:
    """A tensor subclass's state (its inner tensors: torchao's qdata, scale, ...), if any."""
    return ref.state if ref.kind == "subclass" and type(ref.state) is dict else None


def detect_prefix(root, names: list[str]) -> str:
    """The `state_dict.`/`model.` path the UI presents as the main tree ('' if none)."""
    prefix = ""
    if type(root) is dict:
        for key in CHECKPOINT_KEYS:
            if key in root and any(n.startswith(key + ".") for n in names):
                prefix = key + "."
                break
    while True:
        under = [n[len(prefix):] for n in names if n.startswith(prefix)]
        first = under[0].split(".", 1)[0] if under else None
        if first not in WRAPPER_KEYS or not all(u.startswith(first + ".") for u in under):
            return prefix
        prefix += first + "."


# --- tensors ------------------------------------------------------------------------------------

def make_tensor(name: str, ref: TensorRef, source, locate: Locate, big_endian: bool) -> Tensor:
    table, itemsize = TORCH_DTYPES.get(ref.dtype, (None, 1))
    # a pickle int may have more digits than str() allows: keep only what an int64 holds
    offset_ok = type(ref.offset) is int and 0 <= ref.offset < INT64
    info = {"torch_dtype": ref.dtype, "storage_offset": ref.offset if offset_ok else shown(ref.offset)}
    if ref.kind != "tensor":
        info["kind"] = ref.kind
    info.update(ref.info)
    problem = None if table else f"torch dtype {ref.dtype} has no decoder in tensorloupe"
    shape, strides, start = ref.size, ref.stride, ref.offset
    if len(shape) > MAX_DIMS or len(strides) != len(shape) or \
            not all(type(v) is int and 0 <= v < INT64 for v in (*shape, *strides, start)):
        problem = (f"its size ({len(shape):,} dims), stride ({len(strides):,}) or storage offset are "
                   "not integers in 0..2**63-1")
        shape, strides, start = (), (), 0
    numel = math.prod(shape)
    span = 0 if numel == 0 else 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    nbytes = span * itemsize
    offset = 0
    storage = ref.storage
    if storage is None and ref.kind == "subclass":
        problem = problem or (f"not read: {ref.info.get('subclass')} is a tensor subclass whose layout "
                              "tensorloupe does not know; its stored parts are listed under its name")
    elif storage is None:
        problem = problem or "the tensor has no storage (a meta tensor): there are no values"
    else:
        info.update(storage=storage.key, storage_numel=storage.numel, storage_dtype=storage.dtype)
        if storage.location != "cpu":
            info["location"] = storage.location
        holder, base, available, where_problem = locate(storage)
        source = holder or source
        offset = base + start * itemsize
        if where_problem:
            problem = problem or where_problem
        elif start * itemsize + nbytes > available:
            problem = problem or (f"the view needs bytes {start * itemsize:,}..."
                                  f"{start * itemsize + nbytes:,} of a {available:,}-byte storage")
    normal = tuple(s for n, s in zip(shape, strides) if n != 1)
    contiguous = normal == tuple(s for n, s in zip(shape, contiguous_strides(shape)) if n != 1)
    tensor = Tensor(name, table or ref.dtype, tuple(shape), offset, nbytes, source=source,
                    strides=None if contiguous else tuple(strides), big_endian=big_endian,
                    problem=problem, info=info)
    return packed.as_codes(tensor, ref.dtype) if ref.dtype in packed.PACKED and not problem else tensor


def checkpoint(fmt: str, source, root, pickles: list[Unpickled], locate: Locate, *,
               big_endian: bool = False, warnings: list[str] | None = None,
               extras: dict | None = None, notes: list[str] | None = None,
               load_problems: list[str] = ()) -> Checkpoint:
    """The Checkpoint for an unpickled torch object: descriptors, metadata, safety report.
    `notes` are what makes the file's layout deceptive (several data.pkl, bytes before the
    archive, a failed CRC): they go into the safety report and lead the warnings.
    `load_problems`: what torch.load stops at besides its unpickler (weightsonly.report)."""
    try:
        found = find_tensors(root)
    except TensorloupeError as e:
        raise e.located(file=source.name, format=fmt)
    names: dict[int, str] = {}
    tensors: list[Tensor] = []
    used: set[str] = set()
    slot_of = moduleslots.slots(root) if found else {}
    repeats: dict[str, int] = {}
    for name, ref in found:
        unique = name
        while unique in used:  # keys that render alike (b"a" and "a"): number the repeats
            repeats[name] = repeats.get(name, 1) + 1
            unique = f"{name}#{repeats[name]}"
        used.add(unique)
        tensor = make_tensor(unique, ref, source, locate, big_endian)
        if id(ref) in slot_of:   # a pickled module says: parameter or buffer (moduleslots.py)
            tensor.info["module_slot"] = slot_of[id(ref)]
        if id(ref) in names:
            tensor.info["same_as"] = names[id(ref)]  # one tensor object saved under two names
        names.setdefault(id(ref), unique)
        tensors.append(tensor)
    tensors, quantisation = subclasses.rebuild(tensors)
    prefix = detect_prefix(root, [t.name for t in tensors])
    main = root
    for part in prefix.rstrip(".").split(".") if prefix else ():
        main = main.get(part, main) if type(main) is dict else main
    rendered = render(root, names, main if prefix else None,
                      sum(t.name.startswith(prefix) for t in tensors), prefix)
    safety = safety_report(pickles, notes or [])
    # a ZIP's other data.pkl variants are analysed for safety only: torch reads the first
    kind = weightsonly.OUTRIGHT_BY_FORMAT.get("torchscript" if (extras or {}).get("torchscript")
                                             else fmt)
    safety["weights_only"] = weightsonly.report(pickles[:1] if fmt == "pytorch-zip" else pickles,
                                                kind, list(load_problems))
    if (extras or {}).get("torchscript"):   # one verdict for its classes (torchscript.py)
        safety["torchscript"] = extras["torchscript"]
    warnings = safety_warnings(safety) + list(warnings or [])
    problems = [t for t in tensors if t.problem]
    warnings += [f"tensor {t.name!r}: {t.problem}" for t in problems[:MAX_PROBLEM_WARNINGS]]
    if len(problems) > MAX_PROBLEM_WARNINGS:
        warnings.append(f"{len(problems) - MAX_PROBLEM_WARNINGS:,} more tensors cannot be read")
    extras = dict(extras or {}, safety=safety, prefix=prefix,
                  pickle={"protocol": pickles[-1].protocol if pickles else None})
    if quantisation:
        extras["quantisation"] = quantisation
    extras.update(trainstate.summaries(root))   # an optimizer's state_dict, a dataclass
    extras.update(zerostate.summaries(root, lambda ref: names.get(id(ref))))   # DeepSpeed ZeRO
    metadata = rendered if type(root) is dict else {"root": rendered}
    return Checkpoint(fmt, source.name, source.size, tensors, metadata=metadata,
                      warnings=warnings, extras=extras, sources=[source])
