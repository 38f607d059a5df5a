"""The element types tensorloupe can decode, as one table: plain types (IEEE floats, fp8/fp6/fp4,
integers, complex, bool; `plain`) and ggml's quantized blocks (`ggml/`).

Every dtype is a `DType` row: `block_elems` elements stored in `block_bytes` bytes, with an exact
decoder to Python numbers. Readers map their own type names onto these rows; the sampler only ever
deals in whole blocks, so it needs no per-format cases.
"""

from __future__ import annotations

from .plain import DTYPES as PLAIN_DTYPES
from .plain import DType, to_float

__all__ = ["DType", "lookup", "to_float"]


def lookup(name: str) -> DType | None:
    """The DType called `name` (plain or ggml-quantized), or None if we do not know it. The plain
    names and the ggml names do not overlap (a test checks), so the ggml codecs are imported only
    for a name that is not plain: a safetensors or torch file never pays for them."""
    found = PLAIN_DTYPES.get(name)
    if found is None:
        from .ggml import QUANT_DTYPES
        found = QUANT_DTYPES.get(name)
    return found
