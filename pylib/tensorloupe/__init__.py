"""tensorloupe: look inside model checkpoints without executing anything.

    import tensorloupe
    ckpt = tensorloupe.open("model.safetensors")      # reads the header only
    t = ckpt.tensor("model.embed_tokens.weight")
    s = tensorloupe.sample(t, 65536)                  # reads a few spread-out windows
    print(s.stats.mean, s.stats.std)
    cmp = tensorloupe.compare("model.safetensors", "model-Q8_0.gguf")   # tensor by tensor
    print(cmp.summary["headline"])
"""

import importlib as _importlib
import os as _os

from .errors import TensorloupeError
from .model import Checkpoint, Tensor
from .sampler.sampling import (Grid, Histogram, Sample, Stats, exact_histogram, exact_stats, grid,
                               histogram, sample, values)
from .opening import detect, targets
from .source import ByteSource, is_url, open_source

# The health scan and the comparison are imported when first used (__getattr__): the browser's
# worker imports this package as it boots, and in Pyodide they are a fifth of its imports (~20
# ms, dataclasses and all) that the first screen does not need.
_LATER = {"health": ("healthscan", "health"), "health_cost": ("healthscan", "health_cost"),
          "Comparison": ("comparison", "Comparison")}
COMPARE_SAMPLES = 1 << 14   # compare()'s default: comparison.DEFAULT_SAMPLES (tests/test_lazy_imports.py)

__version__ = "0.1.0"  # the same as pyproject.toml's (tests/test_cli_polish.py checks)


def _tensor_html(tensor: Tensor) -> str:
    """Tensor._repr_html_ (a notebook's view: notebook/), attached here, where the API is
    assembled, because the model layer sits below the sampler it reads with (test_layering.py)."""
    from .notebook import tensor_html
    return tensor_html(tensor)


Tensor._repr_html_ = _tensor_html
del _tensor_html

__all__ = ["open", "Checkpoint", "Tensor", "TensorloupeError", "sample", "histogram", "grid",
           "exact_stats", "exact_histogram", "values", "health", "health_cost", "compare",
           "Comparison", "Sample", "Stats", "Histogram", "Grid", "ByteSource", "write_safetensors",
           "write_pruned"]


def open(target, name: str | None = None, *, follow_redirects: bool = False) -> Checkpoint:  # noqa: A001 - mirrors builtins.open on purpose
    """Open a checkpoint from a path, URL, bytes, a ByteSource, a folder, an index json, or a list
    of shard paths (opening/targets.py says what each names). A URL is read by Range requests; a redirect
    to another site is followed only with follow_redirects."""
    if isinstance(target, (list, tuple)) or targets.needs_resolving(target):
        from .opening import shards
        # URLs: every part's first request (its header bytes) in flight at once, each header
        # read as soon as it arrives.
        resolved = targets.resolve(target)
        files = resolved.files
        follow = resolved.follows(follow_redirects)
        return _from_cache(_dequantised(_say_redirects(shards.open_each(
            files, lambda t: open_source(t, follow_redirects=follow))), files), resolved.hub)
    source = open_source(target, name, follow_redirects=follow_redirects)
    try:
        return _dequantised(_say_redirects(detect.read(source)), [target])
    except TensorloupeError as e:
        source.close()
        raise e.located(file=source.name)
    except Exception:
        source.close()
        raise


def _dequantised(ckpt: Checkpoint, files: list) -> Checkpoint:
    """A local checkpoint with a `config.json` beside it that has a `quantization_config`: its
    quantised weights become tensors of real values (quant/logical.py). A URL's config.json is
    not fetched here (one more request per open); the CLI's inspect and the page pass theirs.
    A LoRA adapter's pairs become their ΔW first (_adapted)."""
    _adapted(ckpt, [_os.fspath(f) for f in files if isinstance(f, (str, _os.PathLike))])
    local = [f for f in files if isinstance(f, (str, _os.PathLike)) and not is_url(f)]
    if not local or len(local) < len(files):
        return ckpt
    from .opening import beside
    paths = [_os.fspath(f) for f in local]
    found = beside.config_for(paths)
    config, where = found.data, beside.CONFIG_NAME
    if not (isinstance(config, dict) and ("quantization_config" in config or "quantization" in config)):
        found = beside.quantisation_for(paths)    # a ModelOpt export's hf_quant_config.json
        config, where = found.data, found.where
        if found.problem:
            ckpt.warnings.append(f"{found.problem} (its quantisation is not applied)")
    if config is not None:
        from .quant.logical import apply
        try:
            apply(ckpt, config, where)
        except BaseException:
            ckpt.close()
            raise
    return ckpt


def _adapted(ckpt: Checkpoint, files: list[str]) -> None:
    """A LoRA adapter (adapters/): its pairs become ΔW tensors, with the adapter_config.json
    beside it (beside a URL: one more request, made only for a PEFT adapter's names). The
    adapters package is imported only when the names look like an adapter's."""
    from .adapters.pairs import layout_of
    if layout_of(t.name for t in ckpt.tensors) is None:
        return
    from . import adapters
    try:
        adapters.adopt(ckpt, files)
    except BaseException:
        ckpt.close()
        raise


def _from_cache(ckpt: Checkpoint, hub) -> Checkpoint:
    """A model named org/model: the checkpoint says it was read from the Hugging Face cache, or
    from the Hub."""
    if hub is not None:
        ckpt.extras[hub.EXTRAS_KEY] = hub.to_json()
        ckpt.warnings.insert(0, f"opened {hub.said()}")
    return ckpt


def _say_redirects(ckpt: Checkpoint) -> Checkpoint:
    """A URL the server redirected: the checkpoint says where its bytes came from."""
    for source in ckpt.sources:
        root = source.root()
        if getattr(root, "redirected_to", None):
            ckpt.warnings.insert(0, f"{root.url} was redirected to {root.redirected_to}; the "
                                 "file was read from there")
    return ckpt


def compare(a, b, samples: int = COMPARE_SAMPLES, exact: bool = False, tensors=None,
            progress=None) -> "Comparison":
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
        from .comparison import compare as compare_checkpoints
        return compare_checkpoints(a, b, samples, exact, tensors, progress)
    except BaseException:
        for ckpt in opened:
            ckpt.close()
        raise


def write_safetensors(checkpoint, out, names=None, max_shard_size=None, progress=None,
                      dtype=None, strict=True) -> list[str]:
    """Write a checkpoint (a Checkpoint, or anything `open` takes) as safetensors, tensor by
    tensor, the pickle never run: `out` is the file, or with `max_shard_size` (bytes or "5GB")
    the folder of a transformers shard set. `names`: only these tensors. `dtype` ("F32", "F16",
    "BF16"): every floating-point tensor, dequantised ones too, as its values in it. A tensor
    that cannot be written, or whose bytes fail to read, raises; with strict=False it is
    skipped, and `__metadata__["skipped"]` says why. Returns the paths
    written. A file whose pickle names a dangerous global is written all the same (its tensors
    are data): check `ckpt.extras["safety"]` first, as the CLI does."""
    from .writing import plan, provenance, safetensors as writer
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else open(checkpoint)
    try:
        extra: dict[str, str] = {}
        entries, skipped, _ = provenance.described(
            ckpt, plan.select(ckpt, None if names is None else list(names)), dtype, strict, extra)
        size = None if max_shard_size is None else plan.parse_size(max_shard_size)
        return writer.write(ckpt, _os.fspath(out), entries, size, __version__, progress, extra,
                            strict, skipped)
    finally:
        if ckpt is not checkpoint:
            ckpt.close()


def write_pruned(checkpoint, out, drop=None, recommended=False, threshold=None, config=None,
                 max_shard_size=None, progress=None) -> list[str]:
    """Write the folder `out` (model.safetensors or a shard set, config.json with the new expert
    count, the tokenizer files beside the source) without the experts `drop` names ("0:4,1:7" or
    {layer: [experts]}), or with `recommended`, those the Experts analysis finds redundant.
    `config`: the model's config.json as a dict (default: the one beside a local source)."""
    from .opening import beside
    from .writing import folder, plan, provenance, prune
    from .writing.safetensors import inputs
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else open(checkpoint)
    try:
        if config is None:
            config = beside.config_for(inputs(ckpt)).data
        result = prune.plan(ckpt, config, drop, recommended, threshold)
        extra = prune.metadata(result)
        entries = provenance.described(ckpt, result.tensors, None, True, extra)[0]
        size = None if max_shard_size is None else plan.parse_size(max_shard_size)
        return folder.write_model(ckpt, _os.fspath(out), entries, result.config, size, __version__,
                                  progress, extra)
    finally:
        if ckpt is not checkpoint:
            ckpt.close()


def __getattr__(name: str):
    """The names of _LATER, imported on first use."""
    if name not in _LATER:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _LATER[name]
    value = getattr(_importlib.import_module(f".{module}", __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public API only (a notebook's completion): not the modules this one imports."""
    return sorted({*__all__, "__version__", "COMPARE_SAMPLES"})
