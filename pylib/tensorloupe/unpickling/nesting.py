"""How deep a pickle's objects nest, and taking a too-deep structure apart without recursion.

Building nested objects is iterative (a pickle appends one list into another with one opcode),
but freeing them is not: CPython frees a container's items from inside the container's own
deallocator, and under Pyodide (a small WebAssembly stack) a list nested 20,000 deep crashes the
interpreter when it is freed ("Maximum call stack size exceeded", a fatal error that kills the
page's worker); so do repr, == and copy. Real checkpoints nest a few levels (a Lightning
checkpoint's hyper_parameters: under 20). So:
  - immutable chains (tuples, frozensets) are measured as they are built (machine.py keeps each
    one's depth), since they cannot be taken apart afterwards;
  - after a pickle ends, or fails, everything it built is measured once (`deeper_than`, a walk
    with an explicit stack); a structure deeper than the limit is dismantled (`dismantle`:
    mutable containers and our slotted objects are emptied one by one, so nothing is freed
    recursively) and refused.
"""

from __future__ import annotations

from .objects import SafeKey, Stateful

CONTAINERS = (list, tuple, dict, set, frozenset)


_SLOTS: dict[type, tuple] = {}


def _slots(obj) -> tuple:
    kind = type(obj)
    if kind not in _SLOTS:
        _SLOTS[kind] = tuple(s for cls in kind.__mro__ for s in getattr(cls, "__slots__", ()))
    return _SLOTS[kind]


def children(obj) -> list:
    """What `obj` holds that could nest further: container items, dict keys and values, and the
    fields of our slotted objects (Marker, TensorRef...). Shared stand-ins (globals) are leaves."""
    kind = type(obj)
    if kind is dict:
        return [*obj.keys(), *obj.values()]
    if kind in CONTAINERS:
        return list(obj)
    if isinstance(obj, (Stateful, SafeKey)):
        return [getattr(obj, s, None) for s in _slots(obj)]
    return []


def _nests(obj) -> bool:
    kind = _KIND[type(obj)]
    return kind == 2 or (kind == 1 and len(obj) > 0)


class _Kinds(dict):
    """type -> 0 holds nothing, 1 a container, 2 one of our slotted objects; filled on first
    sight, so that the walk's hot loop is one C-level dict lookup per object."""

    def __missing__(self, kind: type) -> int:
        self[kind] = 1 if kind in CONTAINERS else 2 if issubclass(kind, (Stateful, SafeKey)) else 0
        return self[kind]


_KIND = _Kinds()


def _nesting_children(obj) -> list:
    """children(obj) that could nest further (non-empty containers, our objects): the hot loop
    of the walk, so by type lookups rather than isinstance."""
    kind = type(obj)
    held = obj if kind is tuple or kind is list or kind is set or kind is frozenset else children(obj)
    kinds = _KIND
    return [c for c in held if (k := kinds[type(c)]) == 2 or (k == 1 and c)]


def deeper_than(roots, limit: int) -> bool:
    """Whether any chain of objects reachable from `roots` is more than `limit` deep. A depth-first
    walk with an explicit stack; each object's depth is computed once (shared objects: a DAG),
    and a reference back to an object on the current path (a cycle) ends the chain. Objects that
    hold nothing nesting (a tensor's size tuple, a Marker without arguments) are depth 1 and are
    neither entered nor remembered: most of a real checkpoint, so the walk stays cheap."""
    depth: dict[int, int] = {}
    kinds = _KIND
    for root in roots:
        # most roots are the memo's leaves (strings, size tuples): skip them before any call
        kind = kinds[type(root)]
        if kind == 0 or (kind == 1 and not root) or id(root) in depth:
            continue
        kids = _nesting_children(root)
        if not kids:
            continue
        path = [(root, kids, 0)]
        on_path = {id(root)}
        while path:
            obj, kids, i = path[-1]
            while i < len(kids):
                child = kids[i]
                i += 1
                if id(child) in depth or id(child) in on_path:
                    continue
                grandkids = _nesting_children(child)
                if grandkids:
                    if len(path) >= limit:
                        return True
                    path[-1] = (obj, kids, i)
                    on_path.add(id(child))
                    path.append((child, grandkids, 0))
                    break
            else:
                path.pop()
                on_path.discard(id(obj))
                below = max(depth.get(id(c), 1) for c in kids)
                if below + 1 > limit:
                    return True
                depth[id(obj)] = below + 1
    return False


def dismantle(roots) -> None:
    """Empty every mutable container and slotted object reachable from `roots`, one at a time, so
    that freeing them never recurses deeper than one level (tuples cannot be emptied: their
    depth was bounded as they were built)."""
    todo, seen = list(roots), set()
    while todo:
        obj = todo.pop()
        if not _nests(obj) or id(obj) in seen:
            continue
        seen.add(id(obj))
        todo.extend(children(obj))    # keeps them alive until they are emptied in turn
        if type(obj) in (list, dict, set):
            obj.clear()
        elif isinstance(obj, (Stateful, SafeKey)):
            for slot in _slots(obj):
                if slot != "_hash":
                    setattr(obj, slot, None)
