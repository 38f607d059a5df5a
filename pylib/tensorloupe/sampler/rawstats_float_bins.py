"""The exact pass's histogram of a float32, float16 or bfloat16 chunk from its bytes: `Binner.add`'s
counts, number for number, with no float made per element (rawstats._float_add).

Binner's bin of v, min(floor((v * scale - lo) / width), last), never decreases as v grows, so bin k
starts at a threshold: the smallest float32 whose bin is k or more, found once per range by
bisection on the bit patterns with that very expression. A float32's order key (its bits with the
sign flipped, or all of them inverted for a negative) sorts as its value does, so a value's bin is
the number of thresholds at or below its key, and its top 16 bits (byte 3: the sign and the
exponent's top 7 bits; byte 2: the exponent's last bit and the mantissa's top 7) decide that for
every value but those whose top 16 bits are a threshold's own. So one translate table of the top
byte gives the bin of every value whose top byte holds no threshold; for each top byte that holds
one, a table of the second byte gives those values' bins, several such top bytes at a time (a sum of
byte lanes in a big int, then one more table: class `Group`); the few values sharing a threshold's
top 16 bits (~1% of a weight matrix's) are binned one by one, with the same expression. A float16 or
a bfloat16 is its top 16 bits: the same tables over its two bytes decide every value's bin (none is
binned one by one). Counting: int.bit_count for up to 8 frequent bins, the bin of 0 as what remains,
and bytes.count for the rest over the piece with every other byte deleted (bytecounts.py).
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_right
from collections import Counter
from functools import lru_cache
from itertools import repeat
from operator import add
from typing import Callable, NamedTuple

from .bytecounts import code_counts, hot_codes, positions
from .stats import Binner

# The code of a value binned one by one (so at most 255 bins take this path).
ONE_BY_ONE = 255


class Format(NamedTuple):
    """A float type binned from its bytes (little-endian)."""
    size: int                                  # bytes per value: the top byte is the last
    float_of: Callable[[int], float]           # a value from its bits
    bits_of: Callable[[float], "int | None"]   # the bits of x, None if x is no value of the type


def _struct_format(code: str, bits: str) -> Format:
    value, unsigned = struct.Struct("<" + code), struct.Struct("<" + bits)

    def float_of(b: int) -> float:
        return value.unpack(unsigned.pack(b))[0]

    def bits_of(x: float) -> int | None:
        try:
            packed = value.pack(x)
        except OverflowError:    # beyond the type's range
            return None
        return unsigned.unpack(packed)[0] if value.unpack(packed)[0] == x else None

    return Format(value.size, float_of, bits_of)


def _bf16_bits(x: float) -> int | None:
    bits = F32.bits_of(x)
    return bits >> 16 if bits is not None and not bits & 0xFFFF else None


F32 = _struct_format("f", "I")
F16 = _struct_format("e", "H")
BF16 = Format(2, lambda b: F32.float_of(b << 16), _bf16_bits)   # a float32's top half


def _key(bits: int, fmt: Format) -> int:
    """The order key of a float's bits: keys sort as the values do (-0.0 just below +0.0)."""
    sign = 1 << (8 * fmt.size - 1)
    return bits ^ sign if bits < sign else 2 * sign - 1 - bits


def _value(key: int, fmt: Format) -> float:
    sign = 1 << (8 * fmt.size - 1)
    return fmt.float_of(key ^ sign if key >= sign else 2 * sign - 1 - key)


class Group(NamedTuple):
    """Top bytes whose values' bins the second byte decides, several at once: code =
    final[first[top] + second[next byte]], a sum of byte lanes that never carries (first: 0 for
    the other values, whose final code is 0; k * classes for the group's k-th top byte; second:
    the class of the next byte, the runs over which each of the group's tables is constant).
    A group of one top byte is cheaper as a mask: final None, code = first[top] & second[next]
    (first: 0xFF for that top byte; second: its table)."""
    first: bytes
    second: bytes
    final: bytes | None
    members: int                    # the top bytes the second byte decides here


class Plan(NamedTuple):
    top: bytes | None               # top byte -> bin, 0 where the next byte decides, or ONE_BY_ONE;
                                    # None where a group gives those codes too (`_fold`)
    groups: tuple[Group, ...]       # the top bytes the next byte decides, as few groups as fit a byte
    edges: tuple[float, ...]        # the thresholds' values: a value's bin is bisect_right(edges, v)
    lo: float                       # the range, for the values binned one by one
    hi: float
    fmt: Format


def _groups(tables: list[tuple[int, bytes]]) -> tuple[Group, ...]:
    """(top byte, next byte -> code) tables joined into groups of as many as a byte's codes allow:
    (1 + tables) * classes <= 256. Each group costs the same few passes over the bytes."""
    groups, members = [], []

    def classes(of):   # the second bytes where any of the tables changes: each class's first
        return [0] + [b for b in range(1, 256) if any(t[b] != t[b - 1] for _, t in of)]

    def close():
        if len(members) == 1:
            byte, table = members[0]
            groups.append(Group(bytes(0xFF if b == byte else 0 for b in range(256)), table, None, 1))
            return
        cuts = classes(members)
        second = bytes(bisect_right(cuts, b) - 1 for b in range(256))
        first, final = bytearray(256), bytearray(256)
        for k, (byte, table) in enumerate(members, 1):
            first[byte] = k * len(cuts)
            final[k * len(cuts):(k + 1) * len(cuts)] = bytes(table[cut] for cut in cuts)
        groups.append(Group(bytes(first), second, bytes(final), len(members)))

    for entry in tables:
        if members and (len(members) + 2) * len(classes([*members, entry])) > 256:
            close()
            members = []
        members.append(entry)
    if members:
        close()
    return tuple(groups)


def _fold(top: bytes, groups: tuple[Group, ...]) -> tuple[Group, ...] | None:
    """`groups` with the top table's codes folded into one of them where its byte has room for a
    block per code (a pass over the bytes less), else None. The codes of the top bytes that no
    group holds are constant per top byte: a block of `final` each, code 0 the zero block."""
    alone = [b for b in range(256) if not any(g.first[b] for g in groups)]   # in no group
    codes = sorted({top[b] for b in alone} - {0})
    for at, group in enumerate(groups):
        if group.final is None:
            continue
        size = len(set(group.second))                     # the classes of the second byte
        blocks = 1 + group.members
        if (blocks + len(codes)) * size > 256:
            continue
        first, final = bytearray(group.first), bytearray(group.final)
        block = {code: blocks + k for k, code in enumerate(codes)}
        for b in alone:
            if top[b]:
                first[b] = block[top[b]] * size
        for code, k in block.items():
            final[k * size:(k + 1) * size] = bytes([code]) * size
        return (*groups[:at], group._replace(first=bytes(first), final=bytes(final)), *groups[at + 1:])
    return None


def plan(binner: Binner, fmt: Format = F32) -> Plan | None:
    """The tables for `binner`'s range over values of `fmt`; None where they cannot be made (a
    range that is not two such values, a constant, more bins than the codes hold)."""
    if binner.constant or binner.bins >= ONE_BY_ONE or not (math.isfinite(binner.lo) and math.isfinite(binner.hi)):
        return None
    lo_s, width, scale = binner._scaled()
    return _plan(binner.lo, binner.hi, binner.bins, lo_s, width, scale, fmt)


@lru_cache(maxsize=64)
def _plan(lo: float, hi: float, bins: int, lo_s: float, width: float, scale: float, fmt: Format) -> Plan | None:
    low_bits, high_bits = fmt.bits_of(lo), fmt.bits_of(hi)
    if low_bits is None or high_bits is None:
        return None
    last = bins - 1
    below_top = 8 * fmt.size - 8        # a key's bits below its top byte
    below_second = below_top - 8        # and below the next byte

    def bin_of(key: int) -> int:   # Binner.add's expression (`within`: never below 0)
        v = _value(key, fmt)
        if scale != 1.0:
            v = v * scale
        index = math.floor((v - lo_s) / width)
        return index if index < last else last

    # the keys a value in [lo, hi] can have: a zero bound takes both zeros
    first = _key(fmt.bits_of(-0.0) if lo == 0.0 else low_bits, fmt)
    end = _key(fmt.bits_of(0.0) if hi == 0.0 else high_bits, fmt)
    thresholds = []
    for k in range(1, bins):
        low, high = thresholds[-1] if thresholds else first, end + 1
        while low < high:
            mid = (low + high) // 2
            if bin_of(mid) >= k:
                high = mid
            else:
                low = mid + 1
        thresholds.append(low)

    def code(start: int, stop: int) -> int:
        """The bin of every key in [start, stop], or ONE_BY_ONE if they differ or fall outside."""
        if start < first or stop > end:     # partly or wholly outside: never seen, unless the file changed
            return ONE_BY_ONE
        k = bisect_right(thresholds, start)
        return k if bisect_right(thresholds, stop) == k else ONE_BY_ONE

    top, second = bytearray(256), []
    for byte in range(256):
        high = (byte | 0x80) if byte < 0x80 else 0xFF - byte        # the key's top byte
        start, stop = high << below_top, (high + 1 << below_top) - 1
        top[byte] = code(start, stop)
        if top[byte] == ONE_BY_ONE and first <= stop and start <= end:
            table = bytes(code(key, key | (1 << below_second) - 1) for key in
                          ((high << 8 | (b if byte < 0x80 else 0xFF - b)) << below_second for b in range(256)))
            if table.count(ONE_BY_ONE) < 256:     # else leave the whole top byte to one by one
                top[byte] = 0
                second.append((byte, table))
    # bisect on the values gives the bins the keys do: a threshold is never +0.0 (both zeros
    # share a bin), and one at -0.0 counts both zeros as at or above it, as they are
    groups = _groups(second)
    folded = _fold(bytes(top), groups)
    return Plan(None if folded else bytes(top), folded or groups, tuple(_value(t, fmt) for t in thresholds), lo, hi, fmt)




def _middle_bin(found: Plan, bins: int) -> int:
    """The bin of 0.0 if the range holds it (weights: the fullest bin), else the middle one."""
    if found.lo <= 0.0 <= found.hi:
        return bisect_right(found.edges, 0.0)
    return bins // 2


# Values binned at a time: the codes and the big ints of a piece stay in the CPU's cache (~15%
# faster than a million at a time: bench/exact_stats.py).
PIECE_ELEMS = 1 << 16


def bin_counts(binner: Binner, found: Plan, data: bytes) -> list[int] | None:
    """Counts per bin of the values of found.fmt that `data` holds (little-endian), as binner.add
    would make them; None if one lies outside the range (the file changed between the passes)."""
    counts, where = [0] * binner.bins, []
    # one bin fewer counted: the one the middle of the range falls in, taken as what remains
    # (frequent bytes are the slowest to count: each match a branch mispredicted)
    middle = _middle_bin(found, binner.bins)
    wanted, hot = [k for k in range(binner.bins) if k != middle], None
    size = found.fmt.size
    step = size * PIECE_ELEMS
    for start in range(0, len(data), step):
        stop = min(start + step, len(data))
        codes = _codes(found, data[start + size - 1:stop:size], data[start + size - 2:stop:size])
        hot = hot or hot_codes(codes, wanted)            # the first piece's frequent codes serve all
        piece = code_counts(codes, wanted, binner.bins, hot)
        one_by_one = positions(codes, ONE_BY_ONE, start // size)
        where += one_by_one
        piece[middle] = len(codes) - len(one_by_one) - sum(piece)
        counts = list(map(add, counts, piece))
    if where:
        values = (list(map(memoryview(data).cast("f").__getitem__, where)) if found.fmt is F32 else
                  [found.fmt.float_of(int.from_bytes(data[size * i:size * (i + 1)], "little"))
                   for i in where])   # F16, BF16: values outside the range
        if min(values) < found.lo or max(values) > found.hi:
            return None
        for k, m in Counter(map(bisect_right, repeat(found.edges), values)).items():
            counts[k] += m
    return counts


def _codes(found: Plan, top: bytes, second: bytes) -> bytes:
    """Each value's bin, or ONE_BY_ONE, from its top byte and the next."""
    if not found.groups:
        return top.translate(found.top)
    n = len(top)
    joined = int.from_bytes(top.translate(found.top), "little") if found.top is not None else 0
    for group in found.groups:
        first = int.from_bytes(top.translate(group.first), "little")
        if group.final is None:
            joined |= first & int.from_bytes(second.translate(group.second), "little")
            continue
        lanes = (first + int.from_bytes(second.translate(group.second), "little")).to_bytes(n, "little")
        joined |= int.from_bytes(lanes.translate(group.final), "little")
    return joined.to_bytes(n, "little")
