"""Expert redundancy from weights alone: the planted pairs are found, nothing else, cheaply."""

import math

import pytest
from safetensors.numpy import save as np_save
import numpy as np

import tensorloupe
from tensorloupe.errors import Cancelled
from tensorloupe.moe import detect
from tensorloupe.moe.redundancy import analyse

PAIRS = [[0, 4], [1, 5], [2, 6], [3, 7]]


@pytest.fixture(scope="module")
def demo_analysis():
    from tensorloupe.synthetic import demo_bytes
    return analyse(tensorloupe.open(demo_bytes()))


def test_synthetic_model_pairs_exactly_the_archetypes(demo_analysis):
    assert len(demo_analysis.layers) == 4
    for layer in demo_analysis.layers:
        assert sorted(layer.clusters) == PAIRS
        assert sorted((r.drop, r.keep) for r in layer.recommendations) == [(4, 0), (5, 1), (6, 2), (7, 3)]
        assert layer.matrices == ["w1.weight", "w2.weight", "w3.weight"]
        for i in range(8):
            for j in range(8):
                if i != j and abs(i - j) != 4:
                    assert abs(layer.similarity[i][j]) < 0.1
        assert all(r.similarity > 0.95 for r in layer.recommendations)
    assert len(demo_analysis.recommendations) == 16


def test_recommendation_text(demo_analysis):
    texts = [r.text for r in demo_analysis.layers[3].recommendations]
    assert "drop expert 6 of layer 3: 0.99 similar to expert 2; keep 2" in texts


def test_threshold_moves_without_reading_again(demo_analysis):
    strict = demo_analysis.with_threshold(0.999)
    assert strict.recommendations == [] and demo_analysis.recommendations
    loose = demo_analysis.with_threshold(-1.0)
    assert all(len(layer.clusters) == 1 and len(layer.clusters[0]) == 8 for layer in loose.layers)
    assert len(loose.layers[0].recommendations) == 7


def test_bytes_read_are_bounded_per_expert(demo_analysis):
    # 3 matrices x 4096 F32 elements per expert, read in whole windows: 48 KiB an expert
    per_expert = 3 * 4096 * 4
    assert demo_analysis.bytes_read == 4 * 8 * per_expert
    assert all(layer.bytes_read == 8 * per_expert for layer in demo_analysis.layers)


def test_progress_and_cancel(demo_bytes):
    seen = []
    analyse(tensorloupe.open(demo_bytes), progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (1, 32) and seen[-1] == (32, 32)
    with pytest.raises(Cancelled):
        analyse(tensorloupe.open(demo_bytes), progress=lambda d, t: d < 5)


def test_dense_model_has_no_analysis():
    data = np_save({"model.layers.0.mlp.up_proj.weight": np.ones((4, 4), np.float32)})
    result = analyse(tensorloupe.open(data))
    assert not result.moe.detected and result.layers == [] and result.bytes_read == 0


def test_stacked_3d_experts_with_planted_duplicates():
    rng = np.random.default_rng(5)
    experts = rng.standard_normal((6, 16, 32)).astype(np.float32)
    experts[4] = experts[1]
    experts[5] = experts[2] + rng.standard_normal((16, 32)).astype(np.float32) * 0.05
    data = np_save({"model.layers.0.mlp.experts.gate_up_proj": experts,
                    "model.layers.0.mlp.experts.down_proj": np.concatenate([experts] * 1, axis=1),
                    "model.layers.0.mlp.router.weight": rng.standard_normal((6, 32)).astype(np.float32)})
    result = analyse(tensorloupe.open(data))
    layer = result.layers[0]
    assert sorted(layer.clusters) == [[1, 4], [2, 5]]
    assert layer.similarity[1][4] == pytest.approx(1.0)


def test_quantized_gguf_experts_with_planted_duplicates(tmp_path):
    # Stacked GGUF experts: gate and down quantized to Q8_0 by gguf-py, up as random Q4_K blocks
    # (gguf-py cannot quantize Q4_K); experts 5 and 6 are byte copies of 1 and 2 in every layer.
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf_files import finish, random_blocks

    rng = np.random.default_rng(11)
    n, d, ff = 8, 256, 256
    path = tmp_path / "moe-q.gguf"
    w = gguf.GGUFWriter(path, "qwen2moe")
    w.add_block_count(2)
    w.add_expert_count(n)
    w.add_expert_used_count(4)
    for layer in range(2):
        w.add_tensor(f"blk.{layer}.ffn_gate_inp.weight", rng.standard_normal((n, d)).astype(np.float32))
        for part, qtype in (("gate", Q.Q8_0), ("up", Q.Q4_K), ("down", Q.Q8_0)):
            if qtype == Q.Q8_0:
                x = rng.standard_normal((n, ff, d)).astype(np.float32) * 0.02
                x[5], x[6] = x[1], x[2]
                data = gguf.quants.quantize(x, qtype)
            else:
                data = random_blocks(qtype, n * ff * d // 256, rng).reshape(n, ff, d // 256 * 144)
                data[5], data[6] = data[1], data[2]
            w.add_tensor(f"blk.{layer}.ffn_{part}_exps.weight", data, raw_dtype=qtype)
    finish(w)
    ckpt = tensorloupe.open(path)
    assert ckpt.tensor("blk.0.ffn_up_exps.weight").dtype == "Q4_K"
    result = analyse(ckpt)
    assert result.moe.top_k == 4 and result.moe.top_k_source == "qwen2moe.expert_used_count"
    for layer in result.layers:
        assert layer.matrices == ["down", "gate", "up"]
        assert sorted(layer.clusters) == [[1, 5], [2, 6]]
        assert sorted((r.drop, r.keep) for r in layer.recommendations) == [(5, 1), (6, 2)]
        assert layer.similarity[1][5] == pytest.approx(1.0)


def test_torch_checkpoint_with_qwen_names_and_planted_duplicates(tmp_path):
    import torch
    g = torch.Generator().manual_seed(3)
    state = {}
    for layer in range(2):
        p = f"model.layers.{layer}.mlp"
        state[f"{p}.gate.weight"] = torch.randn(6, 32, generator=g)
        state[f"{p}.shared_expert.up_proj.weight"] = torch.randn(48, 32, generator=g)
        state[f"{p}.shared_expert_gate.weight"] = torch.randn(1, 32, generator=g)
        weights = {e: {leaf: torch.randn(48, 32, generator=g).to(torch.bfloat16)
                       for leaf in ("gate_proj", "up_proj", "down_proj")} for e in range(6)}
        weights[3] = {leaf: w.clone() for leaf, w in weights[0].items()}           # exact copy
        weights[4] = {leaf: w + 0.05 * torch.randn(w.shape, generator=g).to(w.dtype)  # near copy
                      for leaf, w in weights[2].items()}
        for e, leaves in weights.items():
            for leaf, w in leaves.items():
                state[f"{p}.experts.{e}.{leaf}.weight"] = w
    path = tmp_path / "qwen-moe.bin"
    torch.save({"state_dict": state, "epoch": 1}, path)
    result = analyse(tensorloupe.open(path), config={"num_experts_per_tok": 2})
    assert result.moe.detected and result.moe.expert_count == 6 and result.moe.top_k == 2
    assert result.moe.layers[0].shared == ["state_dict.model.layers.0.mlp.shared_expert.up_proj.weight"]
    for layer in result.layers:
        assert layer.matrices == ["down_proj.weight", "gate_proj.weight", "up_proj.weight"]
        assert sorted(layer.clusters) == [[0, 3], [2, 4]]
        # in a pair both members are each other's medoid: the lower index is kept
        assert {(r.drop, r.keep) for r in layer.recommendations} == {(3, 0), (4, 2)}


def test_steps_yield_progress_and_finish_with_the_analysis(demo_bytes, demo_analysis):
    from tensorloupe.moe.redundancy import analyse_steps
    ckpt = tensorloupe.open(demo_bytes)
    steps = list(analyse_steps(ckpt))
    done = [d for d, _, _ in steps]
    assert done == sorted(done) and done[0] == 1 and done[-1] == 32 and {t for _, t, _ in steps} == {32}
    partial = [a for _, _, a in steps]
    assert [len(a.layers) for a in partial if a.complete] == [4]
    assert all(a.bytes_read <= b.bytes_read for a, b in zip(partial, partial[1:]))
    assert partial[-1].to_json() == demo_analysis.to_json()
    # Arguments are checked when the steps are asked for, not at the first step.
    with pytest.raises(tensorloupe.TensorloupeError, match="samples_per_matrix"):
        analyse_steps(ckpt, samples_per_matrix=0)


def test_cost_is_what_the_analysis_reads(demo_bytes, tmp_path):
    from gguf_files import write_moe
    from tensorloupe.moe.redundancy import cost, detect
    for source in (demo_bytes, write_moe(tmp_path / "moe.gguf")):
        for samples in (100, 4096):
            ckpt = tensorloupe.open(source)
            before = ckpt.bytes_read()
            plan = cost(ckpt, detect(ckpt), samples)
            assert ckpt.bytes_read() == before, "the plan is made from descriptors alone"
            cached = sum(len(b) for b in getattr(ckpt.sources[0], "_blocks", {}).values())
            asked = ckpt.bytes_asked()
            result = analyse(ckpt, samples_per_matrix=samples)
            # What the header reads already brought in is not read again (source.CachedSource):
            # the plan is what the analysis needs (the bytes asked), the reads are that minus
            # what was cached.
            assert ckpt.bytes_asked() - asked == plan.total_bytes and plan.exact
            assert plan.total_bytes - cached <= result.bytes_read <= plan.total_bytes
            assert plan.bytes_per_expert * plan.experts == plan.total_bytes


def test_near_equal_similarities_rank_the_same_everywhere():
    # Copies of an expert are 1.0 or 1 - 2e-16 similar depending on how dot products round
    # (CPython 3.11 against 3.12+ and Pyodide): the ranking must not depend on that.
    from tensorloupe.moe.redundancy import ExpertProfile, LayerAnalysis, _cluster
    profiles = [ExpertProfile(e, 0.8, 1.0, 0.0, 1.0, 4) for e in range(4)]
    for near_one in (1.0, 1.0 - 2.0 ** -52):
        sim = [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, near_one], [1.0, 0.0, 1.0, 0.0],
               [0.0, near_one, 0.0, 1.0]]
        layer = _cluster(LayerAnalysis("l", 0, profiles, sim, ["w"], 0.9))
        assert [(r.drop, r.keep) for r in layer.recommendations] == [(2, 0), (3, 1)]


def stacked_moe_bytes() -> bytes:
    rng = np.random.default_rng(12)
    gate_up = (rng.standard_normal((8, 64, 96)) * rng.uniform(0.01, 2, (8, 1, 1)) + 0.01).astype(np.float32)
    down = (rng.standard_normal((8, 96, 64)) * 0.02).astype(np.float32)
    return np_save({"model.layers.0.mlp.experts.gate_up_proj": gate_up,
                    "model.layers.0.mlp.experts.down_proj": down})


def test_expert_profiles_match_numpy_on_the_signature():
    """mean(|w|) is exact; rms and mean come from the similarities' fixed-point sums, within
    gram.max_error / 2 (relative to the rms); the score is their ratio."""
    import math
    from tensorloupe.moe import gram, redundancy
    ckpt = tensorloupe.open(stacked_moe_bytes())
    analysis = analyse(ckpt, samples_per_matrix=1024)
    layer = analysis.layers[0]
    windows, per_expert = redundancy._signature_windows(ckpt, analysis.moe.layers[0], 1024)
    signatures = list(redundancy._signatures(windows, per_expert))
    bound = gram.max_error(len(signatures[0])) / 2
    for profile, signature in zip(layer.experts, signatures):
        w = np.array(signature)
        assert profile.samples == w.size == 2 * 1024
        assert profile.score * profile.rms == pytest.approx(math.fsum(abs(w)) / w.size, rel=1e-15)
        rms = float(np.sqrt(np.mean(w * w)))
        assert abs(profile.rms - rms) <= bound * rms * (1 + 1e-12)
        assert abs(profile.mean - float(w.mean())) <= bound * rms * (1 + 1e-12)
        assert profile.norm == pytest.approx(profile.rms * math.sqrt(2 * 64 * 96), rel=1e-15)


class InPlaceHelper:
    """A LayerHelper measuring in this thread (the page's runs in another worker): ready from
    the `ready_from`-th time it is asked; its answers are there at once (`at_once`), as from a
    helper faster than this thread, or only when waited for, as from one that never catches up."""

    def __init__(self, ready_from: int = 0, at_once: bool = False):
        self.asked = self.started = self.waited = 0
        self.ready_from, self.at_once = ready_from, at_once

    def ready(self):
        self.asked += 1
        return self.asked > self.ready_from

    def start(self, windows, per_expert):
        from tensorloupe.moe.redundancy import measure_bytes
        self.started += 1
        copies = [w._replace(data=bytes(w.data)) for w in windows]
        helper = self

        class Handed:
            def done(self):
                return helper.at_once

            def __call__(self):
                helper.waited += 1
                return measure_bytes(copies, list(per_expert))
        return Handed()


def wide_moe_bytes(layers: int = 5) -> bytes:
    rng = np.random.default_rng(21)
    tensors = {}
    for layer in range(layers):
        w = rng.standard_normal((6, 16, 32)).astype(np.float32)
        w[3] = w[0]
        tensors[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = w
        tensors[f"model.layers.{layer}.mlp.experts.down_proj"] = np.concatenate([w] * 1, axis=1)
    return np_save(tensors)


@pytest.mark.parametrize("ready_from, at_once, helped", [
    (0, True, 4),      # a fast helper takes every layer but the last (nothing goes on beside it)
    (0, False, 2),     # a slow one holds two (HELPER_LAYERS); this thread compares the rest
    (2, True, 2),      # ready from the third layer: layers 2 and 3
    (9, True, 0),      # never ready
])
def test_a_helper_compares_the_layers_it_can_hold_and_changes_nothing(ready_from, at_once, helped):
    from tensorloupe.moe.redundancy import HELPER_LAYERS, analyse_steps
    assert HELPER_LAYERS == 2
    data = wide_moe_bytes()
    want = analyse(tensorloupe.open(data))
    helper = InPlaceHelper(ready_from, at_once)
    for done, total, got in analyse_steps(tensorloupe.open(data), helper=helper):
        # finished in order, whichever thread compared them
        assert [layer.index for layer in got.layers] == list(range(len(got.layers)))
    assert got.to_json() == want.to_json() and (done, total) == (30, 30)
    assert [layer.index for layer in got.layers] == [0, 1, 2, 3, 4]
    assert got.helped == helper.started == helper.waited == helped
    assert want.helped == 0


def test_a_layer_with_strided_experts_is_measured_here(tmp_path):
    """Transposed expert matrices (a torch view saved with its strides) are gathered element by
    element, not read as whole ranges: such a layer is not handed to the helper, and the
    analysis is the same."""
    import torch
    from tensorloupe.moe.redundancy import analyse_steps
    g = torch.Generator().manual_seed(5)
    state = {}
    for layer in range(3):
        for e in range(4):
            for leaf in ("gate_proj", "up_proj", "down_proj"):
                w = torch.randn(32, 48, generator=g)
                state[f"model.layers.{layer}.mlp.experts.{e}.{leaf}.weight"] = w.t() if layer == 1 else w
    path = tmp_path / "strided.pt"
    torch.save(state, path)
    ckpt = tensorloupe.open(path)
    assert not ckpt.tensor("model.layers.1.mlp.experts.0.up_proj.weight").contiguous
    want = analyse(ckpt)
    helper = InPlaceHelper(at_once=True)
    *_, (_, _, got) = analyse_steps(tensorloupe.open(path), helper=helper)
    # layer 0 is handed over; layer 1 is strided and layer 2 the last: both measured here
    assert got.helped == helper.started == 1
    assert got.to_json() == want.to_json()


def test_a_layer_measured_from_its_bytes_is_the_layer_measured_here():
    """What the page's second Python computes from a layer's signature bytes (the same reads)
    is what this thread computes from the values it gathers, bit for bit."""
    from tensorloupe.sampler.gather import read_windows
    from tensorloupe.moe.redundancy import _signature_windows, _signatures, measure_bytes
    from tensorloupe.moe.gram import gram_steps
    ckpt = tensorloupe.open(wide_moe_bytes())
    layer = detect(ckpt).layers[1]
    windows, per_expert = _signature_windows(ckpt, layer, 64)
    reads = ckpt.reads()
    raw = list(read_windows(windows))
    read_raw = ckpt.reads() - reads
    signatures = list(_signatures(windows, per_expert))
    assert read_raw == ckpt.reads() - reads - read_raw      # the same reads
    got = measure_bytes(raw, per_expert)
    *_, want = gram_steps(signatures)
    assert got.gram == want
    assert got.magnitudes == [math.fsum(abs(v) for v in s) for s in signatures]
    assert sum(w.count for w in raw) == sum(map(len, signatures))


def test_a_cancelled_analysis_drops_the_helpers_layer():
    from tensorloupe.moe.redundancy import analyse_steps
    helper = InPlaceHelper()
    steps = analyse_steps(tensorloupe.open(wide_moe_bytes()), helper=helper)
    for done, total, so_far in steps:
        if helper.started:          # layer 0 handed over, layer 1 being measured
            break
    steps.close()
    assert helper.started == 1 and helper.waited == 0 and so_far.layers == []
