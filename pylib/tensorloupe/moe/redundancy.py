"""Which experts of an MoE layer are redundant, from the weights alone (no calibration data).

For every expert of a layer we read the same element positions of each of its matrices (the same
block-aligned windows, so signatures line up element for element), and compute:

  signature   the concatenated samples of all the expert's matrices (gate/up/down, w1/w2/w3).
              All of them, not just one: two experts only compute the same function if every matrix
              matches, and using all three keeps a coincidence in one matrix from pairing them.
  score       AIMER-style: mean(|w|) / rms(w) over the signature (arXiv 2603.18492 scores experts
              from this ratio without data; it is scale-free, so it compares experts of one layer).
  rms, norm   the root mean square and the Frobenius norm it implies for the whole expert.
              rms and mean come from the fixed-point sums the similarities are computed with
              (gram.Gram: within gram.max_error / 2, relative to the rms, a few 1e-6 at most);
              mean(|w|) is an exact sum.

Per layer: the experts x experts cosine similarity of signatures, clusters of near-duplicates
(similarity >= threshold, single linkage, as in Zhang et al. 2025's similarity grouping) and a
ranked recommendation to drop all but one expert of each cluster, keeping the member most similar
to the rest (the medoid; the lowest index on ties).

Cost is bounded: at most `samples_per_matrix` elements (rounded to whole blocks) of each matrix of
each expert are read, whatever the size of the model.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from typing import Callable, Iterator, NamedTuple, Protocol

from ..dtypes import to_float
from ..errors import Cancelled, UsageError
from ..sampler.gather import (WindowBytes, contiguous_windows, decode_window, dtype_of,
                              gather_windows, prefetch_windows, read_windows)
from .gram import Gram, gram_steps
from ..model import Checkpoint, Tensor
from . import MoE, MoELayer, detect
from ..sampler.sampling import plan_windows

DEFAULT_SAMPLES_PER_MATRIX = 4096
DEFAULT_THRESHOLD = 0.9
# Few, longer windows per matrix: a whole model has thousands of expert matrices and every read
# costs ~1.5 ms in the browser, while 4 windows already cover the start, middle and end.
SIGNATURE_WINDOWS = 4
# Layers whose signature reads are started ahead of the one being compared (ByteSource.prefetch).
PREFETCH_LAYERS = 2
# Layers a helper (LayerHelper) may hold at once: the one it measures and one queued behind it,
# so that it never waits for the next. It is handed a layer whenever it holds fewer, so the
# share of layers it measures follows the two threads' speeds (a handed layer costs this thread
# only its reads).
HELPER_LAYERS = 2
# Similarities closer than this many decimal digits rank as equal (see _tie).
TIE_DIGITS = 9


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
    helped: int = 0          # layers a helper measured (LayerHelper)

    @property
    def complete(self) -> bool:
        """Every MoE layer is analysed (an analysis in progress holds the finished layers only)."""
        return len(self.layers) == len(self.moe.layers)

    @property
    def recommendations(self) -> list[Recommendation]:
        return [r for layer in self.layers for r in layer.recommendations]

    def with_threshold(self, threshold: float) -> "Analysis":
        """The same measurements with another threshold (no bytes are read again)."""
        layers = [_cluster(LayerAnalysis(l.prefix, l.index, l.experts, l.similarity, l.matrices,
                                         threshold, bytes_read=l.bytes_read)) for l in self.layers]
        return Analysis(self.moe, layers, threshold, self.samples_per_matrix, self.bytes_read, self.helped)

    def to_json(self) -> dict:
        return {"moe": self.moe.to_json(), "threshold": self.threshold,
                "samples_per_matrix": self.samples_per_matrix, "bytes_read": self.bytes_read,
                "layers": [l.to_json() for l in self.layers],
                "recommendations": [r.to_json() for r in self.recommendations]}


def analyse(checkpoint: Checkpoint, threshold: float = DEFAULT_THRESHOLD,
            samples_per_matrix: int = DEFAULT_SAMPLES_PER_MATRIX, config: dict | None = None,
            progress: Callable[[int, int], object] | None = None) -> Analysis:
    """Measure every MoE layer. `progress(done_experts, total_experts)` returning False cancels."""
    reported = 0
    for done, total, analysis in analyse_steps(checkpoint, threshold, samples_per_matrix, config):
        if progress is not None and done > reported:
            reported = done
            if progress(done, total) is False:
                raise Cancelled("the expert analysis was cancelled")
    return analysis


def analyse_steps(checkpoint: Checkpoint, threshold: float = DEFAULT_THRESHOLD,
                  samples_per_matrix: int = DEFAULT_SAMPLES_PER_MATRIX,
                  config: dict | None = None,
                  helper: "LayerHelper | None" = None) -> Iterator[tuple[int, int, Analysis]]:
    """The analysis in small steps: yields (done experts, total experts, analysis so far).

    A generator so that callers can stop between steps: `analyse` through its progress callback,
    the browser worker between messages (a cancel must be able to arrive). A step measures one
    expert, or compares one expert with the rest of its layer once the layer is measured (so
    `done` may repeat; it counts a whole layer at once when the layer is handed to a helper). The analysis so far holds the finished layers (`complete` once all are)
    and its `bytes_read` counts every byte read up to this step; the last one is the whole
    analysis. A model without experts yields once: (0, 0, an empty analysis). Arguments are
    checked and the experts found now, before the first step. A `helper` (the page's second
    Python) measures the layers it is handed while this one goes on with the next
    (HELPER_LAYERS says which)."""
    if not 0 < samples_per_matrix:
        raise UsageError("samples_per_matrix must be positive")
    found = detect(checkpoint, config)
    return _steps(checkpoint, found, threshold, samples_per_matrix, helper)


class Measures(NamedTuple):
    """A layer's comparison, its experts in order: the Gram of their signatures, and each
    signature's exact sum of magnitudes (math.fsum)."""
    gram: Gram
    magnitudes: list[float]


def measure_bytes(windows: list[WindowBytes], per_expert: list[int]) -> Measures:
    """A layer's Measures from the bytes of its signature windows (gather.read_windows): what
    the page's second Python computes for a layer it is handed, and this thread if it cannot.
    The same decoding and the same integers as the layers compared here: the same bits."""
    signatures = list(_grouped((decode_window(*w) for w in windows), per_expert))
    *_, gram = gram_steps(signatures)
    return Measures(gram, [_magnitude_sum(s) for s in signatures])


class Handover(Protocol):
    """A layer handed to a LayerHelper: its Measures, once the helper has answered."""

    def done(self) -> bool:
        """Whether the answer is here (calling would not wait)."""

    def __call__(self) -> Measures:
        """The layer's Measures (waits for them)."""


class LayerHelper(Protocol):
    """Something beside this thread that measures a layer from the bytes of its signatures
    while this thread goes on (web/offload.py: a second Pyodide in the page). Its answer must be
    `measure_bytes`', bit for bit: the same code on the same bytes."""

    def ready(self) -> bool:
        """Whether it can take a layer now (it may still be starting)."""

    def start(self, windows: list[WindowBytes], per_expert: list[int]) -> Handover:
        """Hand it a layer's signature bytes (it queues them behind the layers it holds)."""


@dataclass
class _Held:
    """A layer a helper holds: what finishing it needs besides its answer."""
    layer: MoELayer
    samples: list[int]          # each expert's signature length
    bytes_read: int
    answer: Handover


def _steps(checkpoint, found: MoE, threshold, samples_per_matrix, helper=None):
    total = sum(layer.expert_count for layer in found.layers)
    done = helped = 0
    start_bytes = checkpoint.bytes_read()
    layers: list[LayerAnalysis] = []

    def so_far() -> Analysis:
        return Analysis(found, list(layers), threshold, samples_per_matrix,
                        checkpoint.bytes_read() - start_bytes, helped)

    def finish(layer, samples, gram, magnitudes, bytes_read) -> LayerAnalysis:
        matrices = _common_leaves(layer)
        profiles = [_profile(e, n, m, _expert_numel(checkpoint, layer, e, matrices), norm, sum_)
                    for e, n, m, norm, sum_ in zip(sorted(layer.experts), samples, magnitudes,
                                                   gram.norms, gram.sums)]
        return _cluster(LayerAnalysis(layer.prefix, layer.index, profiles, gram.cosines, matrices,
                                      threshold, bytes_read=bytes_read))

    if not total:
        yield 0, 0, so_far()
    # The layers to come: their windows, planned (and their reads started) PREFETCH_LAYERS
    # ahead, and the bytes their prefetch counted (a File counts reads when it starts them).
    upcoming = [(*_signature_windows(checkpoint, layer, samples_per_matrix), 0)
                for layer in found.layers[:1]]
    # Layers measured and not yet in `layers` (they are added in order): finished, or held by
    # the helper.
    waiting: deque[LayerAnalysis | _Held] = deque()

    def add_finished(wait: bool) -> None:
        nonlocal helped
        while waiting:
            front = waiting[0]
            if isinstance(front, _Held):
                if not wait and not front.answer.done():
                    return
                measures = front.answer()
                front = finish(front.layer, front.samples, measures.gram, measures.magnitudes,
                               front.bytes_read)
                helped += 1
            waiting.popleft()
            layers.append(front)

    def held() -> int:
        return sum(1 for entry in waiting if isinstance(entry, _Held) and not entry.answer.done())

    for number, layer in enumerate(found.layers):
        windows, per_expert, prefetched = upcoming.pop(0)
        last = number + 1 == len(found.layers)
        # The helper measures this layer (from the bytes read here) while this thread goes on
        # with the next layers, comparing them itself whenever the helper already holds enough.
        # Never the last layer: nothing would go on beside it.
        hand = (helper is not None and not last and held() < HELPER_LAYERS
                and contiguous_windows(windows) and helper.ready())
        before = checkpoint.bytes_read()
        if hand:
            raw = list(read_windows(windows))
            counts = iter([w.count for w in raw])
            samples = [sum(islice(counts, n)) for n in per_expert]
            done += len(per_expert)
            answer = helper.start(raw, per_expert)
        else:
            signatures = []
            for signature in _signatures(windows, per_expert):
                signatures.append(signature)
                done += 1
                yield done, total, so_far()
        bytes_read = prefetched + checkpoint.bytes_read() - before
        # The next layers' reads are started now (a browser File reads them in other threads)
        # and arrive while this layer's experts are compared: two ahead, as the next layer may
        # be handed over at once and go straight on to the one after.
        for ahead in found.layers[number + 1 + len(upcoming):number + 1 + PREFETCH_LAYERS]:
            planned = _signature_windows(checkpoint, ahead, samples_per_matrix)
            before = checkpoint.bytes_read()
            prefetch_windows(planned[0])
            upcoming.append((*planned, checkpoint.bytes_read() - before))
        if hand:
            waiting.append(_Held(layer, samples, bytes_read, answer))
        else:
            gram = None
            for gram in gram_steps(signatures):
                # Comparing experts is a few steps (gram.py): a cancel may arrive between them.
                yield done, total, so_far()
            waiting.append(finish(layer, [len(s) for s in signatures], gram,
                                  [_magnitude_sum(s) for s in signatures], bytes_read))
        add_finished(wait=last)
        yield done, total, so_far()


@dataclass
class Cost:
    """What an analysis will read, before it runs: the bound the page states next to its button."""
    samples_per_matrix: int
    experts: int
    layers: int
    matrices: list[str]          # the signature leaves of the first layer (the same in every layer)
    elements_per_expert: int     # the most over all layers
    bytes_per_expert: int        # the most over all layers
    total_bytes: int
    exact: bool                  # False if the reads may exceed the plan a little (see cost())

    def to_json(self) -> dict:
        return {"samples_per_matrix": self.samples_per_matrix, "experts": self.experts,
                "layers": self.layers, "matrices": self.matrices,
                "elements_per_expert": self.elements_per_expert,
                "bytes_per_expert": self.bytes_per_expert, "total_bytes": self.total_bytes,
                "exact": self.exact}


def cost(checkpoint: Checkpoint, found: MoE,
         samples_per_matrix: int = DEFAULT_SAMPLES_PER_MATRIX) -> Cost:
    """The bytes `analyse` reads for the MoE `found`: the same windows, counted without reading."""
    if not 0 < samples_per_matrix:
        raise UsageError("samples_per_matrix must be positive")
    per_expert_bytes = per_expert_elems = total = 0
    exact = True
    for layer in found.layers:
        for expert in layer.experts:
            elements = nbytes = 0
            for leaf in _common_leaves(layer):
                t = expert_tensor(checkpoint, layer, expert, leaf)
                block, windows = _windows(t, samples_per_matrix)
                # Strided views may read a little more; a torch storage not yet positioned adds
                # the read of its ZIP local header.
                exact = exact and t.contiguous and t.known_file_offset is not None
                for start, count in windows:
                    elements += count
                    # gather_range reads the whole blocks the window touches
                    nbytes += ((start + count - 1) // block - start // block + 1) * dtype_of(t).block_bytes
            per_expert_bytes = max(per_expert_bytes, nbytes)
            per_expert_elems = max(per_expert_elems, elements)
            total += nbytes
    matrices = _common_leaves(found.layers[0]) if found.layers else []
    return Cost(samples_per_matrix, sum(l.expert_count for l in found.layers), len(found.layers),
                matrices, per_expert_elems, per_expert_bytes, total, exact)


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


def _windows(tensor: Tensor, samples: int) -> tuple[int, list[tuple[int, int]]]:
    """The element windows a signature reads from one matrix, block-aligned, at the same
    positions in every expert (what `_signatures` reads and `cost` counts); and the block size."""
    block = dtype_of(tensor).block_elems if tensor.contiguous else 1
    return block, plan_windows(tensor.numel, samples, block, SIGNATURE_WINDOWS)


def _signature_windows(checkpoint, layer, samples) -> tuple[list, list[int]]:
    """The (tensor, start, count) windows of every expert's signature, experts in order, and
    how many windows each expert has."""
    windows, per_expert = [], []
    matrices = _common_leaves(layer)
    for expert in sorted(layer.experts):
        before = len(windows)
        for leaf in matrices:
            t = expert_tensor(checkpoint, layer, expert, leaf)
            windows += [(t, start, count) for start, count in _windows(t, samples)[1]]
        per_expert.append(len(windows) - before)
    return windows, per_expert


def _signatures(windows, per_expert) -> Iterator[list[float]]:
    """Each expert's signature in turn; the windows of a layer's experts are read together
    (gather_windows batches them into a few vectored reads)."""
    return _grouped(gather_windows(windows), per_expert)


def _grouped(values: Iterator[list], per_expert: list[int]) -> Iterator[list[float]]:
    """The windows' values joined into each expert's signature (`per_expert` windows each)."""
    for count in per_expert:
        out: list = []
        for _ in range(count):
            out += next(values)
        yield _clean(out)


def _clean(out: list) -> list[float]:
    if out and not isinstance(out[0], float):
        out = [to_float(v) for v in out]
    if not math.isfinite(sum(out)):
        # Non-finite weights would poison every cosine: they count as zero in the signature.
        out = [v if math.isfinite(v) else 0.0 for v in out]
    return out


def _profile(expert: int, samples: int, magnitudes: float, numel: int, norm: float,
             total: float) -> ExpertProfile:
    """The expert's profile from its signature's length, sum of magnitudes (exact), and norm and
    sum as the similarities measured them (gram.Gram: within max_error / 2 of exact, relative
    to the norm)."""
    n = samples or 1
    rms = norm / math.sqrt(n)
    mean_abs = magnitudes / n
    return ExpertProfile(expert, mean_abs / rms if rms else 0.0, rms, total / n,
                         rms * math.sqrt(numel), samples)


def _magnitude_sum(signature: list[float]) -> float:
    """sum(|w|), exact (math.fsum): the same bits in CPython 3.11 and in Pyodide's 3.12+, whose
    sum() and math.sumprod round differently."""
    return math.fsum(_magnitudes(signature))


_CLEAR_SIGN = bytes(b & 0x7F for b in range(256))
_SIGN_BYTE = 7 if sys.byteorder == "little" else 0


def _magnitudes(values: list[float]) -> array:
    """|v| of every value, by clearing the doubles' sign bits in bulk (map(abs) costs more, in
    wasm most of all)."""
    raw = bytearray(array("d", values))
    raw[_SIGN_BYTE::8] = raw[_SIGN_BYTE::8].translate(_CLEAR_SIGN)
    return array("d", raw)


def _tie(value: float) -> float:
    # Near-equal values (copies of an expert: 1.0 or 1 - 2e-16, parallel ones within 1e-15) rank
    # as equal, so that the lowest index wins a tie between copies: rankings compare them rounded.
    return round(value, TIE_DIGITS)


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
        keep = max(group, key=lambda i: (_tie(math.fsum(layer.similarity[i][j] for j in group)), -i))
        for i in group:
            if i != keep:
                layer.recommendations.append(
                    Recommendation(layer.index, experts[i], experts[keep], layer.similarity[i][keep]))
    layer.recommendations.sort(key=lambda r: (-_tie(r.similarity), r.drop))
    return layer
