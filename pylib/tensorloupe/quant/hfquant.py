"""NVIDIA ModelOpt's `hf_quant_config.json`: the scheme of an export whose config.json has no
`quantization_config` (exports before ModelOpt embedded it, and TensorRT-LLM checkpoints).

ModelOpt's unified HF export writes `{"producer": {...}, "quantization": {"quant_algo": "NVFP4"
| "FP8", "group_size": 16, "exclude_modules": [...], "kv_cache_quant_algo": ...}}` and turns it
into config.json's `quantization_config` with `convert_hf_quant_config_format`
(modelopt/torch/export/convert_hf_config.py, nvidia-modelopt 0.47.0). `quantization_config`
below is that translation for the algorithms read here, so a file with only the
hf_quant_config.json is grouped exactly as one with both.
"""

from __future__ import annotations

NAME = "hf_quant_config.json"
KEY = "quantization"
# quant_algo -> the weights' config group (convert_hf_quant_config_format's, targets Linear)
WEIGHTS = {"FP8": {"num_bits": 8, "type": "float"},
           "NVFP4": {"num_bits": 4, "type": "float", "group_size": 16}}


def quantization_config(data) -> dict | None:
    """config.json's `quantization_config` for this hf_quant_config.json object, or None when it
    names no quantisation (no `quantization.quant_algo`)."""
    details = data.get(KEY) if isinstance(data, dict) else None
    if not isinstance(details, dict) or not details.get("quant_algo"):
        return None
    algo = str(details["quant_algo"])
    out: dict = {"quant_method": "modelopt", "quant_algo": algo}
    if algo in WEIGHTS:
        weights = dict(WEIGHTS[algo])
        if "group_size" in weights:
            weights["group_size"] = details.get("group_size", weights["group_size"])
        out["config_groups"] = {"group_0": {"weights": weights, "targets": ["Linear"]}}
    excluded = details.get("exclude_modules")
    out["ignore"] = excluded if isinstance(excluded, list) else []
    if isinstance(data.get("producer"), dict):
        out["producer"] = data["producer"]
    return out
