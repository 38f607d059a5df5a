"""Health raises no warning on models that work: tiny models of ten architectures (dense, MoE with
packed expert biases, encoder-only, encoder-decoder, Mamba, a Mamba/attention hybrid, Gemma's 1 + w
norms), freshly initialised and after three training steps, written by transformers'
save_pretrained (fixtures/calibration_files.py; the full corpus of every architecture is
bench/health_calibration.py). What their conventions explain is information that says so, and
the same conventions do not explain away a real fault planted in the same files.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch  # noqa: F401  (CPython only: the corpus is written by transformers)
from safetensors.torch import load_file, save_file

import calibration_files
import tensorloupe
from tensorloupe.cli import main
from tensorloupe.healthscan import health


ROOT = Path(__file__).resolve().parent.parent
KINDS = ("init", "trained")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    made = ROOT / "fixtures" / "out" / "calibration"     # fixtures/make.py writes them
    if all((made / t / k / "model.safetensors").exists() for t in calibration_files.SUBSET for k in KINDS):
        return {f"calibration/{t}/{k}": made / t / k for t in calibration_files.SUBSET for k in KINDS}
    return calibration_files.write_all(tmp_path_factory.mktemp("calibration"))


def serious(report):
    return [(f.severity, f.kind, f.tensor) for f in report.flags if f.severity != "info"]


def test_every_model_of_the_subset_raises_no_warning_or_error(corpus, capsys):
    assert sorted(corpus) == sorted(f"calibration/{t}/{k}" for t in calibration_files.SUBSET
                                    for k in KINDS)
    for name, folder in sorted(corpus.items()):
        assert main(["health", "--json", str(folder)]) == 0, name
        doc = json.loads(capsys.readouterr().out)
        assert doc["complete"] and doc["counts"]["error"] == doc["counts"]["warning"] == 0, \
            (name, [f for f in doc["flags"] if f["severity"] != "info"])


def test_the_conventions_are_said_not_hidden(corpus):
    with tensorloupe.open(corpus["calibration/gpt_oss/init"]) as ckpt:
        flags = {(f.tensor, f.kind): f for f in health(ckpt).flags}
    # gpt-oss' packed expert biases start at zero, as every other bias does: information.
    bias = flags[("model.layers.0.mlp.experts.down_proj_bias", "zero_bias")]
    assert bias.severity == "info"
    norm = flags[("model.layers.0.input_layernorm.weight", "norm_untrained")]
    assert norm.severity == "info" and "freshly initialised" in norm.message
    with tensorloupe.open(corpus["calibration/mamba/init"]) as ckpt:
        flags = {(f.tensor, f.kind): f for f in health(ckpt).flags}
    assert flags[("backbone.layers.0.mixer.D", "constant")].severity == "info"
    a_log = flags[("backbone.layers.1.mixer.A_log", "duplicate")]
    assert a_log.severity == "info" and "deterministic initialisation" in a_log.evidence["convention"]
    with tensorloupe.open(corpus["calibration/mamba/trained"]) as ckpt:   # training moved them
        assert [f for f in health(ckpt).flags if f.kind in ("constant", "duplicate")] == []


def _planted(folder, tmp_path, change):
    out = tmp_path / folder.parent.name
    shutil.copytree(folder, out, dirs_exist_ok=True)
    tensors = load_file(out / "model.safetensors")
    change(tensors)
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    with tensorloupe.open(out) as ckpt:
        return {(f.tensor, f.kind): f.severity for f in health(ckpt).flags if f.severity != "info"}


def test_real_faults_in_the_same_models_still_fire(corpus, tmp_path):
    trained = corpus["calibration/llama/trained"]
    # A norm at 1 among trained norms (not loaded), layer 2's up_proj a copy of layer 1's, a dead
    # matrix: the faults the conventions must not explain.
    def faults(t):
        t["model.layers.2.input_layernorm.weight"] = torch.ones_like(t["model.layers.2.input_layernorm.weight"])
        t["model.layers.2.mlp.up_proj.weight"] = t["model.layers.1.mlp.up_proj.weight"].clone()
        t["model.layers.3.self_attn.o_proj.weight"] = torch.zeros_like(t["model.layers.3.self_attn.o_proj.weight"])
    assert _planted(trained, tmp_path, faults) == {
        ("model.layers.2.input_layernorm.weight", "norm_untrained"): "warning",
        ("model.layers.2.mlp.up_proj.weight", "duplicate"): "warning",
        ("model.layers.3.self_attn.o_proj.weight", "dead"): "error"}
    # Every layer a copy of layer 0 (a bad merge): the copies are not a deterministic init.
    def merged(t):
        for name in [n for n in t if n.startswith("backbone.layers.0.")]:
            for layer in (1, 2, 3):
                t[name.replace(".0.", f".{layer}.", 1)] = t[name].clone()
    got = _planted(corpus["calibration/mamba/trained"], tmp_path, merged)
    assert {kind for _, kind in got} == {"duplicate"} and len(got) >= 5
    # One layer's D constant while the others trained: still a warning.
    def constant(t):
        t["backbone.layers.2.mixer.D"] = torch.ones_like(t["backbone.layers.2.mixer.D"])
    assert _planted(corpus["calibration/mamba/trained"], tmp_path, constant) == {
        ("backbone.layers.2.mixer.D", "constant"): "warning"}


def test_a_first_layer_norm_apart_from_the_rest_is_information_a_collapse_is_not(tmp_path):
    # Eight layers of trained-looking norms (0.4 + noise); layer 0's scaled apart, as published
    # models' first input norms are (they see the embeddings' scale directly).
    def health_of(factor):
        tensors = {}
        for layer in range(8):
            g = torch.Generator().manual_seed(layer)
            tensors[f"model.layers.{layer}.input_layernorm.weight"] = \
                (0.4 + 0.02 * torch.randn(64, generator=g)) * (factor if layer == 0 else 1)
            tensors[f"model.layers.{layer}.self_attn.q_proj.weight"] = 0.02 * torch.randn(64, 64, generator=g)
        save_file(tensors, tmp_path / "m.safetensors")
        with tensorloupe.open(tmp_path / "m.safetensors") as ckpt:
            return [(f.kind, f.severity) for f in health(ckpt).flags]
    name = "norm_collapsed"
    assert health_of(1 / 8) == [(name, "info")] and health_of(1 / 30) == [(name, "info")]
    assert health_of(8) == [("scale", "info")]
    assert health_of(1 / 1000) == [(name, "error")]   # a collapse is not a convention
