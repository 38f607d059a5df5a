"""The values an unpickling produces besides plain data, and the limits it runs under.

StandIn: what a global resolves to (a name, a verdict, maybe a pure builder of data).
Marker: the inert record of a call the pickle asks for; shown as data, never performed.
Stateful: our objects that record BUILD state and appended or set items instead of running
`__setstate__`, `append` or `__setitem__` of a real class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import LimitError


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 256 << 20        # one pickle (data.pkl)
    max_memo: int = 1 << 22           # memo entries
    max_marks: int = 1000             # MARK nesting
    max_items: int = 1 << 24          # elements of one list, tuple, dict or set
    max_key_depth: int = 100          # nesting of a tuple or frozenset used as a key
    max_key_size: int = 100_000       # elements of such a key, counted as its hash visits them


LIMITS = Limits()


class StandIn:
    """What a global resolves to: its dotted name, a verdict, and maybe a pure builder of data."""

    __slots__ = ("name", "verdict", "builder", "value")

    def __init__(self, name: str, verdict: str, builder: Callable | None = None, value: Any = None):
        self.name, self.verdict, self.builder, self.value = name, verdict, builder, value

    def apply(self, args: tuple, kwargs: dict | None):
        if self.builder is None:
            return Marker(self.name, args, kwargs)
        return self.builder(args, kwargs or {})

    def __repr__(self) -> str:
        return f"<{self.name}>"


class Stateful:
    """Our objects that record BUILD state and the items a pickle appends or sets on them."""

    __slots__ = ("state", "items", "dictitems")

    def build(self, state) -> None:
        self.state = state

    def append(self, value) -> None:
        if getattr(self, "items", None) is None:
            self.items = []
        self.items.append(value)

    def setitem(self, key, value) -> None:
        if getattr(self, "dictitems", None) is None:
            self.dictitems = []
        self.dictitems.append((key, value))


class Marker(Stateful):
    """The inert record of a call the pickle asks for: shown as data, never performed."""

    __slots__ = ("name", "args", "kwargs")

    def __init__(self, name: str, args: tuple = (), kwargs: dict | None = None):
        self.name, self.args, self.kwargs = name, args, kwargs
        self.state = self.items = self.dictitems = None

    def __repr__(self) -> str:
        return f"Marker({self.name})"


def check_key(key, limits: Limits = LIMITS):
    """Refuse a key whose hash would take too long or recurse too deep.

    Hashing a tuple hashes its elements again every time (nothing is cached) and recurses in C
    with no depth check; with the memo a pickle can nest tuples as a DAG whose expanded size
    doubles with each level. So the expanded size and the depth of tuple/frozenset keys are
    counted (each shared sub-tuple once, by identity) and limited.
    """
    if type(key) not in (tuple, frozenset):
        return key
    sizes: dict[int, int] = {}

    def size(obj, depth: int) -> int:
        if type(obj) not in (tuple, frozenset):
            return 1
        known = sizes.get(id(obj))
        if known is not None:
            return known
        if depth > limits.max_key_depth:
            raise LimitError(f"a dictionary key or set item nests deeper than "
                             f"{limits.max_key_depth} levels")
        total = 1 + sum(size(item, depth + 1) for item in obj)
        if total > limits.max_key_size:
            raise LimitError(f"a dictionary key or set item expands to more than "
                             f"{limits.max_key_size} elements")
        sizes[id(obj)] = total
        return total

    size(key, 1)
    return key
