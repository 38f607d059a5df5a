"""How many times each byte value occurs in a bytes string, and where (`positions`), at C speed:
the exact pass's histograms turn each value into its bin's code (one byte each; rawstats' fast
paths) and count the codes; its statistics look at the few values that flag bytes single out.

bytes.count costs a pass over the string per code, and it is slowest for the frequent codes (a
mispredicted branch per match). So up to 8 frequent codes are counted at once: a table sets bit j
of a byte for the j-th, and int.bit_count of the bytes (as an int) masked to bit j counts it, at
the same speed however many match; the rare ones (a weight matrix's tails) are counted over the
string with every other byte deleted first, one pass instead of one per code.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import accumulate, repeat
from operator import add
from typing import NamedTuple

# A code is frequent from this share of every SAMPLE_STEP-th byte on.
HOT_SHARE = 1 / 50
SAMPLE_STEP = 61
# From this many rare codes on, deleting every other byte first (~1.3 ns a byte) costs less than
# counting each code over the whole string (~0.4 ns a byte per code).
SQUEEZE_FROM = 4
# counts_in_pieces' pieces: the codes and the big ints of a piece stay in the CPU's cache.
PIECE = 1 << 16


class Hot(NamedTuple):
    codes: list[int]          # the frequent codes, counted by bit_count
    table: bytes              # code -> its bit (0 for the others)


def hot_codes(codes: bytes, wanted: list[int]) -> Hot:
    """Up to 8 of the codes wanted that are frequent among every SAMPLE_STEP-th of `codes`."""
    sample = codes[::SAMPLE_STEP]
    share = {k: sample.count(k) / max(1, len(sample)) for k in wanted}
    hot = sorted((k for k in wanted if share[k] >= HOT_SHARE), key=share.get, reverse=True)[:8]
    if len(hot) < 3:             # the table and the int cost about what three counts save
        hot = []
    table = bytearray(256)
    for j, k in enumerate(hot):
        table[k] = 1 << j
    return Hot(hot, bytes(table))


def code_counts(codes: bytes, wanted: list[int], size: int, hot: Hot) -> list[int]:
    """codes.count(k) for the codes k wanted (0 for the others), in a list of `size`."""
    counts = [0] * size
    if hot.codes:
        flags = int.from_bytes(codes.translate(hot.table), "little")
        for k, mask in zip(hot.codes, _bit_masks(len(codes))):
            counts[k] = (flags & mask).bit_count()
    rare = [k for k in wanted if k not in hot.codes]
    if len(rare) > SQUEEZE_FROM:
        codes = codes.translate(None, _others(tuple(rare)))
    for k in rare:
        counts[k] = codes.count(k)
    return counts


def counts_in_pieces(codes: bytes, wanted: list[int], size: int) -> list[int]:
    """`code_counts` of the whole string, PIECE bytes at a time (the first piece's frequent codes
    serve the others)."""
    total, hot = [0] * size, None
    for start in range(0, len(codes), PIECE):
        piece = codes[start:start + PIECE]
        hot = hot or hot_codes(piece, wanted)
        total = list(map(add, total, code_counts(piece, wanted, size, hot)))
    return total


@lru_cache(maxsize=2)        # a tensor's pieces: the whole ones and the last
def _bit_masks(n: int) -> tuple[int, ...]:
    return tuple(int.from_bytes(bytes([1 << j]) * n, "little") for j in range(8))


@lru_cache(maxsize=8)
def _others(kept: tuple[int, ...]) -> bytes:
    """Every byte but `kept`: translate's delete argument that keeps only those."""
    return bytes(b for b in range(256) if b not in kept)


def positions(data: bytes, byte: int, first: int = 0) -> list[int]:
    """first + the position of each `byte` in `data`, in order: the ends of the runs between them,
    at C speed (a find per match costs about twice as much: bench/exact_stats.py)."""
    runs = data.split(_SINGLE[byte])
    runs.pop()                            # the run after the last one
    ends = list(accumulate(map(add, map(len, runs), repeat(1)), initial=first - 1))
    del ends[0]
    return ends


_SINGLE = tuple(bytes([b]) for b in range(256))
