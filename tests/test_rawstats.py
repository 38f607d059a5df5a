"""The exact pass's fast path (sampler/rawstats.py: F32, BF16, F16, Q8_0 and Q4_K chunks summarised from
their bytes) gives numpy's numbers (float64 of the decoded values) and, bit for bit, the numbers the
element-by-element path gives, on tensors with NaN, +-Inf, subnormals, -0.0, values either side
of the 1e-6 near-zero line, zero / negative / subnormal / Inf scales, all-equal values and odd
lengths, read through the API and `tensorloupe stats --exact` as a user would."""

import json
import struct

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf.quants import dequantize, quantize

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.sampler import codes, rawstats
from tensorloupe.sampler.sampling import exact_summary

BINS = 32
CHUNK = 1 << 17      # several chunks per tensor (of at least rawstats_q8_0.MIN_Q8_0_BLOCKS blocks)


def f32_cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    n = 3 * CHUNK + 4097                                   # odd: the last chunk is short
    base = (rng.standard_normal(n) * 0.02).astype(np.float32)
    edge = np.float32(1e-6)
    specials = [0.0, -0.0, 1e-40, -3e-42, 1e-45, edge, -edge, np.nextafter(edge, 0),
                -np.nextafter(edge, 0), np.nextafter(edge, 1), 9.9e-7, 2e-6, 5e-7]
    base[100:100 + len(specials)] = specials
    nonfinite = base.copy()
    nonfinite[[7, CHUNK + 5, CHUNK + 6, 3 * CHUNK + 11]] = [np.nan, np.inf, -np.inf, np.nan]
    near = (rng.standard_normal(n) * 1e-6).astype(np.float32)   # many values at the near-zero line
    zeros = np.zeros(2 * CHUNK + 1, np.float32)
    zeros[0], zeros[CHUNK + 3] = -0.0, -0.0
    return {"normal": base, "nonfinite": nonfinite, "near": near,
            "equal": np.full(CHUNK + 3, 0.375, np.float32), "zeros": zeros}


def f16_cases() -> dict[str, np.ndarray]:
    """Float32 values that become float16 zeros and subnormals (f32_cases' "near" are all subnormal):
    a pruned tensor, most of it zeros, with a few subnormals among them."""
    rng = np.random.default_rng(6)
    pruned = (rng.standard_normal(2 * CHUNK + 5) * 0.02).astype(np.float32)
    pruned[rng.random(len(pruned)) < 0.7] = 0.0
    pruned[3::1001] = -0.0
    pruned[5::997] = rng.uniform(-6e-5, 6e-5, len(pruned[5::997]))   # float16 subnormals
    return {"pruned": pruned}


def q8_0_cases() -> dict[str, np.ndarray]:
    """Raw Q8_0 blocks (34 bytes: f16 scale, 32 int8 codes), as rows of whole blocks."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(3 * CHUNK + 32 * 2049) * 0.02).astype(np.float32)   # an odd count of blocks
    plain = quantize(x.reshape(-1, 32), Q.Q8_0).reshape(-1, 34).copy()
    odd = plain.copy()
    scales = odd[:, 0:2].copy().view("<f2").reshape(-1)
    scales[5] = 0.0                       # a block of zeros
    scales[6] = -scales[6]                # a negative scale
    scales[7] = np.float16(6e-8)          # subnormal: |d * q| < 1e-6 for |q| <= 16
    scales[8] = np.float16(-3e-8)
    scales[9:40] = scales[9]              # many blocks share one scale
    odd[:, 0:2] = scales.view(np.uint8).reshape(-1, 2)
    special = odd.copy()
    bad = special[:, 0:2].copy().view("<f2").reshape(-1)
    bad[CHUNK // 32 + 2], bad[2 * CHUNK // 32 + 9] = np.inf, np.nan   # Inf and NaN scales
    special[:, 0:2] = bad.view(np.uint8).reshape(-1, 2)
    equal = np.zeros((CHUNK // 32 + 1, 34), np.uint8)
    equal[:, 0:2] = np.array([0.25], "<f2").view(np.uint8)
    equal[:, 2:] = 3                      # every value 0.75
    positive = plain.copy()
    positive[:, 2:] = (positive[:, 2:].view(np.int8) & 0x7F).view(np.uint8)   # min is +0.0
    return {"plain": plain, "odd": odd, "special": special, "equal": equal, "positive": positive}


def q4_k_cases() -> dict[str, np.ndarray]:
    """Raw Q4_K blocks (144 bytes: f16 d and dmin, 12 bytes of scales, 128 of codes), random, as
    the bench writes them (gguf-py has no Q4_K quantizer): d and dmin of independent magnitudes
    leave about one block in eight to the decoder (its float32 rounding is not exact)."""
    rng = np.random.default_rng(5)
    blocks = rng.integers(0, 256, size=(3 * CHUNK // 256 + 77, 144), dtype=np.uint8)
    for at in (0, 2):
        blocks[:, at:at + 2] = rng.uniform(-0.05, 0.05, len(blocks)).astype("<f2").view(np.uint8).reshape(-1, 2)
    close = blocks.copy()                 # dmin ~ 7.5 d, as llama.cpp's quantizer leaves them
    d = close[:, 0:2].copy().view("<f2").reshape(-1)
    close[:, 2:4] = (d.astype(np.float32) * 7.5).astype("<f2").view(np.uint8).reshape(-1, 2)
    return {"random": blocks, "close": close}


def write_f32(path, x: np.ndarray) -> None:
    data = x.tobytes()
    head = json.dumps({"w": {"dtype": "F32", "shape": [len(x)], "data_offsets": [0, len(data)]}}).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)


def write_q8_0(path, blocks: np.ndarray, qtype=Q.Q8_0) -> None:
    w = GGUFWriter(str(path), "llama")
    w.add_tensor("w", blocks.reshape(blocks.shape[0], -1), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("rawstats")
    made = {}
    for name, x in f32_cases().items():
        made[f"F32-{name}"] = (out / f"f32-{name}.safetensors", x.astype(np.float64))
        write_f32(made[f"F32-{name}"][0], x)
    import torch
    from safetensors.torch import save_file
    for dtype, name, x in [*(("BF16", n, x) for n, x in f32_cases().items()),   # written by torch and safetensors
                           *(("F16", n, x) for n, x in {**f32_cases(), **f16_cases()}.items())]:
        w = torch.from_numpy(x).to(getattr(torch, {"BF16": "bfloat16", "F16": "float16"}[dtype]))
        made[f"{dtype}-{name}"] = (out / f"{dtype.lower()}-{name}.safetensors", w.to(torch.float64).numpy())
        save_file({"w": w}, str(made[f"{dtype}-{name}"][0]))
    for name, blocks in q8_0_cases().items():
        made[f"Q8_0-{name}"] = (out / f"q8_0-{name}.gguf",
                                dequantize(blocks.reshape(-1), Q.Q8_0).astype(np.float64).reshape(-1))
        write_q8_0(made[f"Q8_0-{name}"][0], blocks)
    for name, blocks in q4_k_cases().items():
        made[f"Q4_K-{name}"] = (out / f"q4_k-{name}.gguf",
                                dequantize(blocks.reshape(-1), Q.Q4_K).astype(np.float64).reshape(-1))
        write_q8_0(made[f"Q4_K-{name}"][0], blocks, Q.Q4_K)
    return made


def summary(path, monkeypatch=None):
    with tensorloupe.open(path) as ckpt:
        return exact_summary(ckpt.tensor("w"), BINS, chunk_elems=CHUNK)


CASES = ([f"F32-{n}" for n in f32_cases()] + [f"BF16-{n}" for n in f32_cases()]
         + [f"F16-{n}" for n in [*f32_cases(), *f16_cases()]] + [f"Q8_0-{n}" for n in q8_0_cases()]
         + [f"Q4_K-{n}" for n in q4_k_cases()])


@pytest.mark.parametrize("case", CASES)
def test_the_fast_path_gives_numpys_numbers(files, case):
    path, v = files[case]
    stats, hist = summary(path)
    f = v[np.isfinite(v)]
    assert (stats.count, stats.finite) == (len(v), len(f))
    assert (stats.nan, stats.posinf, stats.neginf) == (np.isnan(v).sum(), np.isposinf(v).sum(), np.isneginf(v).sum())
    assert (stats.min, stats.max) == (f.min(), f.max())
    assert stats.exact_zeros == (f == 0).sum()
    assert round(stats.zeros * stats.count) == (np.abs(f) < 1e-6).sum()
    assert stats.mean == pytest.approx(f.mean(), rel=1e-12, abs=1e-15)
    assert stats.std == pytest.approx(f.std(), rel=1e-9, abs=1e-15)
    if f.min() == f.max():
        assert hist.counts == [len(f)]
    else:
        assert hist.counts == np.histogram(f, BINS, (f.min(), f.max()))[0].tolist()


@pytest.mark.parametrize("case", CASES)
def test_the_fast_path_gives_the_element_paths_bits(files, case, monkeypatch):
    path, _ = files[case]
    fast = summary(path)
    monkeypatch.setattr(rawstats, "FAST", {})      # every chunk decoded element by element
    monkeypatch.setattr(codes, "countable", lambda tensor: False)   # BF16, F16 too, not their codes counted
    slow = summary(path)
    assert repr(fast[0]) == repr(slow[0])
    assert fast[1].counts == slow[1].counts and list(map(repr, fast[1].edges)) == list(map(repr, slow[1].edges))


@pytest.mark.parametrize("case", ["Q4_K-random", "Q4_K-close"])
def test_a_q4_k_chunk_is_decoded_once_for_both_passes(files, case, monkeypatch):
    # the histogram's pass takes the scales and codes the statistics' pass decoded (exact.KeptWindow)
    from tensorloupe.sampler import rawstats_q4_k
    decoded, real = [], rawstats_q4_k._sub_blocks
    monkeypatch.setattr(rawstats_q4_k, "_sub_blocks", lambda data: decoded.append(len(data)) or real(data))
    path, v = files[case]
    stats, hist = summary(path)
    assert len(decoded) == -(-len(v) // CHUNK)          # one per chunk, not one per chunk and pass
    assert hist.counts == np.histogram(v, BINS, (v.min(), v.max()))[0].tolist()


def test_chunks_the_fast_path_leaves_alone_are_the_ones_it_cannot_promise(files):
    # Inf/NaN values (F32) and scales (Q8_0), a +0.0 minimum (its sign comes from the order)
    def windows(case):
        from tensorloupe.sampler.exact import _chunks
        with tensorloupe.open(files[case][0]) as ckpt:
            return [rawstats.chunk_stats(w) for _, _, w in _chunks(ckpt.tensor("w"), CHUNK, raw=True)]
    assert [s is None for s in windows("F32-nonfinite")] == [True, True, False, True]
    assert all(s is not None for s in windows("F32-normal"))
    assert [s is None for s in windows("BF16-nonfinite")] == [True, True, False, True]
    assert all(s is not None for s in windows("BF16-normal"))
    assert [s is None for s in windows("F16-nonfinite")] == [True, True, False, True]
    assert all(s is not None for s in windows("F16-normal") + windows("F16-near") + windows("F16-pruned"))
    assert [s is None for s in windows("Q8_0-special")] == [False, True, True, False]
    assert all(s is None for s in windows("Q8_0-positive"))
    assert all(s is not None for s in windows("Q4_K-random") + windows("Q4_K-close"))


def test_stats_exact_on_the_command_line(files, capsys):
    path, v = files["Q8_0-odd"]
    assert main(["stats", str(path), "w", "--exact", "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    stats = shown["stats"]
    assert shown["exact"] and stats["count"] == len(v)
    assert (stats["min"], stats["max"]) == (v.min(), v.max())
    assert stats["mean"] == pytest.approx(v.mean(), rel=1e-12)
    assert shown["histogram"]["counts"] == np.histogram(v, len(shown["histogram"]["counts"]), (v.min(), v.max()))[0].tolist()
