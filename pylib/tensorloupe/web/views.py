"""Heatmap replies, shared by the tensor view and the experts' side-by-side view."""

from __future__ import annotations

import sys
from array import array

from .. import colormap
from ..sampler.sampling import Grid, grid
from ..sampler.staged import StagedGrid
from ..jsonable import json_number

MAX_GRID = 512          # lattice cells per side the page may ask for


def lattice_args(args: dict) -> tuple:
    """(rows, cols, region, plane, index) of a heatmap request, within MAX_GRID."""
    rows = min(MAX_GRID, int(args.get("rows", 256)))
    cols = min(MAX_GRID, int(args.get("cols", 256)))
    region = tuple(int(v) for v in args["region"]) if args.get("region") else None
    plane = tuple(int(v) for v in args["plane"]) if args.get("plane") else None
    index = {int(k): int(v) for k, v in (args.get("index") or {}).items()}
    return rows, cols, region, plane, index or None


def lattice(tensor, args: dict) -> tuple[Grid, tuple[int, int, int, int] | None]:
    """The grid a heatmap request asks for (rows, cols, region, plane, index), within MAX_GRID."""
    rows, cols, region, plane, index = lattice_args(args)
    return grid(tensor, rows, cols, region, plane, index), region


def staged_lattice(tensor, args: dict) -> StagedGrid:
    """The same grid in two stages (sampler/staged.py), keyed by the tensor and what the request asks."""
    rows, cols, region, plane, index = lattice_args(args)
    key = (id(tensor), rows, cols, region, plane, tuple(sorted((index or {}).items())))
    return StagedGrid(tensor, rows, cols, region, plane, index, key=key)


def heatmap_reply(g: Grid, region, scale: float) -> tuple[dict, list[bytes]]:
    """The page's heatmap: lattice facts as JSON, then RGBA pixels and float64 values (row-major)."""
    floats = g.floats()
    pixels = colormap.rgba(floats, scale)
    cells = array("d", floats)
    if sys.byteorder == "big":
        cells.byteswap()
    result = {"rows": g.rows, "cols": g.cols, "row_index": g.row_index, "col_index": g.col_index,
              "view_shape": list(g.view_shape), "exact": g.exact, "scale": json_number(scale),
              "region": list(region) if region else [0, g.view_shape[0], 0, g.view_shape[1]]}
    if g.first_look:
        result["first_look"] = True
    return result, [bytes(pixels), cells.tobytes()]
