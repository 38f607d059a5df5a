"""Writing checkpoints: safetensors files and shard sets built from any checkpoint tensorloupe
opens, tensor by tensor, with the pickle never executed. options.py turns a write's choices (the
CLI's and the page's alike) into what plan.py decides is written and how big; safetensors.py
streams the bytes (encode.py: floats in another dtype; rewrite.py: a tensor whose read fails is
left out and the headers made right); provenance.py fills
`__metadata__`; rows.py builds tensors from rows of others, which prune.py (experts dropped) and
hfnames.py (GGUF names back to Hugging Face's) use; folder.py writes a model folder; text.py
says it on the command line."""
