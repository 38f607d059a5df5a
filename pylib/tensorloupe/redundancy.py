"""Which experts of an MoE layer are redundant, from the weights alone (no calibration data).

For every expert of a layer we read the same element positions of each of its matrices (the same
block-aligned windows, so signatures line up element for element), and compute:

  signature   the concatenated samples of all the expert's matrices (gate/up/down, w1/w2/w3).
              All of them, not just one: two experts only compute the same function if every matrix
              matches, and using all three keeps a coincidence in one matrix from pairing them.
  score       AIMER-style: mean(|w|) / rms(w) over the signature (arXiv 2603.18492 scores experts
              from this ratio without data; it is scale-free, so it compares experts of one layer).
  rms, norm   the root mean square and the Frobenius norm it implies for the whole expert.

Per layer: the experts x experts cosine similarity of signatures, clusters of near-duplicates
(similarity >= threshold, single linkage, as in Zhang et al. 2025's similarity grouping) and a
ranked recommendation to drop all but one expert of each cluster, keeping the member most similar
to the rest (the medoid; the lowest index on ties).

Cost is bounded: at most `samples_per_matrix` elements (rounded to whole blocks) of each matrix of
each expert are read, whatever the size of the model.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Callable

from .dtypes import to_float
from .errors import Cancelled, UsageError
from .gather import dtype_of, gather_range
from .model import Checkpoint, Tensor
from .moe import MoE, MoELayer, detect
from .sample import plan_windows

DEFAULT_SAMPLES_PER_MATRIX = 4096
DEFAULT_THRESHOLD = 0.9
# Few, longer windows per matrix: a whole model has thousands of expert matrices and every read
# costs ~1.5 ms in the browser, while 4 windows already cover the start, middle and end.
SIGNATURE_WINDOWS = 4


@dataclass
class ExpertProfile:
    expert: int
    score: float          # mean(|w|) / rms(w)
    rms: float
    mean: float
    norm: float           # Frobenius norm of the whole expert, estimated from its rms
    samples: int

    def to_json(self) -> dict:
        return {"expert": self.expert, "score": self.score, "rms": self.rms, "mean": self.mean,
                "norm": self.norm, "samples": self.samples}


@dataclass
class Recommendation:
    layer: int | None
    drop: int
    keep: int
    similarity: float

    @property
    def text(self) -> str:
        where = f" of layer {self.layer}" if self.layer is not None else ""
        return (f"drop expert {self.drop}{where}: {self.similarity:.2f} similar to expert "
                f"{self.keep}; keep {self.keep}")

    def to_json(self) -> dict:
        return {"layer": self.layer, "drop": self.drop, "keep": self.keep,
                "similarity": self.similarity, "text": self.text}


@dataclass
class LayerAnalysis:
    prefix: str
    index: int | None
    experts: list[ExpertProfile]
    similarity: list[list[float]]
    matrices: list[str]                      # the expert leaves the signature is built from
    threshold: float
    clusters: list[list[int]] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)
    bytes_read: int = 0

    def to_json(self) -> dict:
        return {"prefix": self.prefix, "index": self.index, "matrices": self.matrices,
                "threshold": self.threshold, "experts": [e.to_json() for e in self.experts],
                "similarity": self.similarity, "clusters": self.clusters,
                "recommendations": [r.to_json() for r in self.recommendations],
                "bytes_read": self.bytes_read}


@dataclass
class Analysis:
    moe: MoE
    layers: list[LayerAnalysis]
    threshold: float
    samples_per_matrix: int
    bytes_read: int

    @property
    def recommendations(self) -> list[Recommendation]:
        return [r for layer in self.layers for r in layer.recommendations]

    def with_threshold(self, threshold: float) -> "Analysis":
        """The same measurements with another threshold (no bytes are read again)."""
        layers = [_cluster(LayerAnalysis(l.prefix, l.index, l.experts, l.similarity, l.matrices,
                                         threshold, bytes_read=l.bytes_read)) for l in self.layers]
        return Analysis(self.moe, layers, threshold, self.samples_per_matrix, self.bytes_read)

    def to_json(self) -> dict:
        return {"moe": self.moe.to_json(), "threshold": self.threshold,
                "samples_per_matrix": self.samples_per_matrix, "bytes_read": self.bytes_read,
                "layers": [l.to_json() for l in self.layers],
                "recommendations": [r.to_json() for r in self.recommendations]}


def analyse(checkpoint: Checkpoint, threshold: float = DEFAULT_THRESHOLD,
            samples_per_matrix: int = DEFAULT_SAMPLES_PER_MATRIX, config: dict | None = None,
            progress: Callable[[int, int], object] | None = None) -> Analysis:
    """Measure every MoE layer. `progress(done_experts, total_experts)` returning False cancels."""
    if not 0 < samples_per_matrix:
        raise UsageError("samples_per_matrix must be positive")
    found = detect(checkpoint, config)
    total = sum(layer.expert_count for layer in found.layers)
    done = 0
    start_bytes = checkpoint.bytes_read()
    layers = []
    for layer in found.layers:
        before = checkpoint.bytes_read()
        signatures, matrices = [], _common_leaves(layer)
        for expert in sorted(layer.experts):
            signatures.append(_signature(checkpoint, layer, expert, matrices, samples_per_matrix))
            done += 1
            if progress is not None and progress(done, total) is False:
                raise Cancelled("the expert analysis was cancelled")
        profiles = [_profile(e, sig, _expert_numel(checkpoint, layer, e, matrices))
                    for e, sig in zip(sorted(layer.experts), signatures)]
        analysis = LayerAnalysis(layer.prefix, layer.index, profiles, _similarity(signatures),
                                 matrices, threshold, bytes_read=checkpoint.bytes_read() - before)
        layers.append(_cluster(analysis))
    return Analysis(found, layers, threshold, samples_per_matrix, checkpoint.bytes_read() - start_bytes)


def _common_leaves(layer: MoELayer) -> list[str]:
    return sorted(next(iter(layer.experts.values())))


def expert_tensor(checkpoint: Checkpoint, layer: MoELayer, expert: int, leaf: str) -> Tensor:
    """The expert's matrix as a tensor of its own (a slice of axis 0 for stacked experts)."""
    ref = layer.experts[expert][leaf]
    tensor = checkpoint.tensor(ref.tensor)
    if ref.expert is None:
        return tensor
    info = dtype_of(tensor)
    rest = tensor.shape[1:]
    numel = math.prod(rest)
    if tensor.contiguous and numel % info.block_elems == 0:
        offset = tensor.offset + ref.expert * info.nbytes(numel)
        strides = None
    elif info.block_elems == 1:
        strides_all = tensor.element_strides()
        offset = tensor.offset + ref.expert * strides_all[0] * info.block_bytes
        strides = strides_all[1:]
    else:
        raise UsageError(f"expert {expert} of {tensor.name!r} does not start on a block boundary")
    return Tensor(f"{tensor.name}[{ref.expert}]", tensor.dtype, rest, offset, info.nbytes(numel),
                  source=tensor.source, strides=strides, big_endian=tensor.big_endian)


def _expert_numel(checkpoint, layer, expert, matrices) -> int:
    return sum(expert_tensor(checkpoint, layer, expert, leaf).numel for leaf in matrices)


def _signature(checkpoint, layer, expert, matrices, samples) -> list[float]:
    out: list = []
    for leaf in matrices:
        t = expert_tensor(checkpoint, layer, expert, leaf)
        block = dtype_of(t).block_elems if t.contiguous else 1
        for start, count in plan_windows(t.numel, samples, block, SIGNATURE_WINDOWS):
            out += gather_range(t, start, count)
    if out and not isinstance(out[0], float):
        out = [to_float(v) for v in out]
    if not math.isfinite(sum(out)):
        # Non-finite weights would poison every cosine: they count as zero in the signature.
        out = [v if math.isfinite(v) else 0.0 for v in out]
    return out


def _profile(expert: int, signature: list[float], numel: int) -> ExpertProfile:
    n = len(signature) or 1
    mean_abs = sum(map(abs, signature)) / n
    rms = math.sqrt(_dot(signature, signature) / n)
    return ExpertProfile(expert, mean_abs / rms if rms else 0.0, rms, math.fsum(signature) / n,
                         rms * math.sqrt(numel), len(signature))


def _dot(a: list[float], b: list[float]) -> float:
    # math.sumprod (3.12+, so in Pyodide) is C speed and exact-ish; 3.11 falls back to map at C speed.
    sumprod = getattr(math, "sumprod", None)
    return sumprod(a, b) if sumprod else sum(map(operator.mul, a, b))


def _similarity(signatures: list[list[float]]) -> list[list[float]]:
    """Cosine similarity of every pair: experts x experts dot products of unit signatures."""
    units = []
    for s in signatures:
        norm = math.sqrt(_dot(s, s))
        units.append([v / norm for v in s] if norm else [0.0] * len(s))
    n = len(units)
    matrix = [[1.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            matrix[i][j] = matrix[j][i] = max(-1.0, min(1.0, _dot(units[i], units[j])))
    return matrix


def _cluster(layer: LayerAnalysis) -> LayerAnalysis:
    n = len(layer.similarity)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if layer.similarity[i][j] >= layer.threshold:
                parent[find(j)] = find(i)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    experts = [p.expert for p in layer.experts]
    layer.clusters = [[experts[i] for i in g] for g in groups.values() if len(g) > 1]
    layer.recommendations = []
    for group in (g for g in groups.values() if len(g) > 1):
        keep = max(group, key=lambda i: (sum(layer.similarity[i][j] for j in group), -i))
        for i in group:
            if i != keep:
                layer.recommendations.append(
                    Recommendation(layer.index, experts[i], experts[keep], layer.similarity[i][keep]))
    layer.recommendations.sort(key=lambda r: -r.similarity)
    return layer
