"""tensorloupe: look inside model checkpoints without executing anything.

    import tensorloupe
    ckpt = tensorloupe.open("model.safetensors")      # reads the header only
    t = ckpt.tensor("model.embed_tokens.weight")
    s = tensorloupe.sample(t, 65536)                  # reads a few spread-out windows
    print(s.stats.mean, s.stats.std)
"""

from __future__ import annotations


from . import detect
from .errors import TensorloupeError
from .model import Checkpoint, Tensor
from .sample import Grid, Histogram, Sample, Stats, exact_stats, grid, histogram, sample, values
from .source import ByteSource, open_source

__all__ = ["open", "Checkpoint", "Tensor", "TensorloupeError", "sample", "histogram", "grid",
           "exact_stats", "values", "Sample", "Stats", "Histogram", "Grid", "ByteSource"]


def open(target, name: str | None = None) -> Checkpoint:  # noqa: A001 - mirrors builtins.open on purpose
    """Open a checkpoint from a path, bytes, a ByteSource, or a list of shard paths."""
    if isinstance(target, (list, tuple)):
        from . import shards
        from .parallel import MAX_WORKERS, map_parallel
        from .source import is_url
        # URLs: every part's first request (its header bytes) in flight at once.
        workers = MAX_WORKERS if any(is_url(t) for t in target) else 1
        return shards.open_all(map_parallel(open_source, target, workers))
    source = open_source(target, name)
    try:
        return detect.read(source)
    except TensorloupeError as e:
        source.close()
        raise e.located(file=source.name)
    except Exception:
        source.close()
        raise
