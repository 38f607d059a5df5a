"""GGUF: `reader` (FORMAT, sniff, read), `metadata` (the bounded metadata cursor and
lazy arrays) and `card` (the model card drawn from the metadata)."""
