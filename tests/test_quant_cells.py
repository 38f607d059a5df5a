"""Heatmap lattices of dequantised weights decode only their cells (quant/cells.py): every cell
equals the same element decoded by whole rows (quant/decode.py, itself checked element for
element against each library in test_quant_values.py and test_quant_lib.py), and a lattice
reads each stored row it needs once, not once per logical row."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

import tensorloupe
from tensorloupe.quant import cells as cells_module, logical
from tensorloupe.sampler.sampling import grid, plan_grid, values

# fixtures/make.py's output (quant_files.py, quant_lib_files.py, quant_bnb_files.py,
# quant_sparse24q_files.py, quant_sparse24_odd_files.py); no oracle is imported, so
# this module also runs inside Pyodide (tests/pyodide), where the cell decoders run in the page
OUT = Path(__file__).resolve().parent.parent / "fixtures" / "out"
CASES = sorted(f"{p.parent.name}/{p.name}" for p in [*OUT.glob("quant/*"), *OUT.glob("quant_lib/*")]
               if p.name.startswith(("gptq", "awq", "mxfp4", "fp8_block", "mlx_affine", "mlx_experts",
                                   "mlx_mxfp4", "mlx_nvfp4", "mlx_mxfp8",
                                   # 2:4 sparse (quant/sparse24.py): plain, and over FP8 / INT8 codes
                                   "sparse24_", "sparse24q_fp8", "sparse24q_int8",
                                   # 2:4 of width 4k + 2, fours straddling row pairs (quant_sparse24_odd_files.py)
                                   "sparse24odd_")))


def test_the_cases_are_there():
    assert len(CASES) >= 24, "run fixtures/make.py first"


@pytest.mark.parametrize("case", CASES)
def test_every_cell_is_the_row_decoders_value(case):
    folder = OUT / case
    with tensorloupe.open(folder / "model.safetensors") as ckpt:
        t = next(t for t in ckpt.tensors if t.parts)
        plane = (1, 2) if len(t.shape) == 3 else None
        plan_rows, plan_cols = (t.shape[1], t.shape[2]) if plane else (t.shape[0], t.numel // t.shape[0])
        plan = plan_grid(t, min(plan_rows, 9), min(plan_cols, 7), plane=plane)
        cells = t.source.cells(plan.positions)
        assert cells is not None        # the cell path answers: no fall back to whole rows
        flat = values(t, 0, t.numel)
        want = [flat[p] for p in plan.positions]
        assert [repr(v) for v in cells] == [repr(v) for v in want]      # bit for bit, inf and nan too
        g = grid(t, min(plan_rows, 9), min(plan_cols, 7), plane=plane)
        assert [repr(v) for v in g.floats()] == [repr(v) for v in want]


def test_a_few_positions_are_read_by_rows():
    with tensorloupe.open(OUT / "quant" / "fp8_block" / "model.safetensors") as ckpt:
        t = next(t for t in ckpt.tensors if t.parts)
        assert t.source.cells(list(range(logical.CELLS_AT_LEAST - 1))) is None


def _lattices(height: int, width: int) -> list[tuple[int, int]]:
    """Lattice sizes over a whole view: every element, every 2nd and 3rd (columns stepping by
    whole bytes or not, per bits), and a sparse one like a 4096-wide weight's (every 16th)."""
    sizes = [(height, width), (height, width // 2), (max(1, height // 2), width // 3), (height, width // 16)]
    return [(r, c) for r, c in dict.fromkeys(sizes) if c >= 1 and r * c >= logical.CELLS_AT_LEAST]


# every fixture of a layout with a cell decoder (quant/cells.py CELLS), models of several linears too
WHOLE_CASES = sorted(f"{p.parent.name}/{p.name}" for p in [*OUT.glob("quant/*"), *OUT.glob("quant_lib/*")]
                     if p.name.startswith(("gptq", "awq", "mxfp4", "moe_mxfp4", "fp8_block", "mlx_", "hqq_",
                                           "ct_int", "ct_nvfp4", "quanto_", "bnb_nf4", "bnb_fp4", "model_nvfp4",
                                           "model_w4a16", "model_w8a16", "model_gptq", "model_awq",
                                           "sparse24q_fp8", "sparse24q_int8", "sparse24odd_"))
                     and not p.name.endswith("_fp32"))     # (those hold the float weights HQQ was made from)


def test_every_cell_layout_has_whole_fixtures():
    layouts = set()
    for case in WHOLE_CASES:
        with tensorloupe.open(OUT / case / "model.safetensors") as ckpt:
            layouts |= {t.info["scheme"]["layout"] for t in ckpt.tensors if t.parts}
    assert layouts >= set(cells_module.CELLS), set(cells_module.CELLS) - layouts


def _row_decoded(t) -> list:
    """Every value of a dequantised weight from its row decoder (quant/decode.py), whole rows."""
    return list(t.source._compute(0, t.source.logical.rows_cols[0]))


@pytest.mark.parametrize("case", [c for c in WHOLE_CASES if not c.split("/")[1].startswith(
    ("gptq", "awq", "mxfp4", "moe_mxfp4", "model_gptq", "model_awq"))])     # (these sample in storage order)
def test_sample_windows_and_values_are_the_row_decoders_values(case):
    """A read of a layout whose logical rows are stored rows (a sample's windows, a values
    request) is decoded by the cell decoders, only the elements asked: every window, across row
    ends too, equals the row decoder's values."""
    from tensorloupe.sampler.sampling import sample
    checked = 0
    with tensorloupe.open(OUT / case / "model.safetensors") as ckpt:
        for t in ckpt.tensors:
            if not t.parts or t.info["scheme"]["layout"] not in cells_module.CELLS or t.source.sample_order:
                continue
            flat = _row_decoded(t)
            width = t.source.logical.rows_cols[1]
            s = sample(t, 64)
            assert [repr(v) for v in s.values] == [repr(flat[i]) for a, n in s.windows for i in range(a, a + n)]
            for start, count in ((0, t.numel), (width - 3, 7), (t.numel - 5, 5), (width + 1, 2 * width)):
                count = max(0, min(count, t.numel - start))
                got = values(t, start, count)
                assert [repr(v) for v in got] == [repr(v) for v in flat[start:start + count]], (t.name, start)
            # (MLX's reads go by rows first, logical.ROWS_FIRST: its cell path for them is checked here)
            k = min(t.numel, 3 * width)
            got = array("f", b"".join(t.source._cell_ranges([(0, 4 * (k // 2)), (4 * (k // 2), 4 * (k - k // 2))])))
            assert [repr(v) for v in got] == [repr(v) for v in flat[:k]], t.name
            checked += 1
    assert checked


@pytest.mark.parametrize("case", WHOLE_CASES)
def test_whole_fixture_lattices_are_the_row_decoders_values(case):
    """Every cell of lattices over each whole weight of the fixture (every element, then stepped
    columns, which take the cell decoders' strided and general code paths) equals the row
    decoder's value, bit for bit."""
    checked = 0
    with tensorloupe.open(OUT / case / "model.safetensors") as ckpt:
        for t in ckpt.tensors:
            if not t.parts or t.info["scheme"]["layout"] not in cells_module.CELLS:
                continue
            plane = (1, 2) if len(t.shape) == 3 else None
            height, width = (t.shape[1], t.shape[2]) if plane else (t.shape[0], t.numel // t.shape[0])
            flat = _row_decoded(t)
            for rows, cols in _lattices(height, width):
                plan = plan_grid(t, rows, cols, plane=plane)
                got = t.source.cells(plan.positions)
                assert got is not None, (t.name, rows, cols)
                want = [flat[p] for p in plan.positions]
                assert [repr(v) for v in got] == [repr(v) for v in want], (t.name, rows, cols)
                checked += 1
    assert checked
