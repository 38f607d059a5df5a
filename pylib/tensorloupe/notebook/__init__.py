"""A tensor as a notebook shows it (`Tensor._repr_html_`, attached by the package's __init__: the
model layer stays below the sampler this reads with): its facts, the statistics of a
spread-out sample of its real values (labelled "sampled", with the extremes as bounds, unless the
sample is every element: "exact"), and that sample's histogram and a heatmap lattice as inline
PNG images (notebook/png.py): what the page's Tensor tab shows, without the page.

A repr runs whenever a cell shows the tensor, so it reads little: NOTEBOOK_SAMPLES values in a
few windows and one HEATMAP_SIDE lattice (a few hundred KB of a multi-GB file). A tensor whose
values cannot be read says why, in place of the figures; nothing is made up.
"""

from __future__ import annotations

import base64
import math

from .. import colormap
from ..display import exact_count, html_table
from ..errors import TensorloupeError
from .png import png

NOTEBOOK_SAMPLES = 1 << 14
HISTOGRAM_BINS = 64
BAR_PX, HISTOGRAM_PX = 4, 64          # a bin's width, the tallest bar's height
BAR, BACKGROUND = bytes((70, 110, 170, 255)), bytes(4)   # transparent behind the bars
HEATMAP_SIDE = 128                    # lattice cells along the view's longer side
SHOWN_PX = 256                        # the heatmap's longer side on screen (whole pixels per cell)


def tensor_html(t) -> str:
    facts = [("name", t.name), ("dtype", t.dtype), ("shape", list(t.shape)),
             ("elements", exact_count(t.numel)), ("bytes", exact_count(t.stored_nbytes)),
             ("file", t.file or "")]
    if t.problem:
        return html_table(facts + [("problem", t.problem)], caption="tensor")
    if t.numel == 0:
        return html_table(facts, caption="tensor")
    from ..sampler.sampling import grid, plan_grid, sample
    try:
        s = sample(t, NOTEBOOK_SAMPLES)
        rows, cols = lattice_shape(plan_grid(t, 1, 1).view_shape)
        g = grid(t, rows, cols)
    except TensorloupeError as e:
        return html_table(facts + [("values", f"not read: {e}")], caption="tensor")
    return (html_table(facts + stats_rows(s), caption="tensor")
            + histogram_figure(s) + heatmap_figure(g))


def stats_rows(s) -> list[tuple[str, str]]:
    """The sample's statistics, each row saying whether it is exact or an estimate."""
    st, n = s.stats, s.numel
    if s.exhaustive:
        how, low, high = f"exact: all {exact_count(n)} elements", "min", "max"
    else:   # a sample's extremes bound the tensor's: its min is at most these, its max at least
        how = (f"sampled: {exact_count(len(s.values))} of {exact_count(n)} elements "
               "(estimates; min and max bound the tensor's)")
        low, high = "min ≤", "max ≥"
    rows = [("statistics", how)]
    if st.finite:
        rows += [(low, _number(st.min)), (high, _number(st.max)), ("mean", _number(st.mean)),
                 ("std", _number(st.std)), ("|v| < 1e-6", f"{st.zeros * 100:.2f}%")]
    rows.append(("nan / +inf / -inf", f"{exact_count(st.nan)} / {exact_count(st.posinf)} / {exact_count(st.neginf)}"))
    return rows


def histogram_figure(s) -> str:
    h = s.histogram(HISTOGRAM_BINS)
    if not h.counts:
        return ""
    tallest = max(h.counts)
    image = png(BAR_PX * len(h.counts), HISTOGRAM_PX, histogram_rgba(h.counts))
    what = "every element" if s.exhaustive else f"the {exact_count(len(s.values))} sampled values"
    caption = (f"histogram of {what}: {len(h.counts)} bins from {_number(h.edges[0])} to "
               f"{_number(h.edges[-1])}, tallest {exact_count(tallest)}")
    return _figure(image, BAR_PX * len(h.counts), HISTOGRAM_PX, caption)


def histogram_rgba(counts: list[int]) -> bytes:
    """Bars of BAR_PX columns, heights in proportion to the tallest (a non-empty bin: 1 px at
    least), top row first."""
    tallest = max(counts) or 1
    heights = [max(1, round(c / tallest * HISTOGRAM_PX)) if c else 0 for c in counts]
    rows = []
    for y in range(HISTOGRAM_PX):
        level = HISTOGRAM_PX - y        # the bars at least this tall fill this row
        rows.append(b"".join((BAR if height >= level else BACKGROUND) * BAR_PX for height in heights))
    return b"".join(rows)


def lattice_shape(view_shape: tuple[int, int]) -> tuple[int, int]:
    """Lattice rows and columns in the view's proportions (cells square, the image unstretched),
    at most HEATMAP_SIDE along the longer side, one per element where the view is smaller."""
    height, width = view_shape
    if height >= width:
        rows = min(height, HEATMAP_SIDE)
        return rows, max(1, min(width, round(rows * width / height)))
    cols = min(width, HEATMAP_SIDE)
    return max(1, min(height, round(cols * height / width))), cols


def heatmap_figure(g) -> str:
    scale = g.amax
    image = png(g.cols, g.rows, bytes(colormap.rgba(g.floats(), scale)))
    zoom = max(1, SHOWN_PX // max(g.rows, g.cols))
    height, width = g.view_shape
    what = (f"every element of the {exact_count(height)} × {exact_count(width)} view" if g.exact else
            f"a {g.rows} × {g.cols} lattice of the {exact_count(height)} × {exact_count(width)} view "
            "(each pixel the element at its cell's centre)")
    caption = (f"heatmap: {what}; colour ±{_number(scale)} (blue negative, red positive: the largest "
               "magnitude shown), NaN magenta, +Inf gold, -Inf cyan")
    return _figure(image, g.cols * zoom, g.rows * zoom, caption)


def _figure(image: bytes, width: int, height: int, caption: str) -> str:
    from html import escape
    src = "data:image/png;base64," + base64.b64encode(image).decode("ascii")
    return (f'<figure><img src="{src}" width="{width}" height="{height}" alt="{escape(caption)}" '
            f'style="image-rendering: pixelated"><figcaption>{escape(caption)}</figcaption></figure>')


def _number(v: float) -> str:
    return f"{v:.6g}" if math.isfinite(v) else str(v)
