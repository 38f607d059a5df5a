"""Exact statistics of a chunk of Q4_K blocks from its codes (rawstats.py's contract: the numbers
`compute(decode_window(...), percentiles=False)` gives, bit for bit, or None).

block_q4_K (dtypes/ggml/kquants.py): per 32-element sub-block x = dsc * q - dm, with dsc = d * sc
and dm = dmin * m (f16 times 6 bits: exact doubles) and q a 4-bit code; the decoder rounds each x
to float32. That rounding changes nothing when every code's x fits in 24 bits, which the
exponents of d and dmin decide per block (`_exact_blocks`); then x is the double dsc * q - dm
itself and a sub-block's sums are exact products of its code sums Q1 = sum(q), Q2 = sum(q*q):

    sum(x) = dsc*Q1 - 32*dm          sum(x*x) = dsc*dsc*Q2 - 2*dsc*dm*Q1 + 32*dm*dm

(each product has at most 47 significant bits), so one fsum over those terms is the fsum over the
elements. The code sums come from big-int lanes (`_run_sums`, `_square_sums`), no float is made per element.
The extremes come from the few sub-blocks whose code range could hold them, the zeros and
|x| < 1e-6 from the few whose nearest code to dm / dsc is that close. Blocks whose float32
rounding is not exact are decoded and their values enter the same sums.

The histogram (`q4_k_add`) leaves no block out: the bins of a sub-block's 16 possible values
(rounded to float32 where the decoder's rounding is not exact) go into a translate table, and
the elements' codes are translated to those bins. The bins come from fixed-point lanes of one big
int (`_lane_tables`): a float is made only for the entries within 2**-8 of a bin edge, the
sub-blocks that reach outside [lo, hi] and the blocks float32 rounds. The scales and codes are
those the statistics' pass decoded, where the exact pass kept them for it (`Decoded`: ~8% of
the whole pass on llama.cpp-style blocks, bench/exact_stats.py).
"""

from __future__ import annotations

import math
from array import array
from math import remainder
from functools import lru_cache
from itertools import compress, repeat
from operator import add, and_, gt, lt, mul, not_, or_, sub
from typing import NamedTuple

# imported by rawstats only where a Q4_K block is read: a safetensors file never loads the
# ggml codecs (tests/test_lazy_imports.py)
from ..dtypes.ggml.columns import nibbles, repeat_each
from ..dtypes.ggml.kquants import Q4_K, _k4_scales, decode_q4_k
from .bytecounts import counts_in_pieces
from .stats import NEAR_ZERO, Binner, Stats, _counted, from_block_sums

SUB = 32            # elements per sub-block
BLOCK_SUBS = 8      # sub-blocks per block (QK_K = 256)
# x = dsc * q - dm is exact in float32 when dmin's exponent minus d's lies in this range (below)
EXACT_SPREAD = range(-3, 7)
# Below this |dsc| two codes can both lie within NEAR_ZERO of 0, and dm / dsc is not to be trusted.
TINY_STEP = 4 * NEAR_ZERO

_SQUARE = bytes((q * q) & 0xFF for q in range(256))   # q*q <= 225, codes 0..15
_F16_SPECIAL = 0x1F   # the exponent field of Inf and NaN


def _exact_blocks(d: bytes, dmin: bytes) -> list[bool] | None:
    """Per block (d and dmin: the blocks' f16 fields): is every x exact in float32? None if a
    scale is Inf or NaN.

    d = D * 2**ed and dmin = M * 2**em with integers D, M <= 2047 (ed = exponent field - 25, a
    subnormal's field counting as 1), so |x| <= 2047*63*15 * 2**ed + 2047*63 * 2**em, a multiple
    of 2**min(ed, em): an integer times that of at most 2**24 (so exact in float32) when
    em - ed = k lies in EXACT_SPREAD: 1934415 + 128961 * 2**k <= 2**24 for 0 <= k <= 6, and
    1934415 * 2**-k + 128961 <= 2**24 for -3 <= k < 0. A zero scale drops its term."""
    if d[1::2].translate(_SPECIAL_HIGH).count(1) or dmin[1::2].translate(_SPECIAL_HIGH).count(1):
        return None
    spread = map(sub, map(add, dmin[1::2].translate(_EXPONENT), repeat(_SPREAD_AT)), d[1::2].translate(_EXPONENT))
    in_range = map(_IN_SPREAD.__getitem__, spread)
    # a zero d or dmin (either sign): its magnitude bits are 0
    zero = map(not_, map(mul, map(and_, memoryview(d).cast("H"), repeat(0x7FFF)),
                         map(and_, memoryview(dmin).cast("H"), repeat(0x7FFF))))
    return list(map(or_, in_range, zero))


# by an f16's high byte: its exponent field (a subnormal's counting as 1), Inf or NaN (field 31)
_EXPONENT = bytes(max((b >> 2) & 0x1F, 1) for b in range(256))
_SPECIAL_HIGH = bytes(1 if (b >> 2) & 0x1F == _F16_SPECIAL else 0 for b in range(256))
_SPREAD_AT = 32     # em - ed + 32: 1 .. 63
_IN_SPREAD = tuple(k - _SPREAD_AT in EXACT_SPREAD for k in range(64))


def _run_sums(codes: bytes) -> list[int]:
    """The sum of each run of SUB bytes (values 0..15), through byte lanes of one big int: after
    adding itself shifted by 1, 2, 4 and 8 bytes, lane i holds bytes i..i+15 (at most 240, so no
    lane carries into the next)."""
    x = int.from_bytes(codes, "little")
    for shift in (8, 16, 32, 64):
        x += x >> shift
    halves = x.to_bytes(len(codes), "little")[::16]
    return list(map(add, halves[0::2], halves[1::2]))


def _square_sums(codes: bytes) -> list[int]:
    """The sum of q*q over each run of SUB codes: the squares (at most 225) as 16-bit lanes, even
    and odd bytes added, then adding the int shifted by 1, 2, 4 and 8 lanes leaves in lane j the
    sum of lanes j .. j + 15 (at most 32 * 225: no carry into the next), a run's at lane 16 * s."""
    x = int.from_bytes(codes.translate(_SQUARE), "little")
    mask = _low_bytes_mask(len(codes))
    x = (x & mask) + ((x >> 8) & mask)
    for shift in (16, 32, 64, 128):
        x += x >> shift
    return memoryview(x.to_bytes(len(codes), "little")).cast("H")[::SUB // 2].tolist()


@lru_cache(maxsize=8)
def _low_bytes_mask(size: int) -> int:
    return int.from_bytes(b"\xff\x00" * (size // 2), "little")


def _extremes(blocks: "SubBlocks") -> tuple[float, float]:
    """(min, max) of dsc * q - dm over every sub-block's codes: a sub-block's values lie between
    its code 0 and code 15 values (-dm and x15), so the sub-block with the best of those is
    looked at first, then (unless it holds that end) only the sub-blocks whose ends could beat
    what it holds."""
    dsc, dm, codes, x15, ends = blocks
    out = []
    for highest in (False, True):
        pick, beats = (max, gt) if highest else (min, lt)

        def at(s: int) -> float:
            c, step = codes[s * SUB:(s + 1) * SUB], dsc[s]
            code = (max(c) if step > 0 else min(c)) if highest else (min(c) if step > 0 else max(c))
            return step * code - dm[s]
        end15, end0 = (ends.high15, -ends.low_dm) if highest else (ends.low15, -ends.high_dm)
        end = pick(end15, end0)
        best = at(x15.index(end15) if end == end15 else dm.index(-end0))
        if best == end:     # the best end of any sub-block is held: nothing can beat it
            out.append(best)
            continue
        # x0 = -dm beats best exactly when dm is beyond -best the other way
        others = {*compress(range(len(dsc)), map(beats, x15, repeat(best))),
                  *compress(range(len(dsc)), map(lt if highest else gt, dm, repeat(-best)))}
        out.append(pick([best, *map(at, others)]))
    return out[0], out[1]


def _near(codes: bytes, dsc: list[float], dm: list[float]) -> tuple[int, int]:
    """(elements == 0, elements with |x| < NEAR_ZERO). remainder(dm, dsc) is dm less the
    nearest multiple of dsc, exactly (IEEE remainder), so no code's x = dsc * q - dm is that
    near unless it is: only those sub-blocks have their codes looked at. Where |dsc| >= TINY_STEP
    at most one code is that near, the integer nearest dm / dsc (within 1/4 of it); below, every
    code is tried. A zero step (scale 0) divides as Inf: remainder(dm, inf) is dm, every code's -x."""
    steps, at = dsc, -1
    for _ in range(dsc.count(0.0)):     # -0.0 too
        if steps is dsc:
            steps = list(dsc)
        at = steps.index(0.0, at + 1)
        steps[at] = math.inf
    subs = range(len(dsc))
    looked = compress(subs, map(lt, map(abs, map(remainder, dm, steps)), repeat(NEAR_ZERO)))
    zeros = near = 0
    for s in looked:
        step, low = dsc[s], dm[s]
        if not -TINY_STEP < step < TINY_STEP:
            candidates = (min(15, max(0, round(low / step))),)
        else:
            candidates = range(16) if step else (0,)   # a zero step (scale 0): every code gives -dm
        for q in candidates:
            x = step * q - low
            if -NEAR_ZERO < x < NEAR_ZERO:
                k = codes.count(q, s * SUB, (s + 1) * SUB) if step else SUB
                near += k
                zeros += k if x == 0.0 else 0
    return zeros, near


def _sub_blocks(data: bytes) -> tuple[list[float], list[float], bytes]:
    """(dsc, dm) per sub-block, as the decoder computes them, and the codes in element order."""
    dsc, dm = _k4_scales(Q4_K, data)
    return dsc, dm, nibbles(Q4_K.col(data, "qs"), SUB)


class Ends(NamedTuple):
    """The extremes of the sub-blocks' code 0 and code 15 values (-dm, x15), which bound all
    their values: where both passes look first (`_extremes`, `_lane_tables`)."""
    low_dm: float
    high_dm: float
    low15: float
    high15: float


class SubBlocks(NamedTuple):
    """Sub-blocks' scales (dsc, dm: x = dsc * q - dm), codes in element order, code 15 values and
    Ends: made once for both passes (~2% of Q4_K's exact pass, bench/exact_stats.py)."""
    dsc: list[float]
    dm: list[float]
    codes: bytes
    x15: list[float]
    ends: Ends | None          # None for no sub-blocks


def sub_blocks(dsc: list[float], dm: list[float], codes: bytes) -> SubBlocks:
    x15 = list(map(sub, map(mul, dsc, repeat(15.0)), dm))
    return SubBlocks(dsc, dm, codes, x15, Ends(min(dm), max(dm), min(x15), max(x15)) if dsc else None)


class Decoded(NamedTuple):
    """A chunk's blocks as the statistics' pass decoded them, kept for its histogram's pass
    (`kept`: exact.py keeps a quantised chunk's bytes between the passes): which blocks float32
    rounds nothing in, and the sub-blocks (~3 bytes per element: as arrays of doubles half
    that, but converting them back costs what keeping them saves)."""
    data: bytes
    exact: list[bool]
    subs: SubBlocks


# The key of a chunk's Decoded in the dict exact.py hands both passes of that chunk.
KEPT_KEY = "q4_k"


def _decoded(data: bytes) -> Decoded | None:
    """None if a scale is Inf or NaN (the element path then counts the non-finite values)."""
    exact = _exact_blocks(Q4_K.col(data, "d"), Q4_K.col(data, "dmin"))
    if exact is None:
        return None
    return Decoded(data, exact, sub_blocks(*_sub_blocks(data)))


def _exact_part(decoded: Decoded) -> tuple[SubBlocks, bytes]:
    """The sub-blocks of the exact blocks, and the bytes of the others."""
    if all(decoded.exact):
        return decoded.subs, b""
    per_sub = list(repeat_each(decoded.exact, BLOCK_SUBS))
    elems, size, data, codes = BLOCK_SUBS * SUB, Q4_K.size, decoded.data, decoded.subs.codes
    return (sub_blocks(list(compress(decoded.subs.dsc, per_sub)), list(compress(decoded.subs.dm, per_sub)),
                       b"".join(compress([codes[at:at + elems] for at in range(0, len(codes), elems)], decoded.exact))),
            b"".join(compress([data[at:at + size] for at in range(0, len(data), size)], map(not_, decoded.exact))))


def q4_k_stats(data: bytes, kept: dict | None = None) -> Stats | None:
    """`kept`, a dict, receives the chunk's Decoded for q4_k_add (the same bytes, next pass)."""
    n = len(data) // Q4_K.size * BLOCK_SUBS * SUB
    decoded = _decoded(data)
    if decoded is None:
        return None
    if kept is not None:
        kept[KEPT_KEY] = decoded
    part, rounded = _exact_part(decoded)
    dsc, dm, codes = part.dsc, part.dm, part.codes
    rest = decode_q4_k(rounded) if rounded else []   # the values of the blocks float32 rounds
    sums, squares, lows, highs = list(rest), list(map(mul, rest, rest)), [], []
    zeros = near = 0
    if rest:
        lows.append(min(rest))
        highs.append(max(rest))
        zeros = rest.count(0.0)
        near = sum(map(lt, map(abs, rest), repeat(NEAR_ZERO)))
    if codes:
        q1 = _run_sums(codes)
        q2 = _square_sums(codes)
        # a sub-block's sum(x): 32 multiples of 2**min(ed, em) of at most 2**24 each (_exact_blocks),
        # so dsc*Q1 - 32*dm is exact as one double
        sums += map(sub, map(mul, dsc, q1), map(mul, dm, repeat(32.0)))
        squares += map(mul, map(mul, dsc, dsc), q2)
        squares += map(mul, map(mul, dsc, map(mul, dm, repeat(-2.0))), q1)
        squares += map(mul, map(mul, dm, dm), repeat(32.0))
        low, high = _extremes(part)
        lows.append(low)
        highs.append(high)
        z, m = _near(codes, dsc, dm)
        zeros, near = zeros + z, near + m
    return from_block_sums(n, zeros, near, lows, highs, sums, squares)


def q4_k_add(binner: Binner, data: bytes, kept: dict | None = None) -> bool:
    """binner.add(<the chunk's values>, within=True) with a float made per (sub-block, code)
    rather than per element: each of a sub-block's 16 possible values (rounded to float32 as the
    decoder rounds it, in the blocks where that is not exact) is binned by Binner's formula into a
    byte of a translate table shared by 16 sub-blocks, and each element's code is tagged with its
    sub-block's place among the 16 (`_tagged`). A value outside [lo, hi] (a code no element has,
    unless the file changed between the passes) is 255. The blocks are those q4_k_stats decoded
    where `kept` holds them for these bytes (taken out: binned once), else decoded here."""
    if binner.half:    # a range wider than the largest float: never |x| < 2**27 here
        return False
    if binner.bins > MAX_LANE_BINS:   # a bin index must fit a byte beside 255 (and the lanes)
        return False
    found = kept.pop(KEPT_KEY, None) if kept else None
    decoded = found if found is not None and found.data is data else _decoded(data)
    if decoded is None:
        return False   # an Inf or NaN scale: the element path filters the non-finite values
    if binner.constant:
        binner.counts[0] += len(data) // Q4_K.size * BLOCK_SUBS * SUB * binner.weight
        return True
    exact, (dsc, dm, codes) = decoded.exact, decoded.subs[:3]
    lo, hi, width, floor = binner.lo, binner.hi, binner.width, math.floor
    codes16 = range(16)
    # the bin of x for (sub-block s, code q) at 16 * s + q
    tables = _lane_tables(decoded.subs, lo, hi, width, binner.bins)
    if tables is None:
        tables = bytearray([floor((x - lo) / width) if lo <= x <= hi else 255
                            for a, b in zip(dsc, dm) for q in codes16 for x in (a * q - b,)])
    per_block = BLOCK_SUBS * 16
    for at in compress(range(0, len(tables), per_block), map(not_, exact)):   # float32 rounds these
        s = at // 16
        rounded = array("f", [a * q - b for a, b in zip(dsc[s:s + BLOCK_SUBS], dm[s:s + BLOCK_SUBS])
                              for q in codes16])
        tables[at:at + per_block] = bytes([floor((x - lo) / width) if lo <= x <= hi else 255 for x in rounded])
    last = binner.bins - 1
    # the top edge's index (bins) into the last bin, as Binner folds it; then the last bin's count
    # is what the others and the outside values (255, none unless the file changed) leave
    tables = bytearray(tables.translate(_fold(binner.bins)))
    outside_tables = 255 in tables
    tables += b"\xff" * (-len(tables) % 256)
    tagged = _tagged(codes)
    group = 16 * SUB
    joined = b"".join([tagged[at:at + group].translate(tables[at // 2:at // 2 + 256])
                       for at in range(0, len(tagged), group)])
    if outside_tables and joined.count(255):
        return False
    found = counts_in_pieces(joined, list(range(last)), last)
    found.append(len(joined) - sum(found))
    for index, k in enumerate(found):
        binner.counts[index] += k * binner.weight
    return True


@lru_cache(maxsize=8)
def _fold(bins: int) -> bytes:
    return bytes(bins - 1 if b == bins else b for b in range(256))


# Fixed-point bin positions (`_lane_tables`): t = (x - lo) / width in units of 2**-FRACTION, in
# 32-bit lanes; an entry whose fraction lies within 2**-8 of a whole bin (byte 2 of its lane 0 or
# 255) is computed again as Binner computes it: the fixed-point value is within 16 units of
# that double (rounding C and A: 0.5 + 15 * 0.5 = 8; the doubles' own errors are far smaller), so
# every other entry's bin is that of the double.
FRACTION = 24
_BIAS = 1 << FRACTION     # one bin up: a lane never goes below 0 (no borrow from the next)
_MINUS_ONE = bytes((b - 1) & 0xFF for b in range(256))
_NEAR_EDGE = bytes(1 if b in (0, 255) else 0 for b in range(256))
# above this many bins a lane's integer part would not fit its top byte
MAX_LANE_BINS = 200
# where more entries than 1 in this many lie near a bin edge, the plain per-entry formula is cheaper
NEAR_EDGE_SHARE = 8
# A double below 2**51 in magnitude plus this one has its last bit worth 1: the sum's low 32
# bits are the number rounded to an integer (two's complement if negative).
_ROUNDER = 1.5 * 2.0 ** 52
_NEGATIVE_TOP = bytes(1 if b >= 0x80 else 0 for b in range(256))


def _rounded_lanes(doubles) -> array:
    """Each double below 2**51 in magnitude rounded to an integer, as 32-bit lanes (its low
    bits), at C speed: the low half of each double plus _ROUNDER (an int() per value made the
    lanes of a 1M-element chunk in 6.9 ms, this in 5.0)."""
    return array("I", array("d", map(add, doubles, repeat(_ROUNDER))).tobytes())[0::2]


def _lane_tables(blocks: SubBlocks, lo: float, hi: float, width: float, bins: int) -> bytearray | None:
    """The bin index of dsc[s] * q - dm[s] for every (sub-block s, code q), at 16 * s + q, as
    Binner.add computes it (floor((x - lo) / width), 255 outside [lo, hi]), with few floats:
    t(q) = C + q * A per sub-block in fixed point (C = t(0) and A = dsc / width scaled), all
    sub-blocks' lanes in one big int, advanced by A sixteen times; only the entries near a bin
    edge and the sub-blocks whose codes 0 or 15 lie outside [lo, hi] are computed one by one.
    None where the lanes cannot hold the range (very many bins, or a bin too narrow for them)."""
    if bins > MAX_LANE_BINS:
        return None
    dsc, dm, _, x15, ends = blocks
    subs, unit = len(dsc), float(1 << FRACTION) / width
    if not math.isfinite(unit):      # a bin too narrow for the fixed point
        return None
    # C and A only have to be within a unit of t(0) and of the step (the margin above): C =
    # (x0 - (lo - width)) * 2**24 / width (the bias folded in). Within [lo, hi] both are far
    # below 2**51; a sub-block beyond it may have any lanes here, as it gets others just below.
    start = _rounded_lanes(map(mul, map(add, dm, repeat(lo - width)), repeat(-unit)))
    step = _rounded_lanes(map(mul, dsc, repeat(unit)))
    # a sub-block whose code 0 or 15 lies outside [lo, hi] (its lanes could leave their 32 bits):
    # its lanes hold the bias alone, whose fraction byte 0 has every entry computed again
    if not (-hi <= ends.low_dm and ends.high_dm <= -lo and lo <= ends.low15 and ends.high15 <= hi):
        for s in {*compress(range(subs), map(gt, dm, repeat(-lo))), *compress(range(subs), map(lt, dm, repeat(-hi))),
                  *compress(range(subs), map(lt, x15, repeat(lo))), *compress(range(subs), map(gt, x15, repeat(hi)))}:
            start[s], step[s] = _BIAS, 0
    lanes = int.from_bytes(start.tobytes(), "little")
    # the steps as signed 32-bit lanes: two's complement lanes, less the borrow each negative one
    # owes (a 1 in the next lane's lowest byte: by the sign of its own top byte)
    step_bytes, borrows = step.tobytes(), bytearray(4 * subs)
    borrows[0::4] = step_bytes[3::4].translate(_NEGATIVE_TOP)
    advance = int.from_bytes(step_bytes, "little") - (int.from_bytes(borrows, "little") << 32)
    whole, fraction = bytearray(16 * subs), bytearray(16 * subs)
    for q in range(16):
        raw = lanes.to_bytes(4 * subs, "little")
        whole[q::16], fraction[q::16] = raw[3::4], raw[2::4]
        lanes += advance
    tables = bytearray(whole.translate(_MINUS_ONE))
    # the entries to compute one by one: near an edge, and every entry of an outside sub-block
    # (its lanes hold t = 0 + the bias, fraction byte 0: near an edge)
    near = fraction.translate(_NEAR_EDGE)
    if near.count(1) * NEAR_EDGE_SHARE > len(near):
        return None
    floor, at = math.floor, near.find(1)
    while at >= 0:
        s, q = divmod(at, 16)
        x = dsc[s] * q - dm[s]
        tables[at] = floor((x - lo) / width) if lo <= x <= hi else 255
        at = near.find(1, at + 1)
    return tables


def _tagged(codes: bytes) -> bytes:
    """Each code (0..15) with its sub-block's place among 16 consecutive ones in the high nibble."""
    tags = _tags(len(codes) // SUB)
    return (int.from_bytes(codes, "little") | int.from_bytes(tags, "little")).to_bytes(len(codes), "little")


@lru_cache(maxsize=4)
def _tags(subs: int) -> bytes:
    unit = b"".join(bytes([k << 4]) * SUB for k in range(16))
    return (unit * (subs // 16 + 1))[:subs * SUB]
