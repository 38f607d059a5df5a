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
    read.rows_of = rows_of
    return desc, config, read, read_small, rows_read, load_file(str(path))


def _storage_rows(t, logical: torch.Tensor) -> torch.Tensor:
    """The logical values in the order the decoder produces them (rows of t.rows_cols)."""
    if t.strides is None:
        return logical.reshape(t.rows_cols)
    storage = torch.empty(logical.numel(), dtype=logical.dtype)
    storage.as_strided(logical.shape, t.strides).copy_(logical)
    return storage.view(t.rows_cols)


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
    for name, start, count in rows_read:
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
