"""The Compare tab's requests: a second checkpoint B held beside the open one (A, the reference),
the comparison as a job (web/jobs.py) that steps once per chunk read, and the views of one
compared pair: A, B and A−B over the same tile on one colour scale, both histograms on the same
bins (comparison/views.py).

Mixed into handlers.Session, whose `current()` (A) and `jobs` it uses. The report sent is
`Comparison.to_json()`, what `tensorloupe diff A B --json` prints, computed by the same function
with the same defaults. B is opened like A (the page mounts its files the same way, files.py
groups them; URLs are probed by the worker first, remote.py) and stays open until another B
replaces it; a finished comparison is kept for the views only while A is still the one it was
made with (opening another A closes the old one).

The comparison's modules (tensorloupe.comparison) are imported by the tab's first request, not when
the worker boots: the first screen does not need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import COMPARE_SAMPLES, open as open_checkpoint
from ..errors import TensorloupeError, UsageError
from ..sampler.sampling import Grid, View
from . import blobs, remote
from .jobs import Job
from .views import MAX_GRID, heatmap_reply

if TYPE_CHECKING:
    from ..comparison import Comparison

HISTOGRAM_BINS = 64
PANELS = ("a", "b", "diff")


def _samples(args) -> int:
    value = int(args.get("samples", COMPARE_SAMPLES))
    if value < 1:
        raise UsageError(f"samples per tensor must be at least 1, not {value}")
    return value


def compare_job(a, b, samples: int, exact: bool, on_finish) -> Job:
    """compare_steps as a Job: one step per chunk read (so a cancel gets in between chunks of
    one big tensor in exact mode); the state is the Comparison once it is made."""
    from ..comparison import Comparison, compare_steps
    from ..comparison.match import match
    total = len(match(a, b)[0])      # descriptors only: no tensor byte is read to count pairs
    before = a.bytes_read() + b.bytes_read()

    def steps():
        for item in compare_steps(a, b, samples, exact):
            if isinstance(item, Comparison):
                yield total, total, item
            else:
                yield item[0], item[1], None
    return Job("comparison", steps(), total,
               finished=lambda done, total, state: state is not None,
               progress=lambda state: {"bytes_read": a.bytes_read() + b.bytes_read() - before},
               result=lambda comparison: {"comparison": comparison.to_json()},
               on_finish=on_finish)


class CompareOps:
    other = None          # checkpoint B (instance attributes once set)
    comparison = None     # the last finished Comparison (of `current()` and `other`)

    # --- B ---------------------------------------------------------------------------------------

    def op_compare_open(self, args):
        """B from the mounted files of one entry (`paths`: one file, or shards with their index)."""
        paths = list(args.get("paths") or [])
        if not paths:
            raise UsageError("no file was given to compare with")
        # Mounted browser Files: vectored reads are all their slices at once (web/blobs.py).
        return self._adopt_other(open_checkpoint(blobs.open_target(paths if len(paths) > 1 else paths[0])))

    def op_compare_open_url(self, args):
        """B from URLs; `probes` are the worker's first answers (remote.py), as for op_open_url."""
        urls, probes = list(args.get("urls", [])), args.get("probes")
        if not urls:
            raise UsageError("no URL was given")
        sources = []
        try:
            for url in urls:
                sources.append(remote.open_url(url, remote.probe_of(probes, url)))
        except TensorloupeError:
            for source in sources:
                source.close()
            raise
        return self._adopt_other(open_checkpoint(sources))

    def _adopt_other(self, ckpt):
        """Only a successfully opened B replaces the previous one."""
        if self.other is not None:
            self.other.close()
        self.other, self.comparison = ckpt, None
        return self.other_payload(), []

    def other_payload(self) -> dict:
        """What the tab says about B before anything is compared: its facts, and how many pairs
        the names (or the name map) make with A (no tensor bytes are read for it)."""
        from ..comparison.match import match
        b = self._other()
        pairs, arch = match(self.current(), b)
        return {"file": b.name, "format": b.format, "size": b.size, "tensors": len(b.tensors),
                "parameters_by_dtype": b.parameters_by_dtype(),
                "pairs": len(pairs), "matched": sum(1 for p in pairs if p.a and p.b), "name_map": arch}

    def op_compare_other(self, args):
        """B as it is now, against the current A (after A changed), or null when none is open."""
        return (self.other_payload() if self.other is not None else None), []

    def _other(self):
        if self.other is None:
            raise UsageError("no checkpoint to compare with is open: choose one with \"Compare with…\"")
        return self.other

    # --- the comparison --------------------------------------------------------------------------

    def op_compare_start(self, args):
        a, b = self.current(), self._other()
        exact = bool(args.get("exact"))
        self.comparison = None
        return self.jobs.start(compare_job(a, b, _samples(args), exact,
                                           lambda result: setattr(self, "comparison", result))), []

    def _compared(self) -> Comparison:
        c = self.comparison
        if c is None or c.a is not self.checkpoint or c.b is not self.other:
            raise UsageError("no comparison of the open checkpoints has finished: run it first")
        return c

    # --- one pair ----------------------------------------------------------------------------------

    def op_compare_view(self, args):
        """A, B and A−B of one pair over the same lattice of A's 2-D view (rows, cols, region),
        coloured on one symmetric scale (the largest finite |value| of the three), or with
        `diff_scale: "own"` A−B on its own (its largest |value|: a quantisation's error is a
        hundredth of the weights, white on theirs); and both histograms on the same bins.
        Buffers: pixels and float64 values of A, B, A−B in turn."""
        from ..comparison.views import histograms, tiles
        row = self._compared().row(str(args.get("name")))
        rows = max(1, min(MAX_GRID, int(args.get("rows", 128))))
        cols = max(1, min(MAX_GRID, int(args.get("cols", 128))))
        region = tuple(int(v) for v in args["region"]) if args.get("region") else None
        t = tiles(row.pair, rows, cols, region)
        view_shape = View(row.pair.a.tensor, None, None).shape
        r0, r1, c0, c1 = region or (0, view_shape[0], 0, view_shape[1])
        exact = t["rows"] == r1 - r0 and t["cols"] == c1 - c0
        scale = t["amax"] if t["amax"] > 0 else 1.0
        scales = {"a": scale, "b": scale, "diff": scale}
        if args.get("diff_scale") == "own":
            grid = Grid(t["rows"], t["cols"], t["diff"], t["row_index"], t["col_index"], view_shape, exact)
            scales["diff"] = grid.amax if grid.amax > 0 else 1.0
        panels, buffers = {}, []
        for key in PANELS:
            grid = Grid(t["rows"], t["cols"], t[key], t["row_index"], t["col_index"], view_shape, exact)
            panels[key], parts = heatmap_reply(grid, region, scales[key])
            buffers += parts
        ha, hb = histograms(row.pair, _samples(args), int(args.get("bins", HISTOGRAM_BINS)))
        return {"name": row.name, "row": row.to_json(), "scale": scale, "panels": panels,
                "histograms": {"a": ha.to_json(), "b": hb.to_json()}}, buffers

