"""Quantised weights stored inside safetensors as groups of stored tensors (issue 24).

`group(descriptors, config, source)` turns stored parts into logical tensors (`groups.py`);
`dequantise(logical, read, r0, r1)` returns the float32 values of logical rows [r0, r1) reading
only the packed rows and scale rows those rows need (`decode.py`). The schemes are one table
(`schemes.py`). Pure Python: this runs in Pyodide, where numpy is not available.
"""

from . import bnb, cells, decode, groups, hqq, modelopt, sparse24
from .decode import dequantise
from .groups import Logical, Part, Scheme, group

# Layouts with a module of their own: each names its builders (groups.py), decoders (decode.py)
# and any cell decoders (cells.py).
for _module in (bnb, hqq, modelopt, sparse24):
    groups.REGISTERED.update(_module.BUILDERS)
    decode.DECODERS.update(_module.DECODERS)
    cells.CELLS.update(getattr(_module, "CELLS", {}))

__all__ = ["Logical", "Part", "Scheme", "dequantise", "group"]
