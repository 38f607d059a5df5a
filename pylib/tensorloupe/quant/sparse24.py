"""compressed-tensors `sparse-24-bitmask` (quantization_config.sparsity_config.format): a 2:4
sparse weight stored as `<module>.shape` (I64 [2, 1]), `<module>.compressed` [rows, cols / 2]
(the kept values, in the weight's dtype) and `<module>.bitmask` U8 [rows, ceil(cols / 8)].

compressed-tensors 0.12 compressors/sparse_compressors/sparse_24_bitmask.py (the format left the
library in 0.20; its files are still written by llm-compressor's older releases):
pack_bitmasks is numpy.packbits(mask, axis=-1, bitorder="little"), so column c of a row is bit
c % 8 of byte c // 8; sparse24_bitmask_decompress scatters the kept values, in row-major order,
to the set bits, zeros elsewhere. Every row keeps cols / 2 values (two of each four), so a row
decodes from its own row of each part; a row whose mask says otherwise is a FormatError.
Sparsity over quantised codes (a quantisation config_groups beside it) is not read.
"""

from __future__ import annotations

from array import array

from ..errors import FormatError
from .decode import _rows
from .groups import SCALE_DTYPES, Logical, Scheme, _ct_weights

FORMAT = "sparse-24-bitmask"


def build(name: str, mine: dict, config: dict, source: str, read_small) -> Logical:
    values, bitmask, shape_part = mine["codes"], mine["bitmask"], mine["shape"]
    stem = name[: -len(".weight")]
    scheme = Scheme("sparse-24", "compressed-tensors sparse-24-bitmask", 0, strategy="2:4",
                    facts={"method": f"{source} sparsity_config.format", "shape": shape_part.name},
                    params={"described": "compressed-tensors 2:4 sparse (bitmask)"})
    stored = tuple(values.shape)

    def packed(why: str) -> Logical:
        return Logical(name, stored, scheme, mine, f"packed, not dequantised: {why}")
    if _ct_weights(config):
        return packed(f"{FORMAT} over quantised codes ({source} config_groups) is not read")
    if read_small is None or len(shape_part.shape) > 2 or sum(shape_part.shape) > 3:
        return packed(f"{shape_part.name} {shape_part.shape} is not a weight's shape")
    shape = tuple(int(v) for v in read_small(shape_part.name))
    if len(shape) != 2 or shape[1] % 4 or min(shape) <= 0:
        return packed(f"{stem}.shape {shape} is not [rows, cols] with cols a multiple of 4")
    rows, cols = shape
    if values.dtype not in SCALE_DTYPES or stored != (rows, cols // 2) \
            or bitmask.dtype != "U8" or tuple(bitmask.shape) != (rows, -(-cols // 8)):
        return packed(f"compressed {values.dtype} {stored} and bitmask {bitmask.dtype} {bitmask.shape} are "
                      f"not [{rows}, {cols // 2}] values and U8 [{rows}, {-(-cols // 8)}] for {shape}")
    return Logical(name, shape, scheme, mine)


def dequant(t: Logical, read, r0: int, r1: int) -> array:
    cols = t.shape[1]
    half, width = cols // 2, -(-cols // 8)
    kept = _rows(read, t.parts["codes"], r0, r1)
    mask = read(t.parts["bitmask"].name, r0, r1 - r0)
    out = array("f", bytes(4 * (r1 - r0) * cols))
    for i in range(r1 - r0):
        at = [c for c in range(cols) if mask[i * width + c // 8] >> (c % 8) & 1]
        if len(at) != half:
            raise FormatError(f"row {r0 + i} of tensor {t.parts['bitmask'].name!r} marks {len(at)} kept "
                              f"values, not {half} (two of each four)", expected=half, found=len(at))
        base = i * cols
        for c, v in zip(at, kept[i * half:(i + 1) * half]):
            out[base + c] = v
    return out


BUILDERS = {"sparse-24": build}
DECODERS = {"sparse-24": dequant}
