"""Known answers for the bitsandbytes, HQQ, ModelOpt NVFP4 and sparse-24 layouts: tiny files
built here byte by byte (struct.pack), opened as a user would, each value worked out by hand from
the layout's definition. Standard library only: this module also runs inside Pyodide
(tests/pyodide), where the decoders run in the browser. The whole-tensor comparisons with each
library are tests/test_quant_bnb.py."""

from __future__ import annotations

import json
import struct

import tensorloupe

SIZES = {"U8": 1, "I8": 1, "I32": 4, "I64": 8, "F32": 4, "F16": 2, "F8_E4M3": 1}


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def write(folder, tensors: dict, quantization_config: dict):
    """model.safetensors of {name: (dtype, shape, bytes)} and config.json beside it."""
    header, blobs, at = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        count = 1
        for d in shape:
            count *= d
        assert len(data) == count * SIZES[dtype], name
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    head = json.dumps(header).encode()
    path = folder / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    (folder / "config.json").write_text(json.dumps({"quantization_config": quantization_config}))
    return path


def values(path, name) -> list:
    with tensorloupe.open(path) as ckpt:
        t = ckpt.tensor(name)
        assert t.parts and t.dtype == "F32"
        return list(struct.unpack(f"<{t.source.size // 4}f", t.source.read(0, t.source.size)))


def test_bnb_nf4_high_nibble_first_times_its_block_absmax(tmp_path):
    """5 values in one block of 64: byte 0xF0 is codes 15 then 0 (NF4 1.0, -1.0)."""
    state = json.dumps({"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [1, 5]}).encode()
    w = "m.weight"
    path = write(tmp_path, {
        w: ("U8", (3, 1), bytes([0xF0, 0x78, 0x30])),
        w + ".absmax": ("F32", (1,), struct.pack("<f", 0.25)),
        w + ".quant_map": ("F32", (16,), bytes(64)),   # not used: bitsandbytes takes quant_type's table
        w + ".quant_state.bitsandbytes__nf4": ("U8", (len(state),), state),
    }, {"quant_method": "bitsandbytes", "load_in_4bit": True})
    assert values(path, w) == [0.25, -0.25, 0.0, f32(0.07958029955625534 * 0.25),
                               f32(-0.39491748809814453 * 0.25)]


def test_bnb_nested_absmax_is_code_times_nested_absmax_plus_offset(tmp_path):
    state = json.dumps({"quant_type": "fp4", "blocksize": 64, "dtype": "float32", "shape": [2],
                        "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.5}).encode()
    nested_code = [0.0] * 256
    nested_code[7] = 0.75
    w = "m.weight"
    path = write(tmp_path, {
        w: ("U8", (1, 1), bytes([0x3B])),                                   # FP4 codes 3 (1.0), 11 (-1.0)
        w + ".absmax": ("U8", (1,), bytes([7])),
        w + ".quant_map": ("F32", (16,), bytes(64)),
        w + ".nested_absmax": ("F32", (1,), struct.pack("<f", 2.0)),
        w + ".nested_quant_map": ("F32", (256,), struct.pack("<256f", *nested_code)),
        w + ".quant_state.bitsandbytes__fp4": ("U8", (len(state),), state),
    }, {"quant_method": "bitsandbytes", "load_in_4bit": True})
    assert values(path, w) == [2.0, -2.0]                                  # 0.75 * 2 + 0.5


def test_bnb_int8_is_q_times_scb_times_the_reciprocal_of_127(tmp_path):
    path = write(tmp_path, {"m.weight": ("I8", (1, 2), struct.pack("<2b", -127, 3)),
                            "m.SCB": ("F32", (1,), struct.pack("<f", 2.5))},
                 {"quant_method": "bitsandbytes", "load_in_8bit": True})
    r = f32(7.874015718698502e-3)
    assert values(path, "m.weight") == [f32(-317.5 * r), f32(7.5 * r)]


def test_hqq_4bit_packs_the_two_halves_of_the_rows(tmp_path):
    """shape [2, 4], groups of 4 along axis 1: packed row = reshaped row 0 << 4 | row 1."""
    s = lambda text: ("U8", (len(text),), text.encode())   # noqa: E731  HQQ's strings as U8
    path = write(tmp_path, {
        "m.W_q": ("U8", (1, 4), bytes([0x10, 0x32, 0x54, 0xF6])),
        "m.scale": ("F32", (2, 1), struct.pack("<2f", 0.5, 2.0)),
        "m.zero": ("F32", (2, 1), struct.pack("<2f", 1.0, 0.0)),
        "m.nbits": ("I32", (), struct.pack("<i", 4)),
        "m.group_size": ("I32", (), struct.pack("<i", 4)),
        "m.axis": ("I32", (), struct.pack("<i", 1)),
        "m.shape": ("I64", (2,), struct.pack("<2q", 2, 4)),
        "m.packing": s("4bit_u8"),
        "m.compute_dtype": s("torch.float32"),
        "m.view_as_float": ("U8", (), bytes([0])),
    }, {"quant_method": "hqq"})
    # row 0: high nibbles 1, 3, 5, 15 -> (q - 1) * 0.5; row 1: low nibbles 0, 2, 4, 6 -> q * 2
    assert values(path, "m.weight") == [0.0, 1.0, 2.0, 7.0, 0.0, 4.0, 8.0, 12.0]


def test_modelopt_nvfp4_low_nibble_even_and_weight_scale_2_multiplies(tmp_path):
    packed = bytes([0x21] + [0x00] * 7)        # codes 1 (0.5) then 2 (1.0), then zeros
    path = write(tmp_path, {
        "m.weight": ("U8", (1, 8), packed),
        "m.weight_scale": ("F8_E4M3", (1, 1), bytes([0x40])),                   # E4M3 0x40 = 2.0
        "m.weight_scale_2": ("F32", (), struct.pack("<f", 0.25)),
    }, {"quant_method": "modelopt", "quant_algo": "NVFP4"})
    assert values(path, "m.weight") == [0.25, 0.5] + [0.0] * 14                 # e2m1 * 2.0 * 0.25


def test_sparse24_scatters_the_kept_values_at_the_set_bits(tmp_path):
    """Row of 8: bitmask 0b01100101 (little-endian bits: columns 0, 2, 5, 6) keeps 4 values."""
    path = write(tmp_path, {
        "m.shape": ("I64", (2, 1), struct.pack("<2q", 1, 8)),
        "m.compressed": ("F32", (1, 4), struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)),
        "m.bitmask": ("U8", (1, 1), bytes([0b01100101])),
    }, {"quant_method": "compressed-tensors", "sparsity_config": {"format": "sparse-24-bitmask"}})
    assert values(path, "m.weight") == [1.0, 0.0, 2.0, 0.0, 0.0, 3.0, 4.0, 0.0]
