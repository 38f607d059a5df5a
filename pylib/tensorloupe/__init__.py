"""tensorloupe: look inside model checkpoints without executing anything.

    import tensorloupe
    ckpt = tensorloupe.open("model.safetensors")      # reads the header only
    t = ckpt.tensor("model.embed_tokens.weight")
    s = tensorloupe.sample(t, 65536)                  # reads a few spread-out windows
    print(s.stats.mean, s.stats.std)
    cmp = tensorloupe.compare("model.safetensors", "model-Q8_0.gguf")   # tensor by tensor
    print(cmp.summary["headline"])
"""

from __future__ import annotations


from . import detect
from .compare import DEFAULT_SAMPLES as COMPARE_SAMPLES, Comparison, compare as _compare
from .errors import TensorloupeError
from .model import Checkpoint, Tensor
from .sample import Grid, Histogram, Sample, Stats, exact_stats, grid, histogram, sample, values
from .source import ByteSource, open_source

__all__ = ["open", "Checkpoint", "Tensor", "TensorloupeError", "sample", "histogram", "grid",
           "exact_stats", "values", "Sample", "Stats", "Histogram", "Grid", "ByteSource", "compare",
           "Comparison"]


def open(target, name: str | None = None) -> Checkpoint:  # noqa: A001 - mirrors builtins.open on purpose
    """Open a checkpoint from a path, bytes, a ByteSource, or a list of shard paths."""
    if isinstance(target, (list, tuple)):
        from . import shards
        return shards.open_all([open_source(t) for t in target])
    source = open_source(target, name)
    try:
        return detect.read(source)
    except TensorloupeError as e:
        source.close()
        raise e.located(file=source.name)
    except Exception:
        source.close()
        raise


def compare(a, b, samples: int = COMPARE_SAMPLES, exact: bool = False, tensors=None,
            progress=None) -> Comparison:
    """Compare two checkpoints (Checkpoints, or anything `open` takes) tensor by tensor; A is the
    reference. Sampled (`samples` elements per tensor, the same positions of both) unless
    `exact`; byte identity is always decided on the bytes. Checkpoints it opens stay open for
    views of the pairs: close them with the result (`with tensorloupe.compare(...) as cmp:`)."""
    opened = []
    try:
        if not isinstance(a, Checkpoint):
            a = open(a)
            opened.append(a)
        if not isinstance(b, Checkpoint):
            b = open(b)
            opened.append(b)
        return _compare(a, b, samples, exact, tensors, progress)
    except BaseException:
        for ckpt in opened:
            ckpt.close()
        raise
