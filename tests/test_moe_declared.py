"""moe on a file whose metadata declares experts but which holds no expert tensors says that,
instead of "no tensor names follow a known expert naming scheme"."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}


def cli(*argv):
    proc = subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, argv)],
                          capture_output=True, text=True, env=ENV, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_gguf_declaring_experts_without_expert_tensors(tmp_path):
    path = tmp_path / "attn-only.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.expert_count", 8)
    writer.add_uint32("llama.expert_used_count", 2)
    writer.add_tensor("blk.0.attn_q.weight", np.ones((4, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = cli("moe", path)
    assert out.startswith("No Mixture-of-Experts structure: llama.expert_count declares 8 experts, "
                          "but no tensor here is an expert's")
    doc = json.loads(cli("moe", path, "--json"))
    assert doc["moe"]["detected"] is False and "declares 8 experts" in doc["moe"]["reason"]


def test_a_shard_without_experts_beside_a_config_declaring_them(tmp_path):
    from safetensors.numpy import save_file
    save_file({"model.embed_tokens.weight": np.ones((4, 4), np.float32)}, str(tmp_path / "m.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"num_local_experts": 8}))
    out = cli("moe", tmp_path / "m.safetensors")
    assert "config.json num_local_experts declares 8 experts" in out


def test_a_dense_model_still_says_no_expert_names(demo_path, tmp_path):
    from safetensors.numpy import save_file
    save_file({"w": np.ones(3, np.float32)}, str(tmp_path / "dense.safetensors"))
    assert "no tensor names follow a known expert naming scheme" in cli("moe", tmp_path / "dense.safetensors")
