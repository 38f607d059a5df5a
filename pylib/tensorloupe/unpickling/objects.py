"""The values an unpickling produces besides plain data, and the limits it runs under.

StandIn: what a global resolves to (a name, a verdict, maybe a pure builder of data).
Marker: the inert record of a call the pickle asks for; shown as data, never performed.
Stateful: our objects that record BUILD state and appended or set items instead of running
`__setstate__`, `append` or `__setitem__` of a real class.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import LimitError
from ..jsonable import quoted


@dataclass(frozen=True)
class Limits:
    # One pickle (data.pkl). torch writes ~130 bytes of data.pkl per tensor (measured on
    # torch.save state_dicts: 374,350 bytes for 2,882 tensors, 2,635,166 for 20,000), so 16 MiB
    # is ~125,000 tensors in one file (45x the 2,882-tensor benchmark; the largest real
    # single-file checkpoints hold a few ten thousand; max_object_bytes below binds first, at
    # ~44,000). 256 MiB took 30 s to refuse.
    max_bytes: int = 16 << 20
    max_memo: int = 1 << 22           # memo entries
    max_memo_index: int = 1 << 32     # a memo index (LONG_BINPUT's range; see op_PUT)
    max_marks: int = 1000             # MARK nesting
    max_items: int = 1 << 24          # elements of one list, tuple, dict or set
    # Bytes of the Python objects the pickle builds, counted as they are built (machine.py's
    # per-opcode costs; an upper bound, tests/test_unpickle.py checks it against tracemalloc).
    # A torch.save state_dict costs ~1,900 bytes per tensor by this count (~1,230 measured), so
    # 80 MiB is ~44,000 tensors in one file; a bomb of 1-byte opcodes (EMPTY_DICT, TUPLE1,
    # MEMOIZE...) stops at 80 MiB of objects (~150 MB of RSS at most with the pickle's own
    # bytes), where 2.5M objects of any size reached 200-460 MB.
    max_object_bytes: int = 80 << 20
    max_key_depth: int = 100          # nesting of a tuple or frozenset used as a key
    # nesting of any objects (nesting.py: freeing a deeper structure recurses past Pyodide's
    # stack; real checkpoints nest a few levels, a Lightning checkpoint's configs under 20)
    max_depth: int = 200
    max_key_size: int = 100_000       # elements of such a key, counted as its hash visits them
    max_key_cost: int = 1 << 22       # elements of every such key of the pickle together


LIMITS = Limits()


class StandIn:
    """What a global resolves to: its dotted name, a verdict, and maybe a pure builder of data."""

    __slots__ = ("name", "verdict", "builder", "value", "reason", "function")

    def __init__(self, name: str, verdict: str, builder: Callable | None = None, value: Any = None,
                 *, reason: str = "", function: bool = False):
        self.name, self.verdict, self.builder, self.value = name, verdict, builder, value
        self.reason = reason
        self.function = function  # a function, not a class: NEWOBJ on it fails in torch

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


def shown(value, width: int = 120) -> str:
    """A pickle value quoted for a one-line message: bounded (jsonable.quoted: never str() of
    raw data, whose int may have more digits than str() allows or whose nesting recurses) and cut
    to `width` characters (a 5,000-digit int is 4,000 hex digits)."""
    text = quoted(value)
    return text if len(text) <= width else text[:width - 1] + "…"


class SafeKey:
    """A dict key or set item whose hash the pickle could choose, hashed by its bytes instead.

    Python hashes an int as itself modulo 2**61-1 (so k*(2**61-1) all hash to 0), a float as a
    fraction modulo the same prime, and a tuple or frozenset by a mixing of its items' hashes that
    can be inverted: a pickle can make 120,000 keys that collide and a dict of them never finish.
    Such keys are wrapped: the hash is that of a byte encoding (bytes hash with SipHash, keyed
    per process), equality is the value's. Small ints, strings and bytes (real checkpoints' keys)
    stay as they are. A float key 1.0 is wrapped while the int 1 is not, so the two do not merge
    as in a real dict: the cost of one extra entry shown in a hostile or odd pickle.
    """

    __slots__ = ("value", "_hash")

    def __init__(self, value, encoded: bytes):
        self.value, self._hash = value, hash(encoded)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return type(other) is SafeKey and other._hash == self._hash and other.value == self.value

    def __repr__(self) -> str:
        return "SafeKey(...)"


SMALL_INT = 1 << 60
_FLOAT = struct.Struct("<d")


def _needs_wrapping(key) -> bool:
    kind = type(key)
    return kind in (tuple, frozenset, float, complex) or (kind is int and not
                                                          -SMALL_INT < key < SMALL_INT)


def safe_key(key, limits: "Limits" = None):
    """`key` ready to be a dict key or set item: checked (check_key) and wrapped if its hash
    could be chosen. Returns (key, cost), cost being the elements its encoding visited."""
    if not _needs_wrapping(key):
        return key, 1
    limits = limits or LIMITS
    check_key(key, limits)
    parts: list[bytes] = []
    cost = 0

    def encode(obj) -> None:
        nonlocal cost
        cost += 1
        if cost > limits.max_key_size:
            raise LimitError(f"a dictionary key or set item expands to more than "
                             f"{limits.max_key_size:,} elements")
        kind = type(obj)
        if kind is tuple or kind is frozenset:
            items = [_encoded(item) for item in obj] if kind is frozenset else None
            parts.append(b"(" if kind is tuple else b"{")
            if items is None:
                for item in obj:
                    encode(item)
            else:
                parts.extend(sorted(items))  # a frozenset's order is its hashes': make it canonical
                cost += len(items)
            parts.append(b")")
        elif kind is int or kind is bool:
            parts.append(b"i%x;" % obj)
        elif kind is float:
            parts.append(b"i%x;" % int(obj) if obj.is_integer() else b"f" + _FLOAT.pack(obj))
        elif kind is complex:
            parts.append(b"c" + _FLOAT.pack(obj.real) + _FLOAT.pack(obj.imag))
        elif kind is str:
            parts.append(b"s%d:" % len(obj) + obj.encode("utf-8", "surrogatepass"))
        elif kind is bytes:
            parts.append(b"b%d:" % len(obj) + obj)
        else:  # None, markers, stand-ins: hashed by identity or constant, never chosen
            parts.append(b"o%x;" % hash(obj))

    def _encoded(item) -> bytes:
        nonlocal parts
        saved, parts = parts, []
        encode(item)
        out, parts = b"".join(parts), saved
        return out

    encode(key)
    return SafeKey(key, b"".join(parts)), cost


def safe_keys(keys, limits: "Limits" = None) -> list:
    """safe_key of each key (a builder's list of keys), with their total cost bounded."""
    limits = limits or LIMITS
    out, total = [], 0
    for key in keys:
        key, cost = safe_key(key, limits)
        total += cost
        if total > limits.max_key_cost:
            raise LimitError(f"the keys of one container hold more than {limits.max_key_cost:,} "
                             "elements in all")
        out.append(key)
    return out


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
                             f"{limits.max_key_depth:,} levels")
        total = 1 + sum(size(item, depth + 1) for item in obj)
        if total > limits.max_key_size:
            raise LimitError(f"a dictionary key or set item expands to more than "
                             f"{limits.max_key_size:,} elements")
        sizes[id(obj)] = total
        return total

    size(key, 1)
    return key
