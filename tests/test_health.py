"""Health: planted faults are each flagged with the right reason and nothing else, the evidence is
reproduced with numpy, sampled and exact are labelled, copies are confirmed on bytes, and the cost
stated before the scan is what it reads."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGUFReader
from safetensors.numpy import load_file
from safetensors.torch import save as save_torch

import health_files
import tensorloupe
from tensorloupe.errors import Cancelled, UsageError
from tensorloupe.healthscan import DEFAULT_BUDGET, health, health_cost, health_steps
from tensorloupe.healthscan.measure import windows

ROOT = Path(__file__).resolve().parent.parent
SEVERITY = {"dead": "error", "nonfinite": "error", "scale": "error", "norm_collapsed": "error",
            "duplicate": "warning"}


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    return health_files.write_all(tmp_path_factory.mktemp("health"))


def kinds(report):
    return {(f.tensor, f.kind): f.severity for f in report.flags}


def by_tensor(report):
    return {f.tensor: f for f in report.flags}


def rms(a):
    a = np.asarray(a, dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(np.sqrt(np.mean(a * a)))


def test_every_planted_fault_is_flagged_with_its_reason_and_nothing_else(faults):
    with tensorloupe.open(faults["health_faults"]) as ckpt:
        report = health(ckpt)
    assert kinds(report) == {(name, kind): SEVERITY[kind] for name, kind in health_files.PLANTED.items()}
    # Dead and copied tensors are decided on every byte; v_proj, k_proj and the norm fit the budget.
    assert all(f.exact for f in report.flags)
    down = next(m for m in report.measures if m.name == "model.layers.0.mlp.down_proj.weight")
    assert (down.samples, down.numel, down.exact) == (8192, 12288, False)  # 48 KiB: sampled
    copy = by_tensor(report)["model.layers.4.mlp.up_proj.weight"]
    assert copy.related == ["model.layers.2.mlp.up_proj.weight"]


def test_the_evidence_is_reproduced_by_numpy(faults):
    arrays = load_file(str(faults["health_faults"]))
    with tensorloupe.open(faults["health_faults"]) as ckpt:
        flags = by_tensor(health(ckpt))
        read = {t.name: windows(t, DEFAULT_BUDGET) for t in ckpt.tensors}

    def sampled_rms(name):
        # The mlp weights (48 KiB) exceed the 32 KiB budget: numpy looks at the same windows.
        flat = arrays[name].reshape(-1)
        return rms(np.concatenate([flat[start:start + count] for start, count in read[name]]))

    def siblings(name, stat):
        role = name.split(".", 3)[3]
        return float(np.median([stat(f"model.layers.{i}.{role}") for i in range(health_files.LAYERS)
                                if f"model.layers.{i}.{role}" != name]))

    nan = flags["model.layers.2.self_attn.k_proj.weight"].evidence
    assert nan["nan"] == int(np.isnan(arrays["model.layers.2.self_attn.k_proj.weight"]).sum()) == 1
    assert nan["siblings_median"] == 0
    dead = flags["model.layers.1.mlp.down_proj.weight"].evidence
    assert not arrays["model.layers.1.mlp.down_proj.weight"].any() and dead["value"] == 0.0
    for name in ("model.layers.1.mlp.down_proj.weight", "model.layers.3.self_attn.v_proj.weight",
                 "model.layers.5.post_attention_layernorm.weight"):
        e = flags[name].evidence
        assert e["statistic"] == "rms"
        assert e["value"] == pytest.approx(sampled_rms(name), rel=1e-12)
        assert e["siblings_median"] == pytest.approx(siblings(name, sampled_rms), rel=1e-12)
    scale = flags["model.layers.3.self_attn.v_proj.weight"].evidence
    assert 90 < scale["factor"] < 110 and scale["z"] > 5  # x100 against a 2%-per-layer trend
    norm = flags["model.layers.5.post_attention_layernorm.weight"].evidence
    assert 900 < 1 / norm["factor"] < 1100
    copy = flags["model.layers.4.mlp.up_proj.weight"].evidence
    assert np.array_equal(arrays["model.layers.4.mlp.up_proj.weight"], arrays["model.layers.2.mlp.up_proj.weight"])
    assert copy["nbytes"] == arrays["model.layers.2.mlp.up_proj.weight"].nbytes


def test_the_same_model_without_faults_raises_nothing(faults):
    with tensorloupe.open(faults["health_clean"]) as ckpt:
        assert health(ckpt).flags == []


def test_a_quantized_gguf_is_judged_on_dequantized_values(faults):
    with tensorloupe.open(faults["health_faults_gguf"]) as ckpt:
        report = health(ckpt)
    expected = {(health_files.gguf_name(name), kind): SEVERITY[kind] for name, kind in health_files.PLANTED.items()}
    assert kinds(report) == expected
    reader = GGUFReader(str(faults["health_faults_gguf"]))
    from gguf.quants import dequantize
    values = {t.name: dequantize(t.data, t.tensor_type) for t in reader.tensors}
    flags = by_tensor(report)
    assert flags["blk.3.attn_v.weight"].evidence["value"] == pytest.approx(rms(values["blk.3.attn_v.weight"]), rel=1e-9)
    # The NaN made its Q8_0 block's scale NaN: the whole 32-value block is NaN once dequantized.
    assert flags["blk.2.attn_k.weight"].evidence["nan"] == int(np.isnan(values["blk.2.attn_k.weight"]).sum()) == 32


def test_a_sampled_scan_labels_its_evidence_and_confirms_on_bytes(faults):
    budget = 2048  # 512 f32 values per tensor: the 2-D weights are sampled, the norms read whole
    with tensorloupe.open(faults["health_faults"]) as ckpt:
        cost = health_cost(ckpt, budget)
        before, asked = ckpt.bytes_read(), ckpt.bytes_asked()
        report = health(ckpt, budget)
        read, asked = ckpt.bytes_read() - before, ckpt.bytes_asked() - asked
    flags = by_tensor(report)
    # The NaN at element 197 of layer 2's k_proj lies between the sampled windows: not seen, and
    # nothing says otherwise (its measure says 512 samples of 2,048, not exact).
    assert "model.layers.2.self_attn.k_proj.weight" not in flags
    k = next(m for m in report.measures if m.name == "model.layers.2.self_attn.k_proj.weight")
    assert (k.samples, k.exact) == (512, False)
    assert {f.kind for f in flags.values()} == {"dead", "scale", "duplicate", "norm_collapsed"}
    assert flags["model.layers.1.mlp.down_proj.weight"].exact          # confirmed on every byte
    assert flags["model.layers.4.mlp.up_proj.weight"].exact            # hashed whole, both copies
    assert not flags["model.layers.3.self_attn.v_proj.weight"].exact   # rms of a sample
    assert "sampled values of" in flags["model.layers.3.self_attn.v_proj.weight"].message or \
        "rms" in flags["model.layers.3.self_attn.v_proj.weight"].message
    # Reads: the stated scan, plus the whole dead tensor and both copies to confirm them.
    confirmations = 12288 * 4 + 2 * 12288 * 4
    # The stated cost is the most it reads: tensor bytes the header's cached block already holds
    # (source.CachedSource) are not read again; the bytes asked of the checkpoint are the cost.
    assert asked == cost.scan_bytes + confirmations and read == report.bytes_read
    assert 0 <= cost.scan_bytes + confirmations - read < ckpt.sources[0].block_size
    assert cost.scan_bytes < 57 * budget


def test_the_stated_cost_is_what_a_clean_scan_reads(faults):
    with tensorloupe.open(faults["health_clean"]) as ckpt:
        for budget in (512, 4096, None):
            cost = health_cost(ckpt, budget)
            assert cost.exact and cost.tensors == 57
            asked = ckpt.bytes_asked()
            read = health(ckpt, budget).bytes_read
            assert ckpt.bytes_asked() - asked == cost.scan_bytes
            assert 0 <= cost.scan_bytes - read < ckpt.sources[0].block_size
        assert health_cost(ckpt, None).scan_bytes == sum(t.nbytes for t in ckpt.tensors)


def test_progress_and_cancel(faults):
    seen = []
    with tensorloupe.open(faults["health_clean"]) as ckpt:
        health(ckpt, progress=lambda done, total: seen.append((done, total)))
        assert seen[-1] == (57, 57) and seen == sorted(seen)
        with pytest.raises(Cancelled):
            health(ckpt, progress=lambda done, total: done < 10)
        states = [(done, report.complete, len(report.measures)) for done, _, report in health_steps(ckpt)]
        assert states[0] == (0, False, 0) and states[-1] == (57, True, 57)
        assert [c for _, c, _ in states].count(True) == 1
        with pytest.raises(UsageError):
            health(ckpt, budget=0)


def _checkpoint(tensors: dict) -> tensorloupe.Checkpoint:
    return tensorloupe.open(save_torch(tensors), name="model.safetensors")


def _layers(make, n=6, role="model.layers.{}.mlp.down_proj.weight", seed=0):
    g = torch.Generator().manual_seed(seed)
    return {role.format(i): make(i, g) for i in range(n)}


def test_a_few_huge_weights_are_a_blowup_not_a_scale_outlier():
    model = _layers(lambda i, g: torch.randn(64, 64, generator=g) * 0.02)
    model["model.layers.3.mlp.down_proj.weight"][7, 9] = 40.0
    with _checkpoint(model) as ckpt:
        report = health(ckpt)
    assert [(f.tensor, f.kind, f.severity) for f in report.flags] == [
        ("model.layers.3.mlp.down_proj.weight", "blowup", "warning")]
    e = report.flags[0].evidence
    assert e["value"] == 40.0 and e["ratio"] == pytest.approx(40.0 / e["siblings_median"])


def test_a_layer_wise_trend_is_not_an_outlier():
    # rms doubling every layer (x32 from first to last) is a trend, not six outliers.
    model = _layers(lambda i, g: torch.randn(64, 64, generator=g) * 0.01 * 2 ** i)
    with _checkpoint(model) as ckpt:
        assert health(ckpt).flags == []


def test_norms_all_one_are_untrained_and_tied_embeddings_and_zero_biases_are_information():
    g = torch.Generator().manual_seed(3)
    embed = torch.randn(100, 16, generator=g) * 0.02
    # One norm at 1 beside a trained one: that one was never trained (or not loaded). When every
    # norm is at its initial value the model is fresh, which is information (test_health_calibration).
    model = {"model.embed_tokens.weight": embed, "lm_head.weight": embed.clone(),
             "model.norm.weight": torch.ones(16), "pooler.dense.bias": torch.zeros(16),
             "model.layers.0.input_layernorm.weight": 1 + 0.1 * torch.randn(16, generator=g),
             "head.scale.weight": torch.full((4, 4), 0.5)}
    with _checkpoint(model) as ckpt:
        report = health(ckpt)
    got = {(f.tensor, f.kind, f.severity) for f in report.flags}
    assert got == {("lm_head.weight", "tied", "info"), ("model.norm.weight", "norm_untrained", "warning"),
                   ("pooler.dense.bias", "zero_bias", "info"), ("head.scale.weight", "constant", "warning")}


def test_shared_torch_storage_is_tied_without_reading_it(tmp_path):
    embed = torch.randn(64, 8)
    path = tmp_path / "tied.pt"
    torch.save({"transformer.wte.weight": embed, "lm_head.weight": embed}, path)
    with tensorloupe.open(path) as ckpt:
        (flag,) = health(ckpt).flags
    assert (flag.kind, flag.severity, flag.evidence["shared_storage"]) == ("tied", "info", True)
    # Any two names over one storage are one tensor tied on purpose, not a copy; a real copy of
    # it is still a copy, whichever comes first in the file.
    for order in (("a.proj.weight", "b.proj.weight", "c.copy.weight"), ("c.copy.weight", "a.proj.weight", "b.proj.weight")):
        tensors = {name: embed.clone() if name.startswith("c.") else embed for name in order}
        torch.save(tensors, path)
        with tensorloupe.open(path) as ckpt:
            flags = sorted((f.kind, f.severity, f.tensor, f.related, f.evidence["shared_storage"])
                           for f in health(ckpt).flags)
        first = next(n for n in order if n != "c.copy.weight")
        others = sorted(set(order) - {"c.copy.weight", first})
        copy, kept = ("c.copy.weight", first) if order[0] != "c.copy.weight" else (first, "c.copy.weight")
        assert flags == [("duplicate", "warning", copy, [kept], False),
                         ("tied", "info", others[0], [first], True)]


def test_buffers_identical_in_every_layer_are_expected():
    inv = 1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16))
    model = {f"model.layers.{i}.self_attn.rotary_emb.inv_freq": inv.clone() for i in range(4)}
    with _checkpoint(model) as ckpt:
        flags = health(ckpt).flags
    assert [(f.kind, f.severity) for f in flags] == [("duplicate_buffer", "info")]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT / "pylib"), "PATH": "/usr/bin:/bin"})


def test_cli_json_is_the_api_report(faults):
    done = run_cli("health", faults["health_faults"], "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    with tensorloupe.open(faults["health_faults"]) as ckpt:
        assert out == json.loads(json.dumps(health(ckpt).to_json()))
    assert {(f["tensor"], f["kind"]) for f in out["flags"]} == set(health_files.PLANTED.items())
    v = next(p for p in out["profile"] if p["role"] == "model.layers.*.self_attn.v_proj.weight")
    assert [pt["layer"] for pt in v["points"]] == list(range(6))
    assert [pt["flags"] for pt in v["points"]][3] == ["scale"]


def test_cli_text_states_the_cost_then_the_flags_and_the_profile(faults):
    done = run_cli("health", faults["health_faults"])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("health-faults.safetensors: reading 931.2 KiB, at most 32.0 KiB of each of 57 tensors")
    assert "4 errors, 1 warning, 0 notes" in lines[1]
    text = done.stdout
    assert "error     scale" in text and "rms 2.086 vs siblings' median 0.02036" in text
    assert "layer profile: rms by layer" in text and "2.09!" in text


def test_cli_bad_file_is_one_line(tmp_path):
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{bad}")
    done = run_cli("health", bad)
    assert done.returncode == 3 and len(done.stderr.strip().splitlines()) == 1 and "x.safetensors" in done.stderr


def test_one_scaled_expert_among_many_is_the_only_flag():
    g = torch.Generator().manual_seed(5)
    model = {f"model.layers.{i}.mlp.experts.{e}.w1.weight": torch.randn(32, 32, generator=g) * 0.02 * 1.1 ** i
             for i in range(4) for e in range(8)}
    model["model.layers.2.mlp.experts.5.w1.weight"] *= 50
    with _checkpoint(model) as ckpt:
        report = health(ckpt)
    assert [(f.tensor, f.kind, f.severity) for f in report.flags] == [
        ("model.layers.2.mlp.experts.5.w1.weight", "scale", "error")]
    (role,) = report.profile()
    assert role["role"] == "model.layers.*.mlp.experts.*.w1.weight" and len(role["points"]) == 32


def test_median_without_one_member_is_the_siblings_median():
    from statistics import median

    from tensorloupe.healthscan.rules import _median_without
    values = [0.3, 0.1, 0.1, 0.7, 0.2, 0.9]
    for i, v in enumerate(values):
        assert _median_without(sorted(values), v) == median(values[:i] + values[i + 1:])


def test_buffers_empty_and_non_finite_tensors():
    model = {"ids": torch.arange(10), "mask": torch.ones(4, dtype=torch.bool), "empty": torch.zeros(0),
             "gain.weight": torch.tensor([0.5]), "broken.weight": torch.full((4, 4), float("nan"))}
    with _checkpoint(model) as ckpt:
        report = health(ckpt)
        cost = health_cost(ckpt)
    skipped = {m.name: m.skipped for m in report.measures if m.skipped}
    assert skipped == {"ids": "int values are not weights", "mask": "bool values are not weights",
                       "empty": "it has no elements"}
    assert (cost.tensors, cost.skipped) == (2, 3)
    # All NaN: one flag that says so (no rms to judge, nothing "constant" about it); one element
    # is never "constant".
    assert [(f.tensor, f.kind, f.evidence["nan"]) for f in report.flags] == [("broken.weight", "nonfinite", 16)]


def test_cli_exact_reads_every_byte(faults):
    done = run_cli("health", faults["health_faults"], "--exact", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["cost"]["budget"] is None and all(t["exact"] for t in out["tensors"])
    # every byte examined; those the header's cached blocks held are not read from the file again
    assert out["cost"]["scan_bytes"] == sum(t["numel"] for t in out["tensors"]) * 4
    assert out["cost"]["scan_bytes"] - 65536 <= out["bytes_read"] <= out["cost"]["scan_bytes"]
    assert run_cli("health", faults["health_faults"], "--budget", "0").returncode == 2


def test_values_near_the_largest_float_are_measured_not_overflowed(tmp_path):
    # |w| summed past the largest float (values of ±1.7e308): math.fsum raised OverflowError out
    # of `tensorloupe health`, a traceback. The sum is kept scaled by 2**-64 (exact), so mean|w|
    # is the exact mean, rounded once. The spread itself passes the largest float: std (and so
    # rms, hypot(std, mean)) is inf, as numpy's is.
    from fractions import Fraction
    from safetensors.numpy import save
    values = [1.7e308, -1.7e308, 1e308, -5.0, 0.25, 1.5e308]
    path = tmp_path / "wide.safetensors"
    path.write_bytes(save({"wide": np.array(values, dtype=np.float64)}))
    report = health(tensorloupe.open(path))
    (measured,) = report.measures
    exact_mean_abs = sum(Fraction(abs(v)) for v in values) / len(values)
    assert measured.mean_abs == float(exact_mean_abs)
    assert measured.max_abs == 1.7e308
    with np.errstate(over="ignore"):
        assert measured.std == np.std(np.array(values)) == measured.rms == math.inf
    proc = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "health", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
