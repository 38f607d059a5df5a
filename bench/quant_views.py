"""Benchmark: select -> stats and select -> heatmap of a quantised 4096 x 4096 weight (GPTQ 4-bit,
AWQ 4-bit, FP8 128x128 blocks, gpt-oss MXFP4, 2:4-sparse FP8 (also 2 columns wider: width 4k + 2,
read by row pairs), MLX affine 4-bit; bitsandbytes NF4,
HQQ 4-bit, compressed-tensors pack-quantized int4 and NVFP4, optimum-quanto int4), against the same
views of an unquantised F16 tensor of that shape, in CPython and (with --browser) in the page.

    python bench/quant_views.py [--runs 3] [--side 4096] [--only SCHEME ...] [--browser]

Each file is sparse: its header, and random bytes only in the small parts (scales, zero points,
block scales; the 2:4 bitmask keeps two of each four); the packed codes are holes (zero codes
decode on the same path as any other codes, so the time is the decoders'). The views are the Tensor tab's first work: `sample` plus a
64-bin histogram (stats), and the 256 x 256 `grid` lattice plus the colormap (heatmap; of expert
0's matrix for the 3-D MXFP4 experts, against an F16 [1, side, side]), each on a freshly opened
checkpoint. Printed per scheme: median times, the ratio to F16's, reads and
bytes read, and whether the bytes read are within 2x the F16 view's (the bound we hold).
With --browser, the same two views in the app (headless Chromium, as bench/browser_views.py
drives it): each file opened with its config.json, the tensor selected, the time until the
full sample's statistics are shown and until the last heatmap is drawn, and the worker's reads
and bytes for both, against the F16 tensor's in the same page.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "pylib")]

import tensorloupe  # noqa: E402
from tensorloupe import colormap  # noqa: E402
from tensorloupe.sampler.sampling import grid, sample  # noqa: E402

ITEM = {"F16": 2, "F32": 4, "I32": 4, "U8": 1, "U32": 4, "F8_E4M3": 1, "I64": 8}


def schemes(side: int) -> dict:
    """scheme -> (the weight's logical name, [(stored name, dtype, shape, random?)], config)."""
    g = side // 128
    return {
        "F16": ("w.weight", [("w.weight", "F16", [side, side], True)], None),
        # gpt-oss experts are 3-D [E, G*32, R]: MXFP4 is measured against an F16 of its shape
        "F16-3d": ("w.experts.gate_up_proj", [("w.experts.gate_up_proj", "F16", [1, side, side], True)], None),
        "GPTQ-4bit": ("w.weight", [("w.qweight", "I32", [side * 4 // 32, side], False),
                                   ("w.qzeros", "I32", [g, side * 4 // 32], True),
                                   ("w.scales", "F16", [g, side], True),
                                   ("w.g_idx", "I32", [side], None)],
                      {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
                       "sym": True, "checkpoint_format": "gptq"}),
        "AWQ-4bit": ("w.weight", [("w.qweight", "I32", [side, side // 8], False),
                                  ("w.qzeros", "I32", [g, side // 8], True),
                                  ("w.scales", "F16", [g, side], True)],
                     {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}),
        "FP8-block": ("w.weight", [("w.weight", "F8_E4M3", [side, side], False),
                                   ("w.weight_scale_inv", "F32", [g, g], True)],
                      {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}),
        "MXFP4": ("w.experts.gate_up_proj", [("w.experts.gate_up_proj_blocks", "U8", [1, side, side // 32, 16], False),
                                             ("w.experts.gate_up_proj_scales", "U8", [1, side, side // 32], True)],
                  {"quant_method": "mxfp4"}),
        # compressed-tensors 2:4 over FP8 codes, per channel: kept codes [side, side/2] (holes), a
        # bitmask keeping columns 0, 1 of each four (0x33), the dense shape, one F32 scale a row
        "FP8-2:4": ("w.weight", [("w.compressed", "F8_E4M3", [side, side // 2], False),
                                 ("w.bitmask", "U8", [side, side // 8], b"\x33" * (side * side // 8)),
                                 ("w.shape", "I64", [2, 1], struct.pack("<2q", side, side)),
                                 ("w.weight_scale", "F32", [side, 1], True)],
                    {"quant_method": "compressed-tensors", "format": "float-quantized",
                     "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                         "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}}},
                     "sparsity_config": {"format": "sparse-24-bitmask", "sparsity_structure": "2:4"}}),
        # the same of width side + 2 (4k + 2): fours straddle row pairs, decoded by pairs; the even
        # row keeps 2 fewer than half (last byte 0x00), the odd row 2 more (0x03: its last two columns)
        "FP8-2:4-4k+2": ("w.weight", [("w.compressed", "F8_E4M3", [side, side // 2 + 1], False),
                                      ("w.bitmask", "U8", [side, side // 8 + 1],
                                       (b"\x33" * (side // 8) + b"\x00" + b"\x33" * (side // 8) + b"\x03") * (side // 2)),
                                      ("w.shape", "I64", [2, 1], struct.pack("<2q", side, side + 2)),
                                      ("w.weight_scale", "F32", [side, 1], True)],
                         {"quant_method": "compressed-tensors", "format": "float-quantized",
                          "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                              "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}}},
                          "sparsity_config": {"format": "sparse-24-bitmask", "sparsity_structure": "2:4"}}),
        "MLX-4bit": ("w.weight", [("w.weight", "U32", [side, side * 4 // 32], False),
                                  ("w.scales", "F16", [side, side // 64], True),
                                  ("w.biases", "F16", [side, side // 64], True)],
                     {"group_size": 64, "bits": 4}),
    }


def other_schemes(side: int) -> dict:
    """The other dequantised layouts, as schemes() says them (a part given as bytes is written
    as them: a quant state's JSON, HQQ's meta). Their heatmaps decode whole rows (no cell
    decoder) where none is named in quant/cells.py."""
    n, g = side * side, side // 128
    state = json.dumps({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [side, side]}).encode()

    def text(s: str) -> tuple:
        return "U8", [len(s)], s.encode()
    hqq_rows = n // 64
    ct = {"quant_method": "compressed-tensors", "format": "pack-quantized",
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
              "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}}}}
    nvfp4 = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
             "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                 "num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group", "group_size": 16}}}}
    return {
        "bnb-NF4": ("w.weight", [("w.weight", "U8", [n // 2, 1], False),
                                 ("w.weight.absmax", "F32", [n // 64], True),
                                 ("w.weight.quant_map", "F32", [16], True),
                                 ("w.weight.quant_state.bitsandbytes__nf4", "U8", [len(state)], state)],
                    {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}),
        "HQQ-4bit": ("w.weight", [("w.W_q", "U8", [hqq_rows // 2, 64], False),
                                  ("w.scale", "F16", [hqq_rows, 1], True),
                                  ("w.zero", "F16", [hqq_rows, 1], True),
                                  ("w.nbits", "I32", [], struct.pack("<i", 4)),
                                  ("w.group_size", "I32", [], struct.pack("<i", 64)),
                                  ("w.axis", "I32", [], struct.pack("<i", 1)),
                                  ("w.shape", "I64", [2], struct.pack("<2q", side, side)),
                                  ("w.packing", *text("4bit_u8")),
                                  ("w.compute_dtype", *text("torch.float16")),
                                  ("w.view_as_float", "U8", [], b"\0")],
                     {"quant_method": "hqq"}),
        "CT-int4": ("w.weight", [("w.weight_packed", "I32", [side, side // 8], False),
                                 ("w.weight_scale", "F16", [side, g], True),
                                 ("w.weight_shape", "I64", [2], struct.pack("<2q", side, side))], ct),
        "CT-NVFP4": ("w.weight", [("w.weight_packed", "U8", [side, side // 2], False),
                                  ("w.weight_scale", "F8_E4M3", [side, side // 16], True),
                                  ("w.weight_global_scale", "F32", [1], True)], nvfp4),
        # quanto qint4 per row (ungrouped: a grouped one keeps its stored [rows*cols/g, g] shape)
        "quanto-int4": ("w.weight", [("w.weight._data._data", "U8", [side // 2, side], False),
                                     ("w.weight._scale", "F16", [side, 1], True),
                                     ("w.weight._shift", "F16", [side, 1], True)],
                        {"quant_method": "quanto", "weights": "int4"}),
    }


def _random(dtype: str, count: int, seed: int) -> bytes:
    import random
    rnd = random.Random(seed)
    if dtype == "F16":       # small normal values: no inf/nan scales
        return struct.pack(f"<{count}e", *(rnd.gauss(0, 0.02) for _ in range(count)))
    if dtype == "F32":
        return struct.pack(f"<{count}f", *(rnd.uniform(0.5, 2) for _ in range(count)))
    if dtype == "U8":        # E8M0 scales near 2**0
        return bytes(rnd.randrange(118, 136) for _ in range(count))
    if dtype == "F8_E4M3":   # E4M3 scales near 1: no NaN bytes
        return bytes(rnd.randrange(0x30, 0x40) for _ in range(count))
    return bytes(rnd.randrange(256) for _ in range(count * ITEM[dtype]))


def write(folder: Path, parts: list, config: dict | None, stem: str = "model") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    header, offset, writes = {}, 0, []
    for i, (name, dtype, shape, fill) in enumerate(parts):
        n = ITEM[dtype]
        count = 1
        for d in shape:
            count *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n * count]}
        if isinstance(fill, bytes):      # given bytes (a bitmask, a shape, a quant state)
            writes.append((offset, fill))
        elif fill:
            writes.append((offset, _random(dtype, count, i)))
        elif fill is None:   # g_idx: i // group
            writes.append((offset, struct.pack(f"<{count}i", *(j // 128 for j in range(count)))))
        offset += n * count
    text = json.dumps(header).encode()
    path = folder / f"{stem}.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for at, blob in writes:
            f.seek(8 + len(text) + at)
            f.write(blob)
        f.truncate(8 + len(text) + offset)
    if config is not None:
        key = "quantization" if "quant_method" not in config else "quantization_config"
        (folder / "config.json").write_text(json.dumps({key: config}))
    return path


def timed(fn, runs: int):
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def views(path: Path, name: str, runs: int) -> dict:
    def stats():
        with tensorloupe.open(path) as ckpt:
            header = ckpt.bytes_read()
            s = sample(ckpt.tensor(name))
            s.histogram(64)
            return ckpt.bytes_read() - header, ckpt.reads()

    def heatmap():
        with tensorloupe.open(path) as ckpt:
            header = ckpt.bytes_read()
            t = ckpt.tensor(name)
            # an expert tensor [E, rows, cols]: expert 0's matrix, as the page's plane picker shows it
            g = grid(t, 256, 256, plane=(1, 2) if len(t.shape) == 3 else None)
            colormap.rgba(g.floats(), g.amax)
            return ckpt.bytes_read() - header, ckpt.reads()

    return {"stats": timed(stats, runs), "heatmap": timed(heatmap, runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--side", type=int, default=4096)
    parser.add_argument("--only", nargs="*", help="schemes to run (F16 always runs)")
    parser.add_argument("--browser", action="store_true", help="also time the views in the page")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores; {args.side} x {args.side}, "
          f"median of {args.runs}")
    with tempfile.TemporaryDirectory() as tmp:
        table = {**schemes(args.side), **other_schemes(args.side)}
        results, files = {}, {}
        for scheme, (name, parts, config) in table.items():
            if args.only and not scheme.startswith("F16") and scheme not in args.only:
                continue
            path = write(Path(tmp) / scheme, parts, config, scheme)
            files[scheme] = (path, name)
            results[scheme] = views(path, name, args.runs)
        for scheme, got in results.items():
            base = results["F16-3d" if scheme == "MXFP4" else "F16"]
            for view in ("stats", "heatmap"):
                t, (nbytes, reads) = got[view]
                t0, (b0, _) = base[view]
                bound = "ok" if nbytes <= 2 * b0 else "OVER 2x"
                print(f"  {scheme:10s} select -> {view:7s} {t * 1e3:8.1f} ms  {t / t0:5.1f}x F16's  "
                      f"{reads:4d} reads {nbytes / 1024:8.0f} KiB ({nbytes / b0:4.2f}x F16's: {bound})")
        if args.browser:
            import quant_page
            quant_page.report(files, args.runs)


if __name__ == "__main__":
    main()
