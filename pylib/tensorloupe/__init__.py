"""tensorloupe: look inside model checkpoints without executing anything.

    import tensorloupe
    ckpt = tensorloupe.open("model.safetensors")      # reads the header only
    t = ckpt.tensor("model.embed_tokens.weight")
    s = tensorloupe.sample(t, 65536)                  # reads a few spread-out windows
    print(s.stats.mean, s.stats.std)
"""

from __future__ import annotations


from . import detect, targets
from .errors import TensorloupeError
from .model import Checkpoint, Tensor
from .sample import (Grid, Histogram, Sample, Stats, exact_histogram, exact_stats, grid, histogram,
                     sample, values)
from .source import ByteSource, open_source

__version__ = "0.1.0"  # the same as pyproject.toml's (tests/test_cli_polish.py checks)

__all__ = ["open", "Checkpoint", "Tensor", "TensorloupeError", "sample", "histogram", "grid",
           "exact_stats", "exact_histogram", "values", "Sample", "Stats", "Histogram", "Grid", "ByteSource"]


def open(target, name: str | None = None) -> Checkpoint:  # noqa: A001 - mirrors builtins.open on purpose
    """Open a checkpoint from a path, URL, bytes, a ByteSource, a folder, an index json, or a list
    of shard paths (targets.py says what each names)."""
    if isinstance(target, (list, tuple)) or targets.needs_resolving(target):
        from . import shards
        return shards.open_all([open_source(t) for t in targets.resolve(target).files])
    source = open_source(target, name)
    try:
        return detect.read(source)
    except TensorloupeError as e:
        source.close()
        raise e.located(file=source.name)
    except Exception:
        source.close()
        raise
