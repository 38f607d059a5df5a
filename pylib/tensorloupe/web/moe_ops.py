"""The Experts tab's requests: what the redundancy analysis costs, the analysis itself as a job of
one expert per step, re-clustering at another threshold, and experts' matrices side by side.

Mixed into handlers.Session, whose state it uses: `current()`, `moe` (detected when the checkpoint
was opened), `analysis` (the last finished analysis, as measured, at its own threshold) and the
running jobs `jobs` (jobs.py).
"""

from __future__ import annotations

import time
from typing import Iterator

from .. import colormap
from ..moe import redundancy
from ..errors import UsageError
from ..sampler.sampling import Grid
from .jobs import Job
from .offload import page_helper
from .views import heatmap_reply, lattice

# The similarity matrix is coloured on the fixed range [-1, 1]: -1 blue, 0 white, +1 red.
SIMILARITY_SCALE = 1.0
# A job step of the analysis runs its small steps (an expert measured, a block of similarities)
# for about this long: each job step is a worker task and a message (~2 ms), and a step per
# expert spent ~12% of a 2,048-expert analysis on them; a cancel still waits no longer than this.
STEP_SECONDS = 0.05


def within(steps: Iterator, seconds: float) -> Iterator:
    """The steps, the last of those done in each `seconds` (at least one each time; the last
    step always)."""
    start = time.perf_counter()
    pending = False
    for item in steps:
        pending = True
        if time.perf_counter() - start >= seconds:
            yield item
            pending = False
            start = time.perf_counter()
    if pending:
        yield item


def analysis_json(analysis) -> dict:
    # The page has the MoE structure from opening the file: not sent again (thousands of refs).
    out = analysis.to_json()
    del out["moe"]
    return out


def _threshold(args) -> float:
    value = float(args.get("threshold", redundancy.DEFAULT_THRESHOLD))
    if not -1.0 <= value <= 1.0:
        raise UsageError(f"the threshold must be a cosine similarity within [-1, 1], not {value}")
    return value


def _samples(args) -> int:
    value = int(args.get("samples", redundancy.DEFAULT_SAMPLES_PER_MATRIX))
    if value < 1:
        raise UsageError(f"samples per matrix must be at least 1, not {value}")
    return value


class MoEOps:
    # --- the analysis ----------------------------------------------------------------------------

    def detected(self):
        if self.moe is None or not self.moe.detected:
            raise UsageError("this checkpoint has no Mixture-of-Experts layers to analyse")
        return self.moe

    def measured(self):
        if self.analysis is None:
            raise UsageError("no expert analysis has finished yet")
        return self.analysis

    def op_moe_plan(self, args):
        """What the analysis will read, stated before it runs."""
        ckpt = self.current()
        plan = redundancy.cost(ckpt, self.detected(), _samples(args)).to_json()
        return {**plan, "file_size": ckpt.size}, []

    def op_moe_start(self, args):
        """The analysis as a job of one step per expert measured (or compared with the rest of
        its layer); when it finishes it is kept for moe_threshold and moe_similarity."""
        found = self.detected()
        helper = page_helper()
        steps = within(redundancy.analyse_steps(self.current(), _threshold(args), _samples(args),
                                                helper=helper), STEP_SECONDS)
        job = Job("expert analysis", steps, sum(layer.expert_count for layer in found.layers),
                  finished=lambda done, total, analysis: analysis.complete,
                  progress=lambda a: {"bytes_read": a.bytes_read if a else 0,
                                      "layers_done": len(a.layers) if a else 0,
                                      "helped": a.helped if a else 0},
                  result=lambda analysis: {"analysis": analysis_json(analysis),
                                           "helped": analysis.helped},
                  on_finish=lambda analysis: setattr(self, "analysis", analysis))
        return self.jobs.start(job), []

    def op_moe_threshold(self, args):
        """Clusters and recommendations at another threshold, from the measurements (no reads)."""
        threshold = _threshold(args)
        again = self.measured().with_threshold(threshold)
        layers = [{"prefix": layer.prefix, "index": layer.index, "clusters": layer.clusters,
                   "recommendations": [r.to_json() for r in layer.recommendations]}
                  for layer in again.layers]
        return {"threshold": threshold, "layers": layers,
                "recommendations": [r.to_json() for r in again.recommendations]}, []

    def op_moe_similarity(self, args):
        """One layer's similarity matrix as RGBA pixels (experts x experts), coloured on [-1, 1]."""
        prefix = args.get("layer")
        layer = next((l for l in self.measured().layers if l.prefix == prefix), None)
        if layer is None:
            raise UsageError(f"no analysed MoE layer {prefix!r}")
        flat = [v for row in layer.similarity for v in row]
        return ({"layer": prefix, "experts": len(layer.similarity), "scale": SIMILARITY_SCALE},
                [bytes(colormap.rgba(flat, SIMILARITY_SCALE))])

    # --- two experts side by side ----------------------------------------------------------------

    def op_expert_heatmaps(self, args):
        """The same matrix (`leaf`) of several experts of one layer as heatmaps on one colour scale
        (the largest |value| of any of them), so that equal weights look equal; for two experts,
        their difference too. Buffers: pixels and values of each expert in turn."""
        ckpt = self.current()
        prefix = args.get("layer")
        layer = next((l for l in self.detected().layers if l.prefix == prefix), None)
        if layer is None:
            raise UsageError(f"no MoE layer {prefix!r}")
        experts = [int(e) for e in args.get("experts", [])]
        if not 1 <= len(experts) <= 4 or any(e not in layer.experts for e in experts):
            raise UsageError(f"experts {experts} are not 1 to 4 experts of {prefix} "
                             f"(0..{layer.expert_count - 1})")
        leaf = args.get("leaf")
        leaves = sorted(layer.experts[experts[0]])
        if leaf not in leaves:
            raise UsageError(f"{prefix} experts have no matrix {leaf!r} (they have {', '.join(leaves)})")
        tensors = [redundancy.expert_tensor(ckpt, layer, e, leaf) for e in experts]
        grids = [lattice(t, args) for t in tensors]
        scale = max(g.amax for g, _ in grids)
        panels, buffers = [], []
        for expert, tensor, (g, region) in zip(experts, tensors, grids):
            meta, parts = heatmap_reply(g, region, scale)
            panels.append({"expert": expert, "tensor": tensor.name, "dtype": tensor.dtype,
                           "shape": list(tensor.shape), **meta})
            buffers += parts
        result = {"layer": prefix, "leaf": leaf, "scale": scale, "panels": panels}
        if len(grids) == 2:
            # The second minus the first, cell by cell (the same lattice), on the same scale:
            # near-duplicates are near-white here. Its buffers follow the experts'.
            (a, region), (b, _) = grids
            diff = Grid(a.rows, a.cols, [y - x for x, y in zip(a.floats(), b.floats())],
                        a.row_index, a.col_index, a.view_shape, a.exact)
            result["difference"], parts = heatmap_reply(diff, region, scale)
            buffers += parts
        return result, buffers
