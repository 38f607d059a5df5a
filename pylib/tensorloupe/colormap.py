"""Values -> RGBA pixels for the heatmap: a diverging colormap centred on zero (pure Python).

Weights are signed and centred near zero, so the colour says the sign and the lightness says the
size: -scale is deep blue, 0 is near-white, +scale is deep red (ColorBrewer's RdBu, reversed).
NaN, +Inf and -Inf get colours of their own that the gradient never uses, so a single bad value
stands out in a million good ones.

Speed matters in the browser (pure Python runs 2-3x slower in Pyodide): each value becomes one
palette index byte in a single list comprehension, then the R, G, B planes are produced by
`bytes.translate` through 256-byte lookup tables and interleaved with slice assignment, all at C
speed. 256 x 256 values take ~20 ms in CPython.
"""

from __future__ import annotations

import math

# Palette indices 0..GRADIENT_LEVELS-1 are the gradient; the rest mark non-finite values.
GRADIENT_LEVELS = 253
CENTRE = GRADIENT_LEVELS // 2           # index of exactly zero: 126
NAN_INDEX, POSINF_INDEX, NEGINF_INDEX = 253, 254, 255

# ColorBrewer RdBu (11 classes), from -1 (blue) through 0 (near-white) to +1 (red).
ANCHORS = ((0x05, 0x30, 0x61), (0x21, 0x66, 0xac), (0x43, 0x93, 0xc3), (0x92, 0xc5, 0xde),
           (0xd1, 0xe5, 0xf0), (0xf7, 0xf7, 0xf7), (0xfd, 0xdb, 0xc7), (0xf4, 0xa5, 0x82),
           (0xd6, 0x60, 0x4d), (0xb2, 0x18, 0x2b), (0x67, 0x00, 0x1f))
SPECIAL = {NAN_INDEX: (0xff, 0x00, 0xff),      # NaN: magenta
           POSINF_INDEX: (0xff, 0xd7, 0x00),   # +Inf: gold
           NEGINF_INDEX: (0x00, 0xe5, 0xff)}   # -Inf: cyan


def _palette() -> list[tuple[int, int, int]]:
    colours = []
    segments = len(ANCHORS) - 1
    for i in range(GRADIENT_LEVELS):
        position = i / (GRADIENT_LEVELS - 1) * segments      # 0 .. segments
        k = min(int(position), segments - 1)
        t = position - k
        a, b = ANCHORS[k], ANCHORS[k + 1]
        colours.append(tuple(round(a[c] + (b[c] - a[c]) * t) for c in range(3)))
    for index in sorted(SPECIAL):
        colours.append(SPECIAL[index])
    return colours


PALETTE: list[tuple[int, int, int]] = _palette()
# bytes.translate tables: palette index -> one colour channel.
RED, GREEN, BLUE = (bytes(colour[c] for colour in PALETTE) for c in range(3))


def indices(values, scale: float) -> bytes:
    """One palette index per value: the gradient for finite values, special indices otherwise.

    `scale` is the magnitude shown at the ends of the gradient (values beyond it are clamped);
    with a zero or non-finite scale every finite value gets the colour of zero.
    """
    values = values if isinstance(values, list) else list(values)
    if set(map(type, values)) != {float}:   # (the type check runs at C speed)
        values = [v if isinstance(v, float) else _as_float(v) for v in values]
    if not values:
        return b""
    k = CENTRE / scale if (scale > 0 and math.isfinite(scale)) else 0.0
    offset = CENTRE + 0.5
    if math.isfinite(sum(values)):  # any NaN or Inf (or an overflow) takes the careful path
        lo, hi = min(values), max(values)
        if lo * k + offset >= 0 and hi * k + offset < GRADIENT_LEVELS:
            # int() truncates toward zero, which is floor here because every argument is >= 0.
            return bytes([int(v * k + offset) for v in values])
        # Some beyond the scale: clamped inline (a function call per value costs 1.6x in wasm).
        top, levels = GRADIENT_LEVELS - 1, GRADIENT_LEVELS
        return bytes([0 if x < 0 else top if x >= levels else int(x)
                      for x in [v * k + offset for v in values]])
    return bytes([_index(v, k, offset) for v in values])


def _index(v: float, k: float, offset: float) -> int:
    if v != v:
        return NAN_INDEX
    if v == math.inf:
        return POSINF_INDEX
    if v == -math.inf:
        return NEGINF_INDEX
    x = v * k + offset
    return 0 if x < 0 else GRADIENT_LEVELS - 1 if x >= GRADIENT_LEVELS else int(x)


def _as_float(v) -> float:
    if isinstance(v, complex):
        return abs(v)
    return float(v)


def rgba(values, scale: float) -> bytearray:
    """RGBA bytes (4 per value, opaque) for `values` coloured against +-`scale`."""
    index = indices(values, scale)
    n = len(index)
    out = bytearray(4 * n)
    out[0::4] = index.translate(RED)
    out[1::4] = index.translate(GREEN)
    out[2::4] = index.translate(BLUE)
    out[3::4] = b"\xff" * n
    return out


def colour(value: float, scale: float) -> tuple[int, int, int, int]:
    """The RGBA colour of one value (for readouts and tests)."""
    r, g, b = PALETTE[indices([value], scale)[0]]
    return r, g, b, 255


def palette_rgba() -> bytes:
    """The whole palette as RGBA bytes: the gradient's GRADIENT_LEVELS entries, then NaN, +Inf, -Inf."""
    return bytes(rgba_channel for colour in PALETTE for rgba_channel in (*colour, 255))
