"""torch float4_e2m1fn_x2 tensors (two e2m1 codes per byte) written by torch.save are decoded.

torch cannot convert fp4 to another float dtype, so the oracle is numpy: the packed bytes torch
holds (`t.view(torch.uint8)`), split into nibbles, low nibble first, through the e2m1 table of
the OCP MX spec. torch's shape and numel count bytes (pairs of values); tensorloupe lists the
values: shape (..., 2n) for torch's (..., n), torch's own shape in the tensor's info."""

import numpy as np
import torch

import tensorloupe
from tensorloupe.sampler.sampling import sample, values

import strided_files

# e2m1: sign, 2 exponent bits (bias 1), 1 mantissa bit; no Inf, no NaN (OCP MX v1.0, 5.3.3)
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def decoded(t: torch.Tensor) -> np.ndarray:
    raw = t.view(torch.uint8).numpy()
    return E2M1[np.stack([raw & 15, raw >> 4], axis=-1)]      # (..., n, 2), low nibble first


def test_fp4_values_equal_the_packed_bytes_torch_holds(tmp_path):
    path = tmp_path / "fp4.pt"
    torch.save(strided_files.fp4_tensors(), path)     # as fixtures/strided_files.py writes it
    want = torch.load(path, weights_only=True)
    with tensorloupe.open(path) as ckpt:
        assert [t.problem for t in ckpt.tensors] == [None] * 3
        for name, w in want.items():
            t = ckpt.tensor(name)
            assert w.dtype == torch.float4_e2m1fn_x2 and t.dtype == "F4"
            assert t.info["torch_shape"] == list(w.shape) and t.numel == 2 * w.numel()
            expect = decoded(w)
            got = t.numpy()
            if w.stride()[-1] == 1:          # pairs end to end: the last dimension doubled
                assert got.shape == w.shape[:-1] + (2 * w.shape[-1],)
                expect = expect.reshape(got.shape)
            else:                            # a transposed view: a trailing pair dimension
                assert got.shape == tuple(w.shape) + (2,)
            assert np.array_equal(got, expect) and np.array_equal(np.signbit(got), np.signbit(expect)), name
            assert values(t, 0, 10) == expect.reshape(-1)[:10].tolist()
            s = sample(t, 10 ** 6)
            assert s.exhaustive and sorted(s.values) == sorted(expect.reshape(-1).tolist())
        # parameters count values, twice torch's numel (which counts bytes)
        assert ckpt.parameter_count == 2 * sum(w.numel() for w in want.values())
