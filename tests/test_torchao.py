"""torchao-quantised state_dicts saved with torch.save (issue 24, fixtures/torchao_files.py): every
tensor torch.load sees is listed (a subclass was silently dropped before, with its inner tensors:
on main 13 of the 20 names torch.load gives for these fixtures vanished), and each weight whose
torchao layout we know equals torchao's own dequantize() element for element. torch.load(weights_only=False) runs in a
child process: it imports and runs torchao's classes, which tensorloupe never does."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.errors import TensorloupeError
from tensorloupe.sampler.sampling import values

import torchao_files

CASES = sorted(torchao_files.CASES) + ["mx_unknown"]

CHILD = r"""
import json, sys, warnings
from pathlib import Path
warnings.simplefilter("ignore")
import torch
from safetensors.torch import save_file
sys.path.insert(0, sys.argv[4])
import torchao_files
folder, out = sys.argv[1], sys.argv[2]
torchao_files.write_all(Path(folder).parent)
names, flat = {}, {}
for case in json.loads(sys.argv[3]):
    sd = torch.load(f"{folder}/{case}.pt", weights_only=False)
    names[case] = {k: [type(v).__name__, list(v.shape)] for k, v in sd.items()}
    for k, v in sd.items():
        if type(v).__name__ != "MXTensor":
            v = v.dequantize() if hasattr(v, "qdata") else v
            flat[f"{case}/{k}"] = v.detach().to(torch.float32).contiguous()
save_file(flat, out)
print(json.dumps(names))
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    """One child process (torchao imported once, never here): it writes the fixtures and reads
    them back with torch.load; (fixture folder, names per case with class and shape, values)."""
    folder = tmp_path_factory.mktemp("torchao") / "torchao"
    out = folder.parent / "ref.safetensors"
    run = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(out), json.dumps(CASES),
                          str(Path(torchao_files.__file__).parent)],
                         capture_output=True, text=True, check=True)
    return folder, json.loads(run.stdout.strip().splitlines()[-1]), load_file(str(out))


@pytest.fixture(scope="module")
def written(child) -> Path:
    return child[0]


@pytest.fixture(scope="module")
def torch_reading(child):
    return child[1:]


@pytest.mark.parametrize("case", CASES)
def test_every_tensor_torch_loads_is_listed(written, torch_reading, case):
    names, _ = torch_reading
    with tensorloupe.open(written / f"{case}.pt") as ckpt:
        listed = {t.name: t for t in ckpt.tensors}
        assert sorted(listed) == sorted(names[case])
        for name, (_, shape) in names[case].items():
            assert list(listed[name].shape) == shape
        assert ckpt.parameter_count == sum(math.prod(s) for _, s in names[case].values())


@pytest.mark.parametrize("case", sorted(torchao_files.CASES))
def test_every_element_is_torchao_dequantize(written, torch_reading, case):
    _, ref = torch_reading
    with tensorloupe.open(written / f"{case}.pt") as ckpt:
        quant = ckpt.extras["quantisation"]
        assert quant["dequantised"] == 2 and quant["packed"] == 0
        for t in ckpt.tensors:
            want = ref[f"{case}/{t.name}"]
            got = np.array(values(t, 0, t.numel), dtype=np.float32)
            assert np.array_equal(got, want.reshape(-1)), t.name
            if t.name.endswith("weight"):
                assert t.dtype == "F32" and {p.name.rsplit(".", 1)[1] for p in t.parts} >= {"qdata", "scale"}
                assert t.info["dequantised from"].startswith("torchao ")


@pytest.mark.parametrize("case", torchao_files.SAFETENSORS_CASES)
def test_torchaos_safetensors_flavour_is_the_same_weight(written, torch_reading, case):
    """flatten_tensor_state_dict's `<m>._weight_qdata` + __metadata__: one tensor `<m>.weight`."""
    _, ref = torch_reading
    with tensorloupe.open(written / f"{case}.safetensors") as ckpt:
        assert sorted(t.name for t in ckpt.tensors) == sorted(k.split("/", 1)[1] for k in ref if k.startswith(case + "/"))
        assert ckpt.extras["quantisation"]["dequantised"] == 2
        for t in ckpt.tensors:
            got = np.array(values(t, 0, t.numel), dtype=np.float32)
            assert np.array_equal(got, ref[f"{case}/{t.name}"].reshape(-1)), t.name


def test_an_unknown_subclass_is_listed_not_read_and_counted(written):
    with tensorloupe.open(written / "mx_unknown.pt") as ckpt:
        w = ckpt.tensor("w")
        assert w.problem.startswith("not read: torchao.prototype.mx_formats.mx_tensor.MXTensor is a "
                                    "tensor subclass whose layout tensorloupe does not know")
        assert [p.name for p in w.parts] == ["w.qdata", "w.scale"]   # its stored parts, readable
        assert ckpt.tensor("w.qdata").dtype == "U8"
        assert ckpt.extras["quantisation"]["packed"] == 1
        assert any("not read" in warning for warning in ckpt.warnings)
        with pytest.raises(TensorloupeError, match="not read"):
            values(w, 0, 4)


def test_cli_values_and_stats_are_torchaos(written, torch_reading, capsys):
    _, ref = torch_reading
    path = written / "intx_4bit_asym.pt"
    want = ref["intx_4bit_asym/0.weight"].reshape(-1).astype(np.float64)
    assert main(["values", str(path), "0.weight", "--count", str(want.size), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["values"] == want.tolist()
    assert main(["stats", str(path), "0.weight", "--exact", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["exact"] and entry["dequantised_from"].startswith("torchao IntxUnpackedToInt8Tensor")
    assert entry["stats"]["min"] == want.min() and entry["stats"]["max"] == want.max()


def test_torchao_metadata_that_does_not_fit_its_tensors_stays_as_stored(tmp_path):
    """A file's metadata is data: not JSON, a class we do not know, or a block_size that does not
    divide the weight leaves the stored tensors as they are, each with its reason."""
    from safetensors.numpy import save_file
    q = np.arange(24, dtype=np.int8).reshape(4, 6)
    tensors = {"a._weight_qdata": q, "a._weight_scale": np.ones((4, 1), np.float32),
               "b._weight_qdata": q, "b._weight_scale": np.ones((4, 1), np.float32)}
    entry = {"_type": "Int8Tensor", "_data": {"block_size": [1, 4], "dtype": {"_type": "torch.dtype", "_data": "float32"}},
             "_tensor_data_names": ["qdata", "scale"]}
    metadata = {"tensor_names": json.dumps(["a.weight", "b.weight", "c.weight"]), "a.weight": json.dumps(entry),
                "b.weight": json.dumps({**entry, "_type": "Int3\nTensor"}), "c.weight": "{not json"}
    save_file(tensors, str(tmp_path / "m.safetensors"), metadata=metadata)
    with tensorloupe.open(tmp_path / "m.safetensors") as ckpt:
        assert sorted(t.name for t in ckpt.tensors) == sorted(tensors)
        assert ckpt.tensor("a._weight_qdata").info["quantisation"] == \
            "not read: torchao.Int8Tensor block_size [1, 4] does not divide its shape [4, 6]"
        assert ckpt.tensor("b._weight_qdata").info["quantisation"].startswith(
            "not read: 'Int3\\nTensor' is a tensor subclass whose layout tensorloupe does not know")
        assert ckpt.extras["quantisation"]["packed"] == 2
