"""MLX and optimum-quanto safetensors (issue 24), written by the libraries themselves
(fixtures/quant_lib_files.py), dequantised by tensorloupe and compared element for element with
the library's own dequantisation: `mlx.core.dequantize` and quanto's `QTensor.dequantize()`."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import torch

import tensorloupe
from tensorloupe.sampler.sampling import values

import quant_lib_files
from test_quant_wiring import run_json

MLX = sorted(quant_lib_files.MLX_CASES)
QUANTO = sorted(quant_lib_files.QUANTO_CASES)


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("quant-lib")
    quant_lib_files.write_all(folder)
    return folder / "quant_lib"


def mlx_reference(folder: Path) -> dict[str, np.ndarray]:
    """Every quantised weight as mlx.core.dequantize gives it (float32), by the config's own
    per-module bits, group and mode."""
    arrays = mx.load(str(folder / "model.safetensors"))
    quant = json.loads((folder / "config.json").read_text())["quantization"]
    out = {}
    for name in arrays:
        if not name.endswith(".scales"):
            continue
        module = name[: -len(".scales")]
        cfg = {**quant, **(quant.get(module) or {})}
        mode = cfg.get("mode", "affine")
        kw = {"mode": mode} if mode != "affine" else {"group_size": cfg["group_size"], "bits": cfg["bits"]}
        w = mx.dequantize(arrays[module + ".weight"], arrays[name], arrays.get(module + ".biases"), **kw)
        out[module + ".weight"] = np.asarray(w.astype(mx.float32))
    return out


def quanto_reference(case: str) -> dict[str, np.ndarray]:
    model = quant_lib_files.quanto_model(case)
    return {f"{k}.weight": m.weight.dequantize().detach().to(torch.float32).reshape(-1).numpy()
            for k, m in model.named_children()}


def logical_values(ckpt, name: str) -> np.ndarray:
    t = ckpt.tensor(name)
    return np.array(values(t, 0, math.prod(t.shape)), dtype=np.float32)


@pytest.mark.parametrize("case", MLX)
def test_mlx_every_element_is_mlx_dequantize(out, case):
    want = mlx_reference(out / case)
    with tensorloupe.open(out / case / "model.safetensors") as ckpt:
        got = {t.name: t for t in ckpt.tensors if t.parts}
        assert sorted(got) == sorted(want)
        for name, ref in want.items():
            assert got[name].shape == ref.shape and got[name].dtype == "F32"
            assert np.array_equal(logical_values(ckpt, name), ref.reshape(-1), equal_nan=True), name
        assert ckpt.extras["quantisation"]["method"] == "mlx"


@pytest.mark.parametrize("case", QUANTO)
def test_quanto_every_element_is_quanto_dequantize(out, case):
    want = quanto_reference(case)
    with tensorloupe.open(out / case / "model.safetensors") as ckpt:
        got = {t.name: t for t in ckpt.tensors if t.parts}
        assert sorted(got) == sorted(want)
        for name, ref in want.items():
            assert math.prod(got[name].shape) == ref.size
            assert np.array_equal(logical_values(ckpt, name), ref), name


@pytest.mark.parametrize("case", MLX + QUANTO)
def test_parameters_are_the_unquantised_count(out, case, capsys):
    doc = run_json(capsys, "inspect", out / case / "model.safetensors")
    if case in quant_lib_files.MLX_CASES:
        _, modules = quant_lib_files.MLX_CASES[case]
        want = sum(math.prod(shape) for _, shape, *_ in modules)
    else:
        _, _, (a, b, c) = quant_lib_files.QUANTO_CASES[case]
        # the unquantised Linear(a, b) and Linear(b, c, bias=False), and quanto's own scalar
        # input_scale and output_scale of each layer, stored tensors too
        want = a * b + b + b * c + 4
    assert doc["parameters"] == want


@pytest.mark.parametrize("case", ["mlx_affine_3bit_g32", "mlx_nvfp4", "quanto_qint4_grouped"])
def test_cli_values_and_exact_stats(out, case, capsys):
    folder = out / case
    ref = mlx_reference(folder) if case.startswith("mlx") else quanto_reference(case)
    name = sorted(ref)[0]
    flat = ref[name].reshape(-1).astype(np.float64)
    path = folder / "model.safetensors"
    got = run_json(capsys, "values", path, name, "--count", flat.size)
    assert got["values"] == flat.tolist()
    (entry,) = run_json(capsys, "stats", path, name, "--exact")
    assert entry["exact"] and entry["numel"] == flat.size and entry["dequantised_from"]
    assert entry["stats"]["min"] == flat.min() and entry["stats"]["max"] == flat.max()
    assert math.isclose(entry["stats"]["mean"], math.fsum(flat) / flat.size, rel_tol=1e-12, abs_tol=1e-15)


def test_a_row_window_reads_only_its_rows(out):
    """Rows 4..6 of a 6-bit MLX weight: its codes, scales and biases rows, not the whole part."""
    with tensorloupe.open(out / "mlx_affine_6bit_g128" / "model.safetensors") as ckpt:
        t = ckpt.tensor("model.layers.0.mlp.up_proj.weight")
        before = ckpt.bytes_read()
        values(t, 4 * 384, 2 * 384)
        read = ckpt.bytes_read() - before
        row = sum(p.nbytes for p in t.parts) // 11
        assert read <= 2 * row + 64, (read, row)


def _rewrite_config(out, tmp_path, case, change) -> Path:
    folder = tmp_path / case
    shutil.copytree(out / case, folder)
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "model.safetensors"


def test_an_unknown_mlx_mode_stays_packed(out, tmp_path):
    def change(config):
        for key in ("quantization", "quantization_config"):
            config[key]["mode"] = "q9fp"
    with tensorloupe.open(_rewrite_config(out, tmp_path, "mlx_mxfp4", change)) as ckpt:
        t = ckpt.tensor("model.layers.0.mlp.up_proj.weight")
        assert t.dtype == "U32" and not t.parts
        assert t.info["quantisation"] == "packed, not dequantised: MLX mode 'q9fp'"
        assert ckpt.extras["quantisation"]["packed"] == 1


def test_mlx_bits_that_do_not_fit_the_scales_stay_packed(out, tmp_path):
    def change(config):
        for key in ("quantization", "quantization_config"):
            config[key]["bits"] = 4      # the file is 3-bit: 4 bits gives another column count
    with tensorloupe.open(_rewrite_config(out, tmp_path, "mlx_affine_3bit_g32", change)) as ckpt:
        t = ckpt.tensor("model.layers.0.mlp.up_proj.weight")
        assert t.info["quantisation"].startswith("packed, not dequantised: scales (7, 5) is not (7, 3) for 120 columns")


def test_quanto_int4_without_its_bits_stays_packed(out, tmp_path):
    def change(config):
        config["quantization_config"]["weights"] = None
    with tensorloupe.open(_rewrite_config(out, tmp_path, "quanto_qint4_per_row", change)) as ckpt:
        (t, *_) = [t for t in ckpt.tensors if "quantisation" in t.info]
        assert t.name == "0.weight._data._data" and "does not say the bits" in t.info["quantisation"]
