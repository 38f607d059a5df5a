"""First looks: a tensor's sample and its heatmap lattice in two stages, every byte read once.

In the browser each separate range read costs ~0.5-1.5 ms whatever its size (Chromium makes,
registers and reads a Blob per range), and the lattice of a 4096 x 4096 tensor needs 256 of them
(its rows lie 128 KiB apart), so the page shows a first look at once, labelled as one, and
refines it in place: the first stage reads every EVERY-th window of the sample (4 of 32), or
every EVERY-th row of the lattice (32 of 256, shown at every EVERY-th column: 32 x 32 cells); the
second stage reads only what the first did not. The two stages together read exactly the
bytes that `sample` or `grid` reads, and the second gives exactly their numbers.
"""

from __future__ import annotations

from .gather import gather, reads_apart
from ..model import Tensor
from .sampling import (DEFAULT_SAMPLES, Grid, Sample, plan_grid, read_windows, sample_order,
                       sample_windows, summarized)

EVERY = 8
# A lattice of fewer rows than this is drawn in one go: its reads are quick enough.
MIN_ROWS = 64


class StagedSample:
    """`sample(tensor, max_samples)` in two stages."""

    def __init__(self, tensor: Tensor, max_samples: int = DEFAULT_SAMPLES):
        self.tensor = tensor
        self.windows = sample_windows(tensor, max_samples)
        self.order = sample_order(tensor, max_samples)
        self.parts: dict[int, list] = {}     # window number -> its values, once read

    def first_look(self) -> Sample | None:
        """Every EVERY-th window (an eighth of the values, spread over the whole tensor like the
        rest); None when the sample has fewer windows than that, or runs in storage order (a
        GPTQ, AWQ or MXFP4 weight's: one batch of small reads, decoded with the lattice's cell
        decoders; in the page its second half would wait behind the whole heatmap lattice, which
        those layouts draw without a first look): then it is read in one go."""
        if len(self.windows) < EVERY or self.order is not None:
            return None
        which = range(EVERY // 2, len(self.windows), EVERY)
        return summarized(self._values(which), [self.windows[k] for k in which], self.tensor.numel,
                          first_look=True, order=self.order)

    def sample(self) -> Sample:
        return summarized(self._values(range(len(self.windows))), self.windows, self.tensor.numel,
                          order=self.order)

    def _values(self, which) -> list:
        missing = [k for k in which if k not in self.parts]
        self.parts.update(zip(missing, read_windows(self.tensor, [self.windows[k] for k in missing], self.order)))
        values: list = []
        for k in which:
            values += self.parts[k]
        return values


class StagedGrid:
    """`grid(tensor, rows, cols, region, plane, index)` in two stages; `key` names the request."""

    def __init__(self, tensor: Tensor, rows: int = 256, cols: int = 256, region=None, plane=None,
                 index=None, key=None):
        self.tensor = tensor
        self.key = key
        self.region = region                 # as asked (None: the whole view)
        self.plan = plan_grid(tensor, rows, cols, region, plane, index)
        self.rows: dict[int, list] = {}      # lattice row -> its cells, once read

    def first_look(self) -> Grid | None:
        """Every EVERY-th row and column of the lattice; None when drawing it in two stages would
        not pay (fewer than MIN_ROWS rows) or would change the reads (rows close enough in the
        file to be read together, or logical rows that cross the stored rows, as a GPTQ, AWQ or
        MXFP4 weight's do: an eighth of its lattice rows needs the same stored rows as all)."""
        plan = self.plan
        n = len(plan.row_index)
        if n < MIN_ROWS or not reads_apart(self.tensor, plan.spans) \
                or getattr(self.tensor.source, "sample_order", None) is not None:
            return None
        which = range(EVERY // 2, n, EVERY)
        cols = slice(EVERY // 2, None, EVERY) if len(plan.col_index) >= EVERY else slice(None)
        self._read(which)
        cells: list = []
        for i in which:
            cells += self.rows[i][cols]
        col_index = plan.col_index[cols]
        return Grid(len(which), len(col_index), cells, [plan.row_index[i] for i in which], col_index,
                    plan.view_shape, exact=False, first_look=True)

    def grid(self) -> Grid:
        if not self.rows:   # nothing read yet: one gather, exactly `grid`
            return self.plan.grid(gather(self.tensor, self.plan.positions))
        self._read(range(len(self.plan.row_index)))
        cells: list = []
        for i in range(len(self.plan.row_index)):
            cells += self.rows[i]
        return self.plan.grid(cells)

    def _read(self, which) -> None:
        missing = [i for i in which if i not in self.rows]
        positions: list = []
        for i in missing:
            positions += self.plan.row(i)
        cells = gather(self.tensor, positions)
        n = len(self.plan.col_index)
        for k, i in enumerate(missing):
            self.rows[i] = cells[k * n:(k + 1) * n]
