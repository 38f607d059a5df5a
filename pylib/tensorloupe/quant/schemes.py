"""One row per quantisation layout: the stored suffixes that make one logical weight.

A row names the part that holds the codes and the parts that must be beside it; `decode.py`
registers one decoder per row name. Adding a layout is a row and a decoder (STYLE habit 1).
Reference code per row: /work/shared/QUANT.md.
"""

from __future__ import annotations

from typing import NamedTuple


class Layout(NamedTuple):
    name: str              # decoder key
    codes: str             # suffix of the stored part holding the codes
    needs: tuple           # suffixes that must be present beside it
    optional: tuple        # suffixes used when present
    methods: tuple         # config quant_method / format values this row applies to
    joiner: str = "."      # between the module's name and the suffixes ("_" for gpt-oss' proj_blocks)
    logical: str = "weight"   # the dequantised tensor's suffix ("": the module's own name)


LAYOUTS = (
    # DeepSeek-V3 inference/kernel.py weight_dequant: W = q * s[tile], 128x128 tiles; scale_inv multiplies.
    Layout("fp8-block", "weight", ("weight_scale_inv",), (), ("fp8",)),
    # compressed-tensors int-quantized / float-quantized (naive_quantized/base.py), fp8 per tensor or
    # channel: codes under the weight's own name, W = (q - z) * s broadcast by strategy (tensor,
    # channel, group), computed in the scale's dtype (forward.py dequantize: output dtype = scale's).
    # ModelOpt FP8 (qtensor/fp8_tensor.py FP8QTensor.dequantize: q * weight_scale, one F32 per
    # tensor) is this row too: "modelopt FP8" is its quant_method and quant_algo.
    Layout("fp8-scaled", "weight", ("weight_scale",), ("weight_zero_point", "input_scale"),
           ("fp8", "float-quantized", "naive-quantized", "int-quantized", "modelopt FP8")),
    # compressed-tensors pack_quantized/helpers.py pack_to_int32: element i at bit i*bits of its row,
    # stored unsigned (+2**(bits-1)); W = (q - z) * s by strategy (channel or group).
    Layout("ct-pack", "weight_packed", ("weight_scale", "weight_shape"), ("weight_zero_point", "weight_g_idx"),
           ("pack-quantized",)),
    # compressed-tensors nvfp4-pack-quantized (nvfp4/base.py decompress, forward_helpers._dequantize):
    # weight_packed U8 [m, n/2], low nibble first, E2M1; weight_scale F8_E4M3 [m, n/16];
    # W = bf16(q * f32(weight_scale / weight_global_scale)): the global scale divides here.
    Layout("nvfp4", "weight_packed", ("weight_scale", "weight_global_scale"), ("input_global_scale",),
           ("nvfp4-pack-quantized",)),
    # GPTQ (GPTQModel nn_modules/qlinear dequantize_weight, utils/model_dequant.py): qweight I32
    # [in*bits/32, out] packed down each column, lowest bits first (3 bits straddle words); qzeros
    # I32 [groups, out*bits/32] packed along rows; scales [groups, out]; g_idx [in] (else i // g).
    # W[o, i] = scales[g, o] * (q[i, o] - z[g, o]), g = g_idx[i]; v1 ("gptq") stores z - 1.
    Layout("gptq", "qweight", ("qzeros", "scales"), ("g_idx",), ("gptq",)),
    # AWQ GEMM (AutoAWQ awq/utils/packing_utils.py unpack_awq, reverse_awq_order, dequantize_gemm):
    # qweight I32 [in, out/8], nibble k of a word holds column 8w + [0, 2, 4, 6, 1, 3, 5, 7][k];
    # qzeros likewise [in/g, out/8]; scales [in/g, out]; W = (q - z) * s.
    Layout("awq", "qweight", ("qzeros", "scales"), (), ("awq",)),
    # gpt-oss MXFP4 (transformers integrations/mxfp4.py convert_moe_packed_tensors): <proj>_blocks U8
    # [E, R, G, 16], two E2M1 codes a byte, low nibble first; <proj>_scales U8 [E, R, G] E8M0;
    # value = ldexp(FP4[q], scale - 127), rows of G*32 values, then transpose(1, 2): [E, G*32, R].
    Layout("mxfp4", "blocks", ("scales",), (), ("mxfp4",), "_", ""),
    # bitsandbytes 4-bit NF4/FP4 and LLM.int8 (bnb.py says the layouts and formulas).
    Layout("bnb-4bit", "weight", ("weight.absmax", "weight.quant_map"),
           ("weight.nested_absmax", "weight.nested_quant_map", "weight.quant_state.bitsandbytes__nf4",
            "weight.quant_state.bitsandbytes__fp4"), ("bitsandbytes",)),
    Layout("bnb-int8", "weight", ("SCB",), ("weight_format",), ("bitsandbytes",)),
    # HQQ (hqq.py): W_q planar-packed, scale, zero and the meta as small tensors beside it.
    Layout("hqq", "W_q", ("scale", "zero", "nbits", "group_size", "axis", "shape", "packing"),
           ("compute_dtype", "view_as_float", "unpack_view_dtype", "offload_meta", "encoded_state_dict",
            "stores_quant_config", "channel_wise", "optimize", "round_zero", "quant_scale", "quant_zero"),
           ("hqq",)),
    # compressed-tensors sparse-24-bitmask (sparse24.py): kept values + bitmask; <module>.weight is made.
    # Over int-/float-quantized codes the quantisation's scale and zero point stay beside them.
    Layout("sparse-24", "compressed", ("bitmask", "shape"), ("weight_scale", "weight_zero_point", "input_scale"),
           ("sparse-24-bitmask",)),
    # compressed-tensors marlin-24 (what it writes for 2:4 int4): Marlin's tiles, refused (sparse24.py).
    Layout("marlin-24", "weight_packed", ("scale_packed", "meta"), (), ("marlin-24",)),
    # NVIDIA ModelOpt NVFP4 (modelopt.py): weight U8 + F8 weight_scale per 16, weight_scale_2 multiplies.
    Layout("modelopt-nvfp4", "weight", ("weight_scale", "weight_scale_2"), ("input_scale",), ("modelopt",)),
    # MLX (mlx.core.dequantize; quant/mlx.py): weight U32 bit stream per row + scales (+ biases for
    # affine); w = scales * q + biases in the scales' dtype; modes mxfp4, nvfp4, mxfp8 without biases.
    Layout("mlx", "weight", ("scales",), ("biases", "global_scale"), ("mlx",)),
    # optimum-quanto (tensor/qbytes.py, qbits.py; quant/quanto.py): <w>._data codes + <w>._scale;
    # qint4/qint2 pack rows planar into <w>._data._data U8 and subtract a float <w>._shift.
    Layout("quanto", "_data._data", ("_scale", "_shift"), (), ("quanto",), ".", ""),
    Layout("quanto", "_data", ("_scale",), ("_shift",), ("quanto",), ".", ""),
)

BLOCK_DEFAULT = (128, 128)
