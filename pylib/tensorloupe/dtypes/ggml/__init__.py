"""Every ggml tensor type: one table row per type id, and exact decoders for the quantized ones.

The quantized types (ggml-common.h blocks) decode to exactly the float32 values gguf-py's
`gguf.quants.dequantize` gives (0.19.0), or ggml's C dequantize_row_* where gguf-py has none
(Q8_1, Q8_K, Q1_0). The decoders live in legacy / kquants / iquants; this package
is the table that ties type id, name, block shape and decoder together.

Big-endian GGUF files: ggml has no big-endian quant layout of its own. gguf-py's
gguf_convert_endian swaps the f16 scales of Q4_0, Q8_0, Q4_K and Q6_K and leaves MXFP4/NVFP4 as is
(all single bytes). We apply the same rule to every type, from its C struct: each element of a field
declared wider than a byte (ggml_half, uint16_t, int16_t, float) is byte-swapped; uint8_t arrays are
not, even where ggml reads them through a wider integer (Q5_x qh, IQ3_XXS signs, IQ1_M scales).
For the four types gguf_convert_endian handles, that is exactly what it writes.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from ..plain import DTYPES, DType
from . import iquants as iq
from . import kquants as kq
from . import legacy as lq
from .columns import Layout

# ggml_type ids of the plain types, which dtypes.DTYPES decodes. Ids 4-5 (Q4_2, Q4_3), 31-33
# (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) and 36-38 (IQ4_NL_4_4, _4_8, _8_8) were removed from ggml
# and are not valid in files.
GGML_PLAIN_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 30: "BF16",
}


class QuantType(NamedTuple):
    type_id: int                 # enum ggml_type
    name: str                    # gguf-py GGMLQuantizationType name
    block_elems: int
    layout: Layout               # block struct; its size is the sum of its fields
    decode: Callable[[bytes], list]  # little-endian whole blocks -> floats


QUANT_TYPES: tuple[QuantType, ...] = (
    QuantType(2, "Q4_0", lq.QK4_0, lq.Q4_0, lq.decode_q4_0),
    QuantType(3, "Q4_1", lq.QK4_1, lq.Q4_1, lq.decode_q4_1),
    QuantType(6, "Q5_0", lq.QK5_0, lq.Q5_0, lq.decode_q5_0),
    QuantType(7, "Q5_1", lq.QK5_1, lq.Q5_1, lq.decode_q5_1),
    QuantType(8, "Q8_0", lq.QK8_0, lq.Q8_0, lq.decode_q8_0),
    QuantType(9, "Q8_1", lq.QK8_1, lq.Q8_1, lq.decode_q8_1),
    QuantType(10, "Q2_K", kq.QK_K, kq.Q2_K, kq.decode_q2_k),
    QuantType(11, "Q3_K", kq.QK_K, kq.Q3_K, kq.decode_q3_k),
    QuantType(12, "Q4_K", kq.QK_K, kq.Q4_K, kq.decode_q4_k),
    QuantType(13, "Q5_K", kq.QK_K, kq.Q5_K, kq.decode_q5_k),
    QuantType(14, "Q6_K", kq.QK_K, kq.Q6_K, kq.decode_q6_k),
    QuantType(15, "Q8_K", kq.QK_K, kq.Q8_K, kq.decode_q8_k),
    QuantType(16, "IQ2_XXS", iq.QK_K, iq.IQ2_XXS, iq.decode_iq2_xxs),
    QuantType(17, "IQ2_XS", iq.QK_K, iq.IQ2_XS, iq.decode_iq2_xs),
    QuantType(18, "IQ3_XXS", iq.QK_K, iq.IQ3_XXS, iq.decode_iq3_xxs),
    QuantType(19, "IQ1_S", iq.QK_K, iq.IQ1_S, iq.decode_iq1_s),
    QuantType(20, "IQ4_NL", iq.QK4_NL, iq.IQ4_NL, iq.decode_iq4_nl),
    QuantType(21, "IQ3_S", iq.QK_K, iq.IQ3_S, iq.decode_iq3_s),
    QuantType(22, "IQ2_S", iq.QK_K, iq.IQ2_S, iq.decode_iq2_s),
    QuantType(23, "IQ4_XS", iq.QK_K, iq.IQ4_XS, iq.decode_iq4_xs),
    QuantType(29, "IQ1_M", iq.QK_K, iq.IQ1_M, iq.decode_iq1_m),
    QuantType(34, "TQ1_0", kq.QK_K, kq.TQ1_0, kq.decode_tq1_0),
    QuantType(35, "TQ2_0", kq.QK_K, kq.TQ2_0, kq.decode_tq2_0),
    QuantType(39, "MXFP4", lq.QK_MXFP4, lq.MXFP4, lq.decode_mxfp4),
    QuantType(40, "NVFP4", lq.QK_NVFP4, lq.NVFP4, lq.decode_nvfp4),
    QuantType(41, "Q1_0", lq.QK1_0, lq.Q1_0, lq.decode_q1_0),
)


def _block_decoder(q: QuantType) -> Callable[..., list]:
    layout, decode = q.layout, q.decode

    def decode_blocks(buf, big_endian: bool = False) -> list:
        if len(buf) % layout.size:
            raise ValueError(f"{q.name} data must be whole {layout.size}-byte blocks, "
                             f"got {len(buf):,} bytes ({len(buf) % layout.size:,} left over)")
        return decode(layout.to_little(buf) if big_endian else bytes(buf))

    decode_blocks.__name__ = decode_blocks.__qualname__ = f"decode_{q.name.lower()}"
    return decode_blocks


QUANT_DTYPES: dict[str, DType] = {
    q.name: DType(q.name, q.block_elems, q.layout.size, "quant", _block_decoder(q)) for q in QUANT_TYPES
}

GGML_TYPE_NAMES: dict[int, str] = {**GGML_PLAIN_TYPES, **{q.type_id: q.name for q in QUANT_TYPES}}


def ggml_dtype(type_id: int) -> DType | None:
    """The DType of a ggml_type id, or None for an id ggml does not (or no longer) define."""
    name = GGML_TYPE_NAMES.get(type_id)
    if name is None:
        return None
    return DTYPES.get(name) or QUANT_DTYPES[name]
