"""Cosine similarity of every pair of many long vectors (expert signatures), in pure Python.

Comparing 64 signatures of 8,192 values is 2 million products per pair-row set, 17 million per
layer: ~1 s per layer in Pyodide with math.sumprod (whose exact float path is slow in wasm), 30 s
for a 32-layer model. Here the products are done on integers, 64 at a time:

  * each vector is scaled so that its largest magnitude is 2**(BITS-1) - 1, rounded to integers
    and offset by 2**(BITS-1) so that every value is non-negative (fixed point: the relative
    error of a value is at most 2**-BITS of the vector's largest one, so a similarity moves by
    ~1e-7 at most, far below the two decimals shown and the thresholds compared);
  * the values of all vectors at position k are packed into one integer, 64 bits per vector;
  * vector i's dot products with all vectors are then one `sum(map(mul, a_i, packed))`, a C loop
    of small-by-large integer products whose 64-bit fields never carry into each other (field
    sums stay below LENGTH * 2**(2 * BITS) < 2**64).

Integer arithmetic is exact, so CPython and Pyodide give the same similarities bit for bit.
"""

from __future__ import annotations

import math
import operator
import struct
from typing import Iterator

FIELD_BITS = 64
MAX_BITS = 24


def cosine_rows(vectors: list[list[float]]) -> Iterator[list[list[float]]]:
    """Yields the similarity matrix after each row is complete (the last yield is the whole
    matrix), so that callers can stop between rows. Vectors of unequal length are zero-padded."""
    n = len(vectors)
    if not n:
        return
    length = max(map(len, vectors))
    bits = min(MAX_BITS, (FIELD_BITS - length.bit_length()) // 2)
    half = 1 << (bits - 1)
    quantized, sums, squares = [], [], []
    rounding = half + 0.5     # int() of a non-negative float is its floor: this rounds half up
    for v in vectors:
        peak = max(map(abs, v), default=0.0)
        scale = (half - 1) / peak if peak else 0.0
        q = list(map(int, map(rounding.__add__, map(scale.__mul__, v))))
        q += [half] * (length - len(q))
        total = sum(q)
        # the centred values a = q - half: sum(a) and sum(a * a), from sums over q
        sums.append(total - length * half)
        squares.append(sum(map(operator.mul, q, q)) - 2 * half * total + length * half * half)
        quantized.append(q)
    layout = struct.Struct(f"<{n}Q")
    packed = [int.from_bytes(layout.pack(*column), "little") for column in zip(*quantized)]
    offset = length * half * half
    matrix = [[1.0] * n for _ in range(n)]
    for i in range(n):
        fields = layout.unpack(sum(map(operator.mul, quantized[i], packed)).to_bytes(8 * n, "little"))
        for j in range(i + 1, n):
            # sum((a + h)(b + h)) = sum(ab) + h*sum(a) + h*sum(b) + length*h*h
            dot = fields[j] - half * (sums[i] + sums[j]) - offset
            matrix[i][j] = matrix[j][i] = _cosine(dot, squares[i], squares[j])
        yield matrix


def _cosine(dot: int, a: int, b: int) -> float:
    if not a or not b:
        return 0.0
    if dot * dot == a * b:      # parallel vectors: exactly +-1, not 1 - 2e-16
        return 1.0 if dot > 0 else -1.0
    return max(-1.0, min(1.0, dot / math.sqrt(a * b)))
