"""torch dtypes that pack several codes in one element: shown as the codes they hold.

`torch.float4_e2m1fn_x2` (torch 2.8+) holds two e2m1 codes per byte, element 0 in the low
nibble (the order torch's own fp4 kernels and the OCP MX reference packing use); torch's shape
and `numel` count bytes, i.e. pairs. A tensor of torch shape (4, 8) holds 64 fp4 values, and is
listed here as F4 (4, 16), the safetensors convention for the same bytes (`safetensors.torch`
writes this dtype as F4 with the last dimension doubled); torch's own shape stays in its info.
A view whose last dimension is not contiguous gets a trailing dimension of 2 instead
((8, 4) with strides (1, 8) -> (8, 4, 2) with strides (2, 16, 1)).
"""

from __future__ import annotations

from dataclasses import replace

from ...model import Tensor, contiguous_strides

# torch dtype -> codes per torch element
PACKED = {"float4_e2m1fn_x2": 2}


def as_codes(tensor: Tensor, torch_dtype: str) -> Tensor:
    """The tensor over its codes: shape and element strides in codes, torch's shape in its info."""
    per = PACKED[torch_dtype]
    shape, strides = tuple(tensor.shape), tensor.element_strides()
    if shape and strides[-1] == 1:      # pairs lie end to end along the last dimension
        codes_shape = shape[:-1] + (shape[-1] * per,)
        codes_strides = tuple(s * per for s in strides[:-1]) + (1,)
    else:
        codes_shape = shape + (per,)
        codes_strides = tuple(s * per for s in strides) + (1,)
    info = {**tensor.info, "torch_shape": list(shape),
            "packed": f"{per} codes per {torch_dtype} element (low bits first); torch's numel counts elements"}
    return replace(tensor, shape=codes_shape, info=info,
                   strides=None if codes_strides == contiguous_strides(codes_shape) else codes_strides)
