"""Assertions shared by the browser tests: the page's numbers against the library's in CPython."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import tensorloupe
from tensorloupe import colormap

STAT_KEYS = ("min", "max", "mean", "std", "zeros", "nan", "posinf", "neginf")


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def json_value(v):
    return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(v, v) if isinstance(v, str) else v


def assert_stats_equal(page_stats: dict, expected: dict) -> None:
    """Every statistic the page shows is the expected JSON value, exactly (not rounded)."""
    for key in STAT_KEYS:
        assert same(page_stats[key], json_value(expected[key])), (key, page_stats[key], expected[key])


def lattice_of(app, checkpoint):
    """The grid the page drew, recomputed in CPython from the request the page made."""
    info = app.heatmap()
    request = json.loads(info["request"])
    tensor = checkpoint.tensor(request["name"])
    plane = tuple(request["plane"]) if request.get("plane") else None
    index = {int(k): v for k, v in (request.get("index") or {}).items()} or None
    grid = tensorloupe.grid(tensor, request["rows"], request["cols"], tuple(request["region"]), plane, index)
    return info, grid


def spread(n: int, k: int = 6) -> list[int]:
    return sorted({min(n - 1, (2 * i + 1) * n // (2 * k)) for i in range(k)} | {0, n - 1})


def assert_heatmap_matches(app, checkpoint, extra_cells=()) -> None:
    """The canvas shows real values: non-blank, and probed cells have the colormap's colour of
    the value the library reads at that lattice cell."""
    info, grid = lattice_of(app, checkpoint)
    assert (grid.rows, grid.cols) == (int(info["rows"]), int(info["cols"]))
    assert info["exact"] == str(grid.exact).lower()
    scale = float(info["scale"])
    assert scale == grid.amax
    assert json.loads(info["view"]) == json.loads(info["region"]), "probe only an unzoomed, settled view"
    assert_lattice_pixels(app, "#heatmap", grid, scale, extra_cells)


def assert_lattice_pixels(app, selector: str, grid, scale: float, extra_cells=()) -> None:
    """Probed cells of the canvas `selector`, which shows the whole lattice `grid`, have the
    colormap's colour of the value the library reads at that cell, against +-`scale`."""
    width, height = app.page.eval_on_selector(selector, "c => [c.width, c.height]")
    cells = [(i, j) for i in spread(grid.rows) for j in spread(grid.cols)] + list(extra_cells)
    points = [(int((j + 0.5) * width / grid.cols), int((i + 0.5) * height / grid.rows)) for i, j in cells]
    got = app.pixels(points, selector)
    floats = grid.floats()
    for (i, j), pixel in zip(cells, got):
        expected = colormap.colour(floats[i * grid.cols + j], scale)
        assert pixel == expected, f"{selector} cell {(i, j)} value {floats[i * grid.cols + j]}: {pixel} != {expected}"
    assert len(set(got)) > 1 or len(set(floats)) == 1, f"{selector} is blank"


ROOT = Path(__file__).resolve().parents[2]


def cli_inspect(path) -> dict:
    """`tensorloupe inspect --json PATH` of this checkout, run as a separate process."""
    done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", "--json", str(path)],
                          capture_output=True, text=True, cwd=ROOT, check=True,
                          env={"PYTHONPATH": str(ROOT / "pylib"), "PATH": "/usr/bin:/bin"})
    return json.loads(done.stdout)


def cli_stats(path: Path, tensor: str) -> dict:
    """`tensorloupe stats FILE TENSOR --json`, run as a separate process."""
    # this checkout's CLI (an editable install elsewhere would otherwise answer)
    done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "stats", str(path), tensor, "--json"],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "pylib")})
    [entry] = json.loads(done.stdout)
    return entry


_AT_THE_FIRST_PROGRESS = """([watched, key, start, cancel, filter]) => new Promise((resolve) => {
    const node = document.getElementById(watched);
    const observer = new MutationObserver(() => {
      if (Number((key ? node.dataset[key] : node.value) || 0) > 0) {
        observer.disconnect();
        const button = document.getElementById(cancel);
        const shown = !button.hidden && button.offsetParent !== null;
        if (filter !== null) {
          const box = document.getElementById('filter');
          box.value = filter;
          box.dispatchEvent(new Event('input'));
        }
        button.click();
        resolve(shown);
      }
    });
    observer.observe(node, {attributes: true});
    document.getElementById(start).click();
})"""


def cancel_at_the_first_progress(page, watched: str, key: str | None, start: str, cancel: str,
                                 filter: str | None = None) -> bool:
    """Click `start`, then, from inside the page as soon as `watched` shows progress (its data-`key`,
    or its value, above 0), type `filter` into the tree's filter if given and click `cancel`:
    a click sent by the test could come after the last step of a fast job. Whether `cancel` was
    shown at that moment."""
    return page.evaluate(_AT_THE_FIRST_PROGRESS, [watched, key, start, cancel, filter])
