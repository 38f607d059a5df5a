"""torch complex32 (chalf) tensors written by torch.save are decoded: every value equals torch's
own (read back as its float16 real and imaginary parts). Only the ZIP format: torch 2.13 cannot
read back the legacy format's complex32 (an UntypedStorage has no dtype), so no oracle exists."""

import warnings

import torch

import tensorloupe
from tensorloupe.sampler.sampling import sample, values


def test_complex32_values_equal_torch(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # "ComplexHalf support is experimental"
        real = torch.linspace(-3, 3, 24, dtype=torch.float16)
        imag = torch.linspace(2, -1, 24, dtype=torch.float16)
        tensor = torch.complex(real.float(), imag.float()).to(torch.complex32).reshape(4, 6)
        path = tmp_path / "c32.pt"
        torch.save({"z": tensor}, path)
        pairs = torch.load(path, weights_only=True)["z"].view(torch.float16).reshape(-1, 2).tolist()
    with tensorloupe.open(str(path)) as ckpt:
        (t,) = ckpt.tensors
        assert t.dtype == "C32" and t.shape == (4, 6) and t.problem is None
        got = values(t, 0, 24)
        assert [(v.real, v.imag) for v in got] == [tuple(p) for p in pairs]
        stats = sample(t, 24).stats      # statistics are of the modulus, as for complex64
        assert stats.count == 24 and stats.max == max(abs(v) for v in got)
