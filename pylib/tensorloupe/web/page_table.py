"""The tensor table of the page's model payload, in a compact form web/model.js turns back into
`inspect --json`'s tensor records (less `info`: format-specific extras, which the "tensor" reply
carries for the tensor on show).

A record is {name, dtype, shape, numel, nbytes, offset, strides, problem, file}. Most of it
repeats: 163 shards of DeepSeek-style experts are 39,120 tensors of a handful of (dtype, shape)
pairs. So each distinct (dtype, shape, numel, nbytes, strides, problem) is sent once, as a *kind*,
and a tensor is its name, its kind's number, its offset and its file's position in the payload's
"files". The names travel as one newline-joined string when no name holds a newline (one string
is cheap to copy between threads and to split; 39,120 strings were not), else as a list.
As records, the same table was 4.6 MB of JSON and took ~0.3 s to build and send in the browser.

    {"count": N, "names": "a\\nb" | ["a", "b"], "kind_columns": [...], "kinds": [[...], ...],
     "kind": [k, ...], "offset": [int | null, ...], "file": [int | null, ...]}
"""

from __future__ import annotations

import math
from collections import Counter

from ..model import Checkpoint

KIND_COLUMNS = ("dtype", "shape", "numel", "nbytes", "strides", "problem")
NAME_SEPARATOR = "\n"


def page_table(ckpt: Checkpoint) -> dict:
    tensors = ckpt.tensors
    kinds: dict[tuple, int] = {}
    # A dequantised weight (quant/logical.py) holds its packed parts' bytes in the file.
    kind = [kinds.setdefault((t.dtype, t.shape, t.stored_nbytes, t.strides, t.problem), len(kinds))
            for t in tensors]
    # A tensor's file is its source's (Tensor.file): one lookup per source, not per tensor.
    where = {name: i for i, name in enumerate(ckpt.files)}
    sources = [t.source for t in tensors]
    file_of = {s: None if s is None else where.get(s.root().name) for s in set(sources)}
    names = [t.name for t in tensors]
    joined = NAME_SEPARATOR.join(names)
    # Counted at C speed: as many separators as gaps means no name holds one.
    one_string = bool(names) and joined.count(NAME_SEPARATOR) == len(names) - 1
    return {
        "count": len(tensors),
        "names": joined if one_string else names,
        "kind_columns": list(KIND_COLUMNS),
        "kinds": [[dtype, list(shape), math.prod(shape), nbytes,
                   None if strides is None else list(strides), problem or None]
                  for dtype, shape, nbytes, strides, problem in kinds],
        "kind": kind,
        "offset": [t.known_file_offset for t in tensors],
        "file": [file_of[s] for s in sources],
    }


def bytes_by_dtype(table: dict) -> dict[str, int]:
    """Bytes held by each dtype, in the order the dtypes first appear (from the kinds: one
    multiplication per kind, not an addition per tensor)."""
    counts = Counter(table["kind"])
    out: dict[str, int] = {}
    for k, (dtype, _, _, nbytes, _, _) in enumerate(table["kinds"]):
        out[dtype] = out.get(dtype, 0) + counts[k] * nbytes
    return out


def records(table: dict, files: list[str]) -> list[dict]:
    """The table as the page's records (what web/model.js decodeModel builds), for the tests and
    the Pyodide parity check."""
    names = table["names"]
    if isinstance(names, str):
        names = names.split(NAME_SEPARATOR) if table["count"] else []
    kinds = [dict(zip(table["kind_columns"], values)) for values in table["kinds"]]
    return [{"name": name, **kinds[k], "offset": offset,
             "file": None if file is None else files[file]}
            for name, k, offset, file in zip(names, table["kind"], table["offset"], table["file"])]
