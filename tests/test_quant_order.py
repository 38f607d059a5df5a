"""Samples of GPTQ, AWQ and gpt-oss MXFP4 weights run in storage order (quant/order.py): each
window is a run of stored bytes, every value equals the same element decoded by whole rows
(quant/decode.py, itself checked against each library in test_quant_values.py), the sample says
which elements it took, the page's staged sample gives the CLI's numbers, and a sample of a
4096-wide weight reads at most twice the bytes an F16 sample of that shape reads."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest

import tensorloupe
from tensorloupe.sampler.sampling import sample, values
from tensorloupe.sampler.staged import StagedSample

# fixtures/make.py's output (quant_files.py); no oracle is imported, so this module also runs
# inside Pyodide (tests/pyodide), where the page samples these weights
OUT = Path(__file__).resolve().parent.parent / "fixtures" / "out"
CASES = sorted(p.name for p in OUT.glob("quant/*") if p.name.startswith(("gptq", "awq", "mxfp4")))


def _weight(ckpt):
    return next(t for t in ckpt.tensors if t.parts)


def test_the_cases_are_there():
    assert len(CASES) >= 10, "run fixtures/make.py first"


@pytest.mark.parametrize("case", CASES)
def test_every_sampled_value_is_the_element_it_says(case):
    with tensorloupe.open(OUT / "quant" / case / "model.safetensors") as ckpt:
        t = _weight(ckpt)
        s = sample(t, t.numel // 3)
        assert s.order is not None and not s.exhaustive
        at = s.indices()
        assert len(at) == len(s.values) == len(set(at))       # distinct elements, one per value
        flat = values(t, 0, t.numel)
        assert [repr(v) for v in s.values] == [repr(flat[i]) for i in at]     # bit for bit
        # spread over the whole tensor: the first window starts it, the last ends it
        assert s.windows[0][0] == 0 and sum(s.windows[-1]) == t.numel
        assert s.to_json()["windows_along"] == s.order.label
        whole = sample(t, t.numel)         # read whole: row-major, as before
        assert whole.order is None and whole.values == flat


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith(("gptq_v1_3bit", "awq", "mxfp4"))])
def test_the_staged_sample_of_the_page_is_the_cli_sample(case):
    with tensorloupe.open(OUT / "quant" / case / "model.safetensors") as ckpt:
        t = _weight(ckpt)
        n = 16 * t.source.sample_order.align      # 16 windows: a float tensor's would have a first look
        whole = sample(t, n)
        staged = StagedSample(t, n)
        look, full = staged.first_look(), staged.sample()
    # no first look: the page's second request would wait behind the whole heatmap lattice
    assert look is None and len(whole.windows) == 16
    assert full.values == whole.values and full.windows == whole.windows and full.order == whole.order
    assert full.to_json() == whole.to_json()


SIDE = 4096
RND = random.Random(24)


def _file(folder: Path, parts: list, config: dict | None) -> Path:
    """A sparse safetensors file: the codes are holes, the small parts random (scales near 1)."""
    folder.mkdir()
    header, offset, blobs = {}, 0, []
    for name, dtype, shape in parts:
        count = 1
        for d in shape:
            count *= d
        n = {"F16": 2, "I32": 4, "U8": 1}[dtype] * count
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        if name.endswith("g_idx"):
            blobs.append((offset, struct.pack(f"<{count}i", *(i // 128 for i in range(count)))))
        elif name.endswith("scales") and dtype == "F16":
            blobs.append((offset, struct.pack(f"<{count}e", *(RND.uniform(1e-3, 1e-2) for _ in range(count)))))
        elif name.endswith(("scales", "qzeros")):      # E8M0 scales near 1, packed zero points
            blobs.append((offset, bytes(RND.randrange(118, 136) for _ in range(n))))
        offset += n
    text = json.dumps(header).encode()
    path = folder / "model.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for at, blob in blobs:
            f.seek(8 + len(text) + at)
            f.write(blob)
        f.truncate(8 + len(text) + offset)
    if config:
        (folder / "config.json").write_text(json.dumps({"quantization_config": config}))
    return path


def _sample_io(path: Path, name: str) -> tuple[int, int]:
    with tensorloupe.open(path) as ckpt:
        before, reads = ckpt.bytes_read(), ckpt.reads()
        s = sample(ckpt.tensor(name))
        assert len(s.values) == 65536 and len(s.windows) == 32
        return ckpt.bytes_read() - before, ckpt.reads() - reads


def test_a_sample_reads_at_most_twice_an_f16_sample(tmp_path):
    g = SIDE // 128
    f16, _ = _sample_io(_file(tmp_path / "f16", [("w.weight", "F16", [SIDE, SIDE])], None), "w.weight")
    layouts = {
        "gptq": ("w.weight", [("w.qweight", "I32", [SIDE // 8, SIDE]), ("w.qzeros", "I32", [g, SIDE // 8]),
                              ("w.scales", "F16", [g, SIDE]), ("w.g_idx", "I32", [SIDE])],
                 {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
                  "checkpoint_format": "gptq"}),
        "awq": ("w.weight", [("w.qweight", "I32", [SIDE, SIDE // 8]), ("w.qzeros", "I32", [g, SIDE // 8]),
                             ("w.scales", "F16", [g, SIDE])],
                {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}),
        "mxfp4": ("w.experts.gate_up_proj", [("w.experts.gate_up_proj_blocks", "U8", [1, SIDE, SIDE // 32, 16]),
                                             ("w.experts.gate_up_proj_scales", "U8", [1, SIDE, SIDE // 32])],
                  {"quant_method": "mxfp4"}),
    }
    for layout, (name, parts, config) in layouts.items():
        got, reads = _sample_io(_file(tmp_path / layout, parts, config), name)
        # before storage order: 7.4x, 6.7x and 17x the bytes, in 16,000 to 261,000 ranges
        assert got <= 2 * f16, (layout, got, f16)
        # codes, scales, zeros of the (at most two) stored rows a window crosses (+ g_idx)
        assert reads <= 2 * 3 * 32 + 1, (layout, reads)


def test_a_lattice_of_crossing_rows_is_drawn_in_one_go(tmp_path):
    """A first look at an eighth of a GPTQ lattice's rows reads the same packed rows as the whole
    lattice (each spans every output): the page would read them twice (4.0x the F16 heatmap's
    bytes, measured), so it draws the lattice at once, reading each once."""
    from tensorloupe.sampler.staged import StagedGrid
    from tensorloupe.sampler.sampling import grid
    g = 1024 // 128
    path = _file(tmp_path / "gptq", [("w.qweight", "I32", [1024 // 8, 1024]), ("w.qzeros", "I32", [g, 1024 // 8]),
                                     ("w.scales", "F16", [g, 1024])],
                 {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "checkpoint_format": "gptq"})
    with tensorloupe.open(path) as ckpt:
        t = ckpt.tensor("w.weight")
        staged = StagedGrid(t, 256, 256)
        assert staged.first_look() is None
        assert staged.grid().values == grid(t, 256, 256).values


def test_a_float16_product_past_its_range_is_inf_as_torch_gives():
    """GPTQ, AWQ and compressed-tensors multiply in the scales' float16: a product past 65504
    rounds to inf there (it raised OverflowError from struct before)."""
    from tensorloupe.quant.rounding import round_to
    assert round_to("F16", [65519.0, 65520.0, -1e6, 1.0]) == [65504.0, float("inf"), float("-inf"), 1.0]
