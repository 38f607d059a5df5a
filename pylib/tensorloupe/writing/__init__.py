"""Writing checkpoints: safetensors files and shard sets built from any checkpoint tensorloupe
opens, tensor by tensor, with the pickle never executed (plan.py decides what is written and
how big; safetensors.py streams the bytes)."""
