"""Pickle as data: an interpreter of every opcode of pickle protocols 0-5 that never runs anything.

The grammar is CPython's own opcode table (`pickletools.opcodes`: code, name, argument kind,
protocol); args.py has one reader per argument kind and this module one handler per opcode
name, joined into a 256-entry dispatch table at import.
Nothing here imports a module, looks up an attribute or calls an object named by the pickle: a
global becomes whatever `resolve(module, name)` returns (allow-listed stand-ins, see
formats/pytorch/allowlist.py), and the opcodes that call (REDUCE, INST, OBJ, NEWOBJ, NEWOBJ_EX) only ever
run a stand-in's own pure builder; anything else yields an inert Marker that records the call.

Why not `pickle.Unpickler` with a restricted find_class: the C unpickler satisfies EXT opcodes
from `copyreg._extension_cache` without calling find_class (so a real function cached by any
earlier unpickling in the process would reach REDUCE), allocates a declared string length before
reading it, and grows its memo array to the largest PUT index. Here every length is checked
against the bytes that remain, the memo is a dict with a size limit, and MARK nesting, container
lengths and the depth of tuples used as keys (hashing them recurses in C) are limited.
"""

from __future__ import annotations

import copyreg
import pickletools
import struct
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import LOW_LEVEL_ERRORS, FormatError, LimitError, TensorloupeError, TruncatedError
from .args import READERS
from .nesting import deeper_than, dismantle
from .objects import LIMITS, Limits, Marker, StandIn, Stateful, safe_key, shown

HIGHEST_PROTOCOL = 5


@dataclass
class Unpickled:
    value: Any
    end: int                          # offset just past STOP (another pickle may follow)
    globals: dict[str, StandIn]       # every global the pickle named, in order of first use
    global_counts: dict[str, int]
    opcodes: dict[str, int]
    protocol: int
    # calls of globals that are not allow-listed, (name, args, kwargs), in order, at most
    # MAX_CALLS: what the pickle would have run (e.g. the command given to os.system)
    calls: list = None
    # globals a BUILD was applied to (setting attributes of a function, class or module)
    built: dict = None
    # bytes of objects counted as they were built (Limits.max_object_bytes; an upper bound)
    cost: int = 0


MAX_CALLS = 50


def unpickle(data: bytes, resolve: Callable[[str, str], StandIn],
             persistent_load: Callable[[Any], Any] | None = None, *, start: int = 0,
             limits: Limits = LIMITS) -> Unpickled:
    """Interpret one pickle starting at `start`. Raises only TensorloupeError subclasses."""
    if len(data) - start > limits.max_bytes:
        raise LimitError(f"the pickle is larger than the {limits.max_bytes:,}-byte limit",
                         expected=f"at most {limits.max_bytes:,} bytes", found=len(data) - start)
    return _Machine(bytes(data), resolve, persistent_load, limits).run(start)


class _Machine:
    def __init__(self, data, resolve, persistent_load, limits: Limits):
        self.data, self.resolve_name, self.persistent_load = data, resolve, persistent_load
        self.limits, self.max_memo = limits, limits.max_memo
        self.stack: list = []
        self.metastack: list[list] = []
        self.memo: dict = {}
        self.key_cost = 0
        self.charged = 0                  # bytes of dict, set and memo entries (ENTRY)
        self.calls: list = []
        self.built: dict[str, str] = {}
        self.globals: dict[str, StandIn] = {}
        self.global_counts: dict[str, int] = {}
        self.protocol = 0
        self.value = None
        # tuples and frozensets nested 2+ deep: id -> (the object, kept alive so its id is not
        # reused, its depth); they cannot be taken apart later, so their depth is checked as built
        self.nested: dict[int, tuple] = {}

    def run(self, pos: int) -> Unpickled:
        data, table, size = self.data, _TABLE, len(self.data)
        counts = [0] * 256
        weights, made, budget = _WEIGHTS, 0, self.limits.max_object_bytes
        start = pos
        try:
            while True:
                start = pos
                code = data[pos]
                _, reader, handler = table[code]
                counts[code] += 1
                made += weights[code]
                if made + self.charged > budget:
                    raise LimitError(f"the pickle builds more than {budget >> 20:,} MiB of objects "
                                     "(a memory bomb?)", expected=f"at most {budget >> 20:,} MiB")
                if reader is None:
                    pos += 1
                    handler(self)
                    if code == _STOP:
                        break
                else:
                    arg, pos = reader(data, pos + 1)
                    handler(self, arg)
        except TensorloupeError as e:
            error = e
            if e.offset is None:
                e.offset = start
        except (*LOW_LEVEL_ERRORS, AttributeError, MemoryError) as e:
            if start >= size:
                error = TruncatedError("the pickle ends without a STOP opcode", offset=start)
            elif table[data[start]] is None:
                error = FormatError(f"unknown pickle opcode {data[start]:#04x}", offset=start)
            else:
                # never str(e): a KeyError holds a pickle value (a 5,000-digit int, a tuple
                # nested 100,000 deep) whose str() raises or recurses; quote it bounded
                detail = shown(e.args[0]) if len(e.args) == 1 else ""
                error = FormatError(f"malformed pickle at opcode {table[data[start]][0]}: "
                                    f"{type(e).__name__} {detail}".rstrip(), offset=start)
            error.__cause__ = e
        else:
            if not self._too_deep():
                opcodes = {table[c][0]: n for c, n in enumerate(counts) if n}
                return Unpickled(self.value, pos, self.globals, self.global_counts, opcodes,
                                 self.protocol, self.calls, self.built, made + self.charged)
            error = self.nesting_error()
        if not (isinstance(error, LimitError) and error.message == self.nesting_error().message):
            self._too_deep()   # a broken pickle's partial objects are freed too: take them apart if deep
        # A broken pickle can still be a hostile one: say what it named before it broke.
        dangerous = [name for name, standin in self.globals.items() if standin.verdict == "dangerous"]
        if dangerous:
            error.message += f" (before that it named dangerous globals: {', '.join(dangerous)})"
            error.dangerous = dangerous
        raise error

    def nesting_error(self) -> LimitError:
        return LimitError(f"the pickle's objects nest deeper than {self.limits.max_depth:,} levels",
                          expected=f"at most {self.limits.max_depth:,}")

    def _too_deep(self) -> bool:
        """Whether what the pickle built nests past the limit; if so it is taken apart here, so
        that freeing it does not recurse (nesting.py)."""
        def roots():   # a generator: no list as long as the stack and the memo
            yield self.value
            yield from self.stack
            for level in self.metastack:
                yield from level
            yield from self.memo.values()
        if not deeper_than(roots(), self.limits.max_depth):
            return False
        dismantle(list(roots()))
        return True

    # --- helpers ------------------------------------------------------------------------------

    def immutable(self, made):
        """A tuple or frozenset just built: its depth, checked (it cannot be taken apart later)."""
        nested = self.nested
        below = 0
        for item in made:
            if type(item) in (tuple, frozenset):
                below = max(below, nested[id(item)][1] if id(item) in nested else 1)
        if below:
            if below + 1 > self.limits.max_depth:
                raise self.nesting_error()
            nested[id(made)] = (made, below + 1)
            self.charged += ENTRY
        return made

    def pop_mark(self) -> list:
        if not self.metastack:
            raise FormatError("an opcode needs a MARK but none is open")
        items, self.stack = self.stack, self.metastack.pop()
        return items

    def grow(self, container, extra: int) -> None:
        if len(container) + extra > self.limits.max_items:
            raise LimitError(f"a container grows past {self.limits.max_items:,} elements",
                             expected=f"at most {self.limits.max_items:,}", found=len(container) + extra)

    def key(self, key):
        """A dict key or set item, wrapped if its hash could be chosen (values.SafeKey), with the
        cost of all keys of the pickle bounded."""
        key, cost = safe_key(key, self.limits)
        if cost > 1:
            self.key_cost += cost
            if self.key_cost > self.limits.max_key_cost:
                raise LimitError(f"the pickle's tuple and frozenset keys hold more than "
                                 f"{self.limits.max_key_cost:,} elements in all")
        return key

    def resolve(self, module, name) -> StandIn:
        if not isinstance(module, str) or not isinstance(name, str):
            raise FormatError("a global's module and name must be strings",
                              found=f"{type(module).__name__}, {type(name).__name__}")
        standin = self.resolve_name(module, name)
        self.globals.setdefault(standin.name, standin)
        self.global_counts[standin.name] = self.global_counts.get(standin.name, 0) + 1
        return standin

    def call(self, callee, args, kwargs=None):
        if type(args) is not tuple or (kwargs is not None and type(kwargs) is not dict):
            raise FormatError("a call's arguments are not a tuple (and keywords a dict)",
                              found=f"{type(args).__name__}")
        if isinstance(callee, StandIn):
            if callee.builder is None and len(self.calls) < MAX_CALLS:
                self.calls.append((callee.name, args, kwargs))
            try:
                return callee.apply(args, kwargs)
            except LOW_LEVEL_ERRORS as e:
                # A builder's own checks say what is wrong (FormatError); anything they missed
                # is still the file's fault, said without the interpreter's words.
                raise FormatError(f"the pickle calls {callee.name} with arguments it cannot "
                                  f"take ({len(args):,} arguments)") from e
        what = callee.name + "()" if isinstance(callee, Marker) else type(callee).__name__
        if len(self.calls) < MAX_CALLS:
            self.calls.append((f"<the result of {what}>", args, kwargs))  # getattr(os, "system")(...)
        return Marker(f"<call of {what}>", args, kwargs)

    def new(self, cls, args, kwargs=None):
        # NEWOBJ is cls.__new__(cls, *args): on a function (a tensor rebuild function) it fails in
        # torch and in pickle, so it is no tensor here either
        if isinstance(cls, StandIn) and cls.function:
            raise FormatError(f"NEWOBJ applied to the function {cls.name}: torch refuses this "
                              "(only a class can be created with NEWOBJ)")
        return self.call(cls, args, kwargs)

    def op_PUT(self, index):
        if not 0 <= index < self.limits.max_memo_index:
            # the C unpickler's memo is an array as long as the largest index; an index this
            # large would also be a hash-flooding key (k*(2**61-1) all hash alike)
            raise LimitError("a memo index is negative or larger than any pickle needs",
                             expected=f"0..{self.limits.max_memo_index - 1:,}")
        memo = self.memo
        if index not in memo:
            if len(memo) >= self.max_memo:
                raise LimitError(f"the pickle memo grows past {self.max_memo:,} entries",
                                 expected=f"at most {self.max_memo:,} entries")
            self.charged += MEMO_ENTRY
        memo[index] = self.stack[-1]

    # --- handlers, named op_<pickletools name> ---------------------------------------------------

    def op_PROTO(self, version):
        if not 0 <= version <= HIGHEST_PROTOCOL:
            raise FormatError("unsupported pickle protocol", expected=f"0..{HIGHEST_PROTOCOL}",
                              found=version)
        self.protocol = version

    def op_FRAME(self, length):
        pass  # framing only groups opcodes; the lengths inside are checked as they are read

    def op_STOP(self):
        self.value = self.stack.pop()

    def op_push(self, value):
        self.stack.append(value)

    def op_NONE(self): self.stack.append(None)
    def op_NEWTRUE(self): self.stack.append(True)
    def op_NEWFALSE(self): self.stack.append(False)
    def op_EMPTY_LIST(self): self.stack.append([])
    def op_EMPTY_TUPLE(self): self.stack.append(())
    def op_EMPTY_DICT(self): self.stack.append({})
    def op_EMPTY_SET(self): self.stack.append(set())

    def op_NEXT_BUFFER(self):
        raise FormatError("the pickle refers to out-of-band buffers, which a file cannot carry")

    def op_READONLY_BUFFER(self):
        pass

    def op_MARK(self):
        if len(self.metastack) >= self.limits.max_marks:
            raise LimitError(f"MARKs nest deeper than {self.limits.max_marks:,} levels",
                             expected=f"at most {self.limits.max_marks:,}")
        self.metastack.append(self.stack)
        self.stack = []

    def op_POP(self):
        if self.stack:
            self.stack.pop()
        else:
            self.pop_mark()

    def op_POP_MARK(self): self.pop_mark()
    def op_DUP(self): self.stack.append(self.stack[-1])

    # pop_mark() rebinds self.stack: take the items before touching the stack.
    def op_TUPLE(self):
        items = self.pop_mark()
        self.stack.append(self.immutable(tuple(items)))

    def op_TUPLE1(self): self.stack[-1] = self.immutable((self.stack[-1],))

    def op_TUPLE2(self):
        second = self.stack.pop()
        self.stack[-1] = self.immutable((self.stack[-1], second))

    def op_TUPLE3(self):
        third, second = self.stack.pop(), self.stack.pop()
        self.stack[-1] = self.immutable((self.stack[-1], second, third))

    def op_LIST(self):
        items = self.pop_mark()
        self.stack.append(items)

    def op_DICT(self):
        target: dict = {}
        self._setitems(target, self.pop_mark())
        self.stack.append(target)

    def op_FROZENSET(self):
        items = self.pop_mark()
        self.charged += ENTRY * len(items)
        self.stack.append(self.immutable(frozenset(self.key(x) for x in items)))

    def op_APPEND(self):
        value = self.stack.pop()
        self._extend(self.stack[-1], [value])

    def op_APPENDS(self):
        items = self.pop_mark()
        self._extend(self.stack[-1], items)

    def _extend(self, target, items):
        if type(target) is list:
            self.grow(target, len(items))
            target.extend(items)
        elif isinstance(target, Stateful):
            self.grow(target.items or (), len(items))
            self.charged += _SLOT * len(items)
            for item in items:
                target.append(item)
        else:
            raise FormatError(f"APPEND to a {type(target).__name__}")

    def op_SETITEM(self):
        value, key = self.stack.pop(), self.stack.pop()
        self._setitems(self.stack[-1], [key, value])

    def op_SETITEMS(self):
        items = self.pop_mark()
        self._setitems(self.stack[-1], items)

    def _setitems(self, target, items):
        if len(items) % 2:
            raise FormatError("a dictionary gets a key without a value")
        self.charged += ENTRY * (len(items) // 2)  # a dict entry, or a Stateful's (key, value)
        if type(target) is dict:
            self.grow(target, len(items) // 2)
            for i in range(0, len(items) - 1, 2):
                target[self.key(items[i])] = items[i + 1]
        elif isinstance(target, Stateful):
            for i in range(0, len(items) - 1, 2):
                target.setitem(items[i], items[i + 1])
        else:
            raise FormatError(f"SETITEM on a {type(target).__name__}")

    def op_ADDITEMS(self):
        items = self.pop_mark()
        target = self.stack[-1]
        self.charged += ENTRY * len(items)
        if type(target) is set:
            self.grow(target, len(items))
            target.update(self.key(x) for x in items)
        elif isinstance(target, Stateful):
            for item in items:
                target.append(item)
        else:
            raise FormatError(f"ADDITEMS on a {type(target).__name__}")

    def op_GET(self, index):
        value = self.memo.get(index, _MISSING) if type(index) is int else _MISSING
        if value is _MISSING:
            raise FormatError("a memo GET (GET, BINGET, LONG_BINGET) names an index no PUT stored",
                              found=index if type(index) is int and -SMALL < index < SMALL else None)
        self.stack.append(value)
    op_BINGET = op_LONG_BINGET = op_GET

    op_BINPUT = op_LONG_BINPUT = op_PUT

    def op_MEMOIZE(self): self.op_PUT(len(self.memo))

    def op_GLOBAL(self, pair): self.stack.append(self.resolve(*pair))

    def op_STACK_GLOBAL(self):
        name, module = self.stack.pop(), self.stack.pop()
        self.stack.append(self.resolve(module, name))

    def op_EXT1(self, code):
        # The extension registry is read as data (no import); an unregistered code stays a name.
        module_name = copyreg._inverted_registry.get(code)
        if module_name is None:
            module_name = ("copyreg._extension_registry", f"unregistered_code_{code}")
        self.stack.append(self.resolve(*module_name))
    op_EXT2 = op_EXT4 = op_EXT1

    def op_REDUCE(self):
        args = self.stack.pop()
        self.stack[-1] = self.call(self.stack[-1], args)

    def op_BUILD(self):
        state = self.stack.pop()
        target = self.stack[-1]
        if isinstance(target, StandIn):
            # BUILD on a global itself (not an instance) sets attributes of a function, class or
            # module: e.g. an allow-listed function's __code__, or a module's functions
            self.built.setdefault(target.name, "a BUILD sets its attributes (it could replace "
                                  "its code or a module's functions)")
            return
        if isinstance(target, Stateful):
            before = getattr(target, "state", None)
            setter = before.get("__setstate__") if type(before) is dict else None
            if setter is not None and len(self.calls) < MAX_CALLS:
                # an earlier BUILD put a __setstate__ in the instance dict: a real unpickler
                # calls it with this state (os.system("touch ...") in a known gadget)
                name = setter.name if isinstance(setter, (StandIn, Marker)) else type(setter).__name__
                self.calls.append((name, (state,), None))
            target.build(state)
        # BUILD on plain data (e.g. OrderedDict's `_metadata` on a state_dict) sets attributes a
        # builtin cannot hold; there is nothing to show, so the state is dropped.

    def op_INST(self, pair):
        args = tuple(self.pop_mark())
        self.stack.append(self.call(self.resolve(*pair), args))

    def op_OBJ(self):
        items = self.pop_mark()
        self.stack.append(self.call(items[0], tuple(items[1:])))

    def op_NEWOBJ(self):
        args = self.stack.pop()
        self.stack[-1] = self.new(self.stack[-1], args)

    def op_NEWOBJ_EX(self):
        kwargs, args = self.stack.pop(), self.stack.pop()
        self.stack[-1] = self.new(self.stack[-1], args, kwargs)

    def op_PERSID(self, pid): self.stack.append(self.load_persistent(pid))
    def op_BINPERSID(self): self.stack.append(self.load_persistent(self.stack.pop()))

    def load_persistent(self, pid):
        if self.persistent_load is None:
            raise FormatError("the pickle refers to a persistent object but none are defined")
        return self.persistent_load(pid)


# The data opcodes push their argument unchanged.
_PUSH_ARG = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "STRING",
             "BINSTRING", "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
             "BYTEARRAY8", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "FLOAT",
             "BINFLOAT"}


def _build_table():
    table: list = [None] * 256
    for op in pickletools.opcodes:
        handler = _Machine.op_push if op.name in _PUSH_ARG else getattr(_Machine, "op_" + op.name)
        reader = READERS[op.arg.name] if op.arg is not None else None
        table[op.code.encode("latin-1")[0]] = (op.name, reader, handler)
    return table


_TABLE = _build_table()
_MISSING = object()
SMALL = 1 << 63
# What each opcode adds to the memory of the pickle's objects, in bytes (CPython 3.11, 64-bit,
# sys.getsizeof) plus the stack slot of the push: 8 bytes, counted twice because growing the
# stack's array copies it (9M pushes of () took 144 MiB for 68 counted at 8). Counted as the
# objects are built, so a bomb stops at the budget instead of after it. Ops not named here push
# a new small object (an int, float, str or bytes: its header; their contents are bounded by the
# pickle's own size). Items moved into a dict, set, memo or Stateful are charged per item in the
# handlers (charged).
_SLOT = 16
_COSTS = {
    0: ("PROTO", "FRAME", "STOP", "POP", "POP_MARK", "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE",
        "APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD", "READONLY_BUFFER",
        # MARK opens a list that is thrown away when it closes (bar LIST, which keeps it and is
        # charged): at most max_marks of them are open at once
        "MARK"),
    _SLOT: ("NONE", "NEWTRUE", "NEWFALSE", "EMPTY_TUPLE", "GET", "BINGET", "LONG_BINGET", "DUP",
            "BININT1", "PERSID", "BINPERSID"),               # an existing object, or a cached one
    48 + _SLOT: ("TUPLE", "TUPLE1"), 56 + _SLOT: ("EMPTY_LIST", "LIST", "TUPLE2"),
    64 + _SLOT: ("EMPTY_DICT", "TUPLE3", "DICT"), 216 + _SLOT: ("EMPTY_SET", "FROZENSET"),
    # a call's result: a Marker (80 bytes) or a builder's product (an OrderedDict is 128)
    120 + _SLOT: ("REDUCE", "NEWOBJ", "NEWOBJ_EX", "OBJ"),
    # a StandIn (80 bytes), its module, name and dotted name, made anew for each GLOBAL
    # (measured: 276 bytes each)
    312 + _SLOT: ("GLOBAL", "STACK_GLOBAL", "EXT1", "EXT2", "EXT4"), 440 + _SLOT: ("INST",),
}
# A dict or set entry: the table's share per entry at its peak (growing copies the table):
# measured ~75 bytes on dicts of 0.1-1.75M int keys. A memo entry also makes its index (an int).
ENTRY = 80
MEMO_ENTRY = ENTRY + 32
_CODES = {op.name: ord(op.code) for op in pickletools.opcodes}
_WEIGHTS = [56 + _SLOT] * 256
for _cost, _names in _COSTS.items():
    for _name in _names:
        _WEIGHTS[_CODES[_name]] = _cost
_STOP = _CODES["STOP"]
