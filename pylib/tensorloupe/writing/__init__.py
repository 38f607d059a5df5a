"""Writing checkpoints: safetensors files and shard sets built from any checkpoint tensorloupe
opens, tensor by tensor, with the pickle never executed. plan.py decides what is written and how
big; safetensors.py streams the bytes (encode.py: floats in another dtype); provenance.py fills
`__metadata__`; rows.py builds tensors from rows of others, which prune.py (experts dropped) and
hfnames.py (GGUF names back to Hugging Face's) use; folder.py writes a model folder; text.py
says it on the command line."""
