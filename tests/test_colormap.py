"""The heatmap colormap: diverging, centred on zero, distinct non-finite colours, numpy-checked."""

import math
import random

import numpy as np
import pytest

from tensorloupe import colormap
from tensorloupe.colormap import (CENTRE, GRADIENT_LEVELS, NAN_INDEX, NEGINF_INDEX, PALETTE,
                                  POSINF_INDEX, colour, indices, palette_rgba, rgba)


def reference_indices(values, scale):
    """The same mapping written with numpy: floor(v / scale * 126 + 126.5), clipped, specials."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.clip(np.floor(v * (CENTRE / scale) + CENTRE + 0.5), 0, GRADIENT_LEVELS - 1)
    out[np.isnan(v)] = NAN_INDEX
    out[np.isposinf(v)] = POSINF_INDEX
    out[np.isneginf(v)] = NEGINF_INDEX
    return bytes(out.astype(np.uint8))


def test_zero_is_the_light_centre_and_the_ends_are_the_anchors():
    assert colour(0.0, 1.0) == (247, 247, 247, 255)
    assert colour(-1.0, 1.0)[:3] == colormap.ANCHORS[0]
    assert colour(1.0, 1.0)[:3] == colormap.ANCHORS[-1]
    assert colour(-0.0, 5.0) == colour(0.0, 5.0)


def test_sign_decides_the_hue():
    # Negative values are blue-dominant, positive red-dominant, at every magnitude.
    for magnitude in (0.05, 0.2, 0.5, 0.9, 1.0):
        r, _, b, _ = colour(-magnitude, 1.0)
        assert b > r
        r, _, b, _ = colour(magnitude, 1.0)
        assert r > b


def test_indices_are_monotonic_and_symmetric():
    rng = random.Random(5)
    values = sorted(rng.uniform(-3, 3) for _ in range(5000))
    index = indices(values, 3.0)
    assert list(index) == sorted(index)
    for v in values:
        if (v * CENTRE / 3.0 + 0.5) % 1:  # skip exact half-steps, where floor breaks the tie
            assert indices([v], 3.0)[0] + indices([-v], 3.0)[0] == 2 * CENTRE


def test_matches_the_numpy_reference_including_clamping_and_specials():
    rng = np.random.default_rng(7)
    values = list(rng.normal(0, 1, 20000)) + [math.nan, math.inf, -math.inf, 1e300, -1e300, 0.0]
    values = [float(v) for v in values]
    for scale in (0.5, 1.0, 2.5, 1e-8):
        assert indices(values, scale) == reference_indices(values, scale)
    finite = values[:20000]
    assert indices(finite, max(map(abs, finite))) == reference_indices(finite, max(map(abs, finite)))
    for scale in (0.5, 1e-8):       # finite values beyond the scale: the clamped path
        assert indices(finite, scale) == reference_indices(finite, scale)


def test_non_finite_values_have_distinct_colours_outside_the_gradient():
    gradient = set(PALETTE[:GRADIENT_LEVELS])
    specials = [colour(v, 1.0)[:3] for v in (math.nan, math.inf, -math.inf)]
    assert len(set(specials)) == 3
    assert not gradient & set(specials)


def test_values_beyond_the_scale_clamp_to_the_ends():
    assert indices([-10.0, 10.0], 1.0) == bytes([0, GRADIENT_LEVELS - 1])


@pytest.mark.parametrize("scale", [0.0, -1.0, math.nan, math.inf])
def test_a_degenerate_scale_shows_finite_values_as_zero(scale):
    assert indices([-2.0, 0.0, 3.0, math.nan], scale) == bytes([CENTRE, CENTRE, CENTRE, NAN_INDEX])


def test_rgba_layout_is_four_opaque_bytes_per_value_in_order():
    values = [-1.0, -0.25, 0.0, 0.4, 1.0, math.nan]
    pixels = rgba(values, 1.0)
    assert isinstance(pixels, bytearray) and len(pixels) == 4 * len(values)
    for i, v in enumerate(values):
        assert tuple(pixels[4 * i:4 * i + 4]) == colour(v, 1.0)
    assert rgba([], 1.0) == bytearray()


def test_integer_bool_and_complex_values_are_accepted():
    assert indices([0, 1, -1], 1.0) == bytes([CENTRE, GRADIENT_LEVELS - 1, 0])
    assert indices([True, False], 1.0) == bytes([GRADIENT_LEVELS - 1, CENTRE])
    assert indices([3 + 4j], 5.0) == bytes([GRADIENT_LEVELS - 1])  # complex: magnitude


def test_palette_rgba_holds_the_gradient_then_the_specials():
    table = palette_rgba()
    assert len(table) == 4 * 256
    assert tuple(table[4 * CENTRE:4 * CENTRE + 4]) == (247, 247, 247, 255)
    assert tuple(table[4 * NAN_INDEX:4 * NAN_INDEX + 3]) == colormap.SPECIAL[NAN_INDEX]
