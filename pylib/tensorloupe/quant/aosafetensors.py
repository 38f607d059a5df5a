"""torchao's safetensors flavour (torchao 0.18 prototype/safetensors/safetensors_support.py,
flatten_tensor_state_dict, as transformers saves torchao models): a subclass weight `<m>.<w>` is
stored as `<m>._<w>_<inner>` (qdata, scale, zero_point), and `__metadata__` holds `tensor_names`
(a JSON list) and, under each weight's name, a JSON object {"_type": class name, "_data": its
attributes (block_size, dtype as {"_type": "torch.dtype", "_data": "float32"}),
"_tensor_data_names": [...]}. Every string here comes from the file: it is parsed as JSON data
and quoted where shown.
"""

from __future__ import annotations

import json
import re

from ..model import Checkpoint
from . import torchao
from .logical import as_tensor
from .records import Part

NAMES_KEY = "tensor_names"
SOURCE = "safetensors __metadata__ (torchao flatten_tensor_state_dict)"
ROLES = {"qdata": "codes", "scale": "scale", "zero_point": "zero_point"}
CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
TORCH_FLOATS = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def _json(text):
    try:
        return json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):     # not JSON, or nested past the parser's depth
        return None


def apply(ckpt: Checkpoint) -> None:
    """Group the stored parts of every torchao subclass weight the metadata names."""
    names = _json(ckpt.metadata.get(NAMES_KEY))
    if not isinstance(names, list) or "quantisation" in ckpt.extras:
        return
    stored = {t.name: t for t in ckpt.tensors}
    made, dropped, unread, schemes = {}, set(), 0, set()
    for name in names:
        entry = _json(ckpt.metadata.get(name)) if isinstance(name, str) and "." in name else None
        if not isinstance(entry, dict) or entry.get("_type") in ("Tensor", None):
            continue
        module, weight = name.rsplit(".", 1)
        prefix = f"{module}._{weight}_"
        inner = entry.get("_tensor_data_names")
        inner = [n for n in inner if isinstance(n, str)] if isinstance(inner, list) else []
        parts = [stored[prefix + n] for n in inner if prefix + n in stored]
        cls = entry["_type"]
        attributes = entry.get("_data") if isinstance(entry.get("_data"), dict) else {}
        dtype = attributes.get("dtype")
        dtype = dtype.get("_data") if isinstance(dtype, dict) else None
        codes = stored.get(prefix + "qdata")
        subclass = f"torchao.{cls}" if isinstance(cls, str) and CLASS_NAME.fullmatch(cls) else repr(cls)
        mine = {ROLES.get(p.name[len(prefix):], p.name[len(prefix):]): Part(p.name, p.dtype, p.shape) for p in parts}
        logical = torchao.build(name, codes.shape if codes else (), subclass,
                                {"block_size": attributes.get("block_size")},
                                TORCH_FLOATS.get(dtype, repr(dtype)), mine)
        unreadable = [p.name for p in parts if p.problem or p.source is None]
        if logical.reason or len(parts) != len(inner) or unreadable:
            unread += 1
            why = logical.reason or f"not read: parts {sorted(set(prefix + n for n in inner) - set(stored)) + unreadable}"
            for p in parts[:1]:
                p.info = {**p.info, "quantisation": why}
            ckpt.warnings.append(f"tensor {name!r}: {why}")
            continue
        made[parts[0].name] = as_tensor(logical, tuple(parts))
        schemes.add(made[parts[0].name].info["dequantised from"])
        dropped.update(p.name for p in parts)
    if not made and not unread:
        return
    ckpt.replace_tensors([made.get(t.name, t) for t in ckpt.tensors if t.name in made or t.name not in dropped])
    ckpt.extras["quantisation"] = {"method": "torchao", "source": SOURCE, "schemes": sorted(schemes),
                                   "dequantised": len(made), "packed": unread}
