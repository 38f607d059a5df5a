"""Quantised safetensors dequantised in pure Python (tensorloupe.quant) against the reference:
compressed-tensors' own unpack_from_int32 and torch float32 arithmetic of its dequantize
((q - z) * s by strategy), DeepSeek-V3 weight_dequant (q * scale_inv per 128x128 tile)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
from safetensors.torch import load_file
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

from tensorloupe.errors import UnsupportedError
from tensorloupe.quant import dequantise, group

import quant_files

CASES = sorted(quant_files.CASES)   # every case is written and tested: none can go missing


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("quant-fixtures")
    quant_files.write_all(folder)
    return folder / "quant"


def gptq_dequantize_weight(qweight, qzeros, scales, g_idx, bits, v1):
    """GPTQModel 7.7.0 nn_modules/qlinear/__init__.py dequantize_weight (its wf-shift unpacking,
    3-bit straddle fix-ups included), v1 zeros corrected as utils/model_dequant.py
    _correct_gptq_v1_qzeros does (decode, +1 mod 2**bits); [in, out] in the scales' dtype."""
    maxq = (1 << bits) - 1
    qweight, qzeros = qweight.to(torch.int64) & 0xFFFFFFFF, qzeros.to(torch.int64) & 0xFFFFFFFF
    if bits in (2, 4, 8):
        wf = torch.arange(0, 32, bits).unsqueeze(0)
        zeros = (qzeros.unsqueeze(2).expand(-1, -1, 32 // bits) >> wf.unsqueeze(0)) & maxq
        zeros = zeros.reshape(qzeros.shape[0], -1)[:, :scales.shape[1]]
        weight = (qweight.unsqueeze(1).expand(-1, 32 // bits, -1) >> wf.unsqueeze(-1)) & maxq
        weight = weight.reshape(-1, weight.shape[2])
    else:
        wf = torch.tensor([[0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 0],
                           [0, 1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31],
                           [0, 2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 0]]).reshape(1, 3, 12)
        pad = (-qzeros.shape[1]) % 3          # a qzeros row of 3-bit codes need not be whole triples
        qz = torch.nn.functional.pad(qzeros, (0, pad))
        zeros = qz.reshape(qz.shape[0], qz.shape[1] // 3, 3, 1).expand(-1, -1, -1, 12)
        zeros = (zeros >> wf.unsqueeze(0)).clone()
        zeros[:, :, 0, 10] = (zeros[:, :, 0, 10] & 0x3) | ((zeros[:, :, 1, 0] << 2) & 0x4)
        zeros[:, :, 1, 11] = (zeros[:, :, 1, 11] & 0x1) | ((zeros[:, :, 2, 0] << 1) & 0x6)
        zeros = zeros & 0x7
        zeros = torch.cat([zeros[:, :, 0, :11], zeros[:, :, 1, 1:12], zeros[:, :, 2, 1:11]], dim=2)
        zeros = zeros.reshape(qz.shape[0], -1)[:, :scales.shape[1]]
        weight = qweight.reshape(qweight.shape[0] // 3, 3, 1, qweight.shape[1]).expand(-1, -1, 12, -1)
        weight = (weight >> wf.unsqueeze(-1)).clone()
        weight[:, 0, 10] = (weight[:, 0, 10] & 0x3) | ((weight[:, 1, 0] << 2) & 0x4)
        weight[:, 1, 11] = (weight[:, 1, 11] & 0x1) | ((weight[:, 2, 0] << 1) & 0x6)
        weight = weight & 0x7
        weight = torch.cat([weight[:, 0, :11], weight[:, 1, 1:12], weight[:, 2, 1:11]], dim=1)
        weight = weight.reshape(weight.shape[0] * weight.shape[1], weight.shape[2])
    if v1:
        zeros = (zeros + 1) & maxq
    dequant = torch.int16 if bits == 8 else torch.int8      # GPTQModel's dequant_dtype
    g = g_idx.long()
    return scales[g] * (weight.to(dequant) - zeros.to(dequant)[g])


def awq_dequantize_gemm(qweight, qzeros, scales, bits, group_size):
    """AutoAWQ 0.2.9 awq/utils/packing_utils.py unpack_awq + reverse_awq_order + dequantize_gemm."""
    shifts = torch.arange(0, 32, bits)
    iweights = torch.bitwise_right_shift(qweight[:, :, None], shifts[None, None, :]).to(torch.int8)
    iweights = iweights.view(iweights.shape[0], -1)
    izeros = torch.bitwise_right_shift(qzeros[:, :, None], shifts[None, None, :]).to(torch.int8)
    izeros = izeros.view(izeros.shape[0], -1)
    order = torch.arange(iweights.shape[-1], dtype=torch.int32).view(-1, 32 // bits)[:, [0, 4, 1, 5, 2, 6, 3, 7]].view(-1)
    iweights, izeros = iweights[:, order], izeros[:, order]
    iweights = torch.bitwise_and(iweights, (2 ** bits) - 1)
    izeros = torch.bitwise_and(izeros, (2 ** bits) - 1)
    scales = scales.repeat_interleave(group_size, dim=0)
    izeros = izeros.repeat_interleave(group_size, dim=0)
    return (iweights - izeros) * scales


def _open(out, case):
    path = out / case / "model.safetensors"
    blob = path.read_bytes()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    rows_read = []
    rows_of = {}     # a part read as other rows than its dim 0 (Logical.part_rows), set by the test

    def read(name, r0, count):
        h = header[name]
        lo, hi = h["data_offsets"]
        rows = rows_of.get(name) or (h["shape"][0] if h["shape"] else 1)
        row = (hi - lo) // max(rows, 1)
        assert 0 <= r0 and r0 + count <= rows, (name, r0, count)
        rows_read.append((name, r0, count))
        return blob[base + lo + r0 * row: base + lo + (r0 + count) * row]

    def read_small(name):
        h = header[name]
        return list(struct.unpack(f"<{h['shape'][0]}q", read(name, 0, h["shape"][0])))

    desc = [(k, v["dtype"], v["shape"]) for k, v in header.items()]
    config = json.loads((out / case / "config.json").read_text())["quantization_config"]
    def cols(name, c0, c1, r0=0, r1=None):
        h = header[name]
        lo, hi = h["data_offsets"]
        rows = rows_of.get(name) or h["shape"][0]
        item = {"U8": 1, "I32": 4, "F16": 2}[h["dtype"]]
        width = (hi - lo) // rows // item
        r1 = rows if r1 is None else r1
        assert 0 <= c0 <= c1 <= width and 0 <= r0 <= r1 <= rows, (name, c0, c1, r0, r1)
        rows_read.append((name, "cols", c0, c1))
        return b"".join(blob[base + lo + (r * width + c0) * item: base + lo + (r * width + c1) * item]
                        for r in range(r0, r1))

    read.rows_of = rows_of
    read.cols = cols
    return desc, config, read, read_small, rows_read, load_file(str(path))


def _storage_rows(t, logical: torch.Tensor) -> torch.Tensor:
    """The logical values as the rows decoders produce (t.rows_cols)."""
    return logical.reshape(t.rows_cols)


def _reference(case, t, sd):
    p = {k: sd[v.name] for k, v in t.parts.items()}
    if case == "fp8_block":
        q = p["codes"].float()
        s = p["weight_scale_inv"].repeat_interleave(128, 0).repeat_interleave(128, 1)
        return q * s[: q.shape[0], : q.shape[1]]
    if case == "fp8_channel":
        return p["codes"].float() * p["weight_scale"]
    if case.startswith("ct_nvfp4"):
        # compressed-tensors' own decompress (bf16 out), as float32
        from compressed_tensors.compressors import BaseCompressor
        from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
        scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
            num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16))
        local = {"weight_packed": p["codes"], "weight_scale": p["weight_scale"],
                 "weight_global_scale": p["weight_global_scale"]}
        out = BaseCompressor.load_from_registry("nvfp4-pack-quantized").decompress(local, scheme)["weight"]
        assert out.dtype == torch.bfloat16
        return out.float()
    if case.startswith("gptq"):
        return gptq_dequantize_weight(p["codes"], p["qzeros"], p["scales"], p["g_idx"], t.scheme.bits,
                                      v1=t.scheme.strategy == "gptq").t()
    if case.startswith("awq"):
        return awq_dequantize_gemm(p["codes"], p["qzeros"], p["scales"], 4, t.scheme.group_size).t()
    if case.startswith("mxfp4"):
        want = convert_moe_packed_tensors(p["codes"], p["scales"], dtype=torch.float32)
        # the default bf16 output holds the same values (powers of two times E2M1 values)
        assert torch.equal(convert_moe_packed_tensors(p["codes"], p["scales"]).float(), want)
        return want
    sch = t.scheme
    q = unpack_from_int32(p["codes"], sch.bits, torch.Size(t.shape)).to(torch.float32)
    s = p["weight_scale"]
    cols = t.shape[1]
    if "weight_g_idx" in p:
        idx = p["weight_g_idx"].long()
    elif sch.strategy == "group":
        idx = torch.arange(cols) // sch.group_size
    else:
        idx = torch.zeros(cols, dtype=torch.long)
    if not sch.symmetric:
        z = unpack_from_int32(p["weight_zero_point"], sch.bits, torch.Size(s.shape), packed_dim=0)
        q = q - z.to(torch.float32)[:, idx]
    return q * s[:, idx]


@pytest.mark.parametrize("case", CASES)
def test_every_element_matches_reference(out, case):
    desc, config, read, read_small, _, sd = _open(out, case)
    (t,) = group(desc, config, "config.json quantization_config", read_small)
    assert t.reason is None, t.reason
    read.rows_of.update(t.part_rows)
    got = dequantise(t, read, 0, t.rows_cols[0])
    want = _reference(case, t, sd)
    assert tuple(want.shape) == t.shape
    assert torch.equal(torch.tensor(list(got), dtype=torch.float32).view(t.rows_cols), _storage_rows(t, want))


@pytest.mark.parametrize("case", CASES)
def test_a_row_window_reads_only_its_rows(out, case):
    desc, config, read, read_small, rows_read, sd = _open(out, case)
    (t,) = group(desc, config, "config.json quantization_config", read_small)
    read.rows_of.update(t.part_rows)
    rows = t.rows_cols[0]
    r0, r1 = rows // 3, rows // 3 + 2
    want = _storage_rows(t, _reference(case, t, sd))[r0:r1]
    rows_read.clear()
    got = dequantise(t, read, r0, r1)
    assert torch.equal(torch.tensor(list(got), dtype=torch.float32).view(want.shape), want)
    for name, *how in rows_read:
        if how[0] == "cols":     # GPTQ/AWQ: only the columns of the logical rows asked for
            c0, c1 = how[1:]
            assert c1 - c0 <= max(-(-(r1 - r0) * t.scheme.bits // 32) + 1, r1 - r0, 16), (name, c0, c1)
            continue
        start, count = how
        if name.endswith(("weight", "weight_packed", "weight_scale")) and "block" not in case:
            assert count == r1 - r0 or name.endswith("weight_scale") and count == 1, (name, count)
        assert count <= max(r1 - r0, 2) or name.endswith("g_idx"), (name, count)


def test_unknown_layout_stays_packed():
    desc = [("m.weight_packed", "I32", [4, 4]), ("m.weight_scale", "F32", [4, 1]),
            ("m.weight_shape", "I64", [2])]
    cfg = {"quant_method": "compressed-tensors", "format": "pack-quantized",
           "config_groups": {"g": {"weights": {"num_bits": 4, "strategy": "block"}}}}
    (t,) = group(desc, cfg, "test", lambda name: [4, 32])
    assert t.reason.startswith("packed, not dequantised: strategy 'block'")
    with pytest.raises(UnsupportedError, match="packed, not dequantised"):
        dequantise(t, None, 0, 1)
