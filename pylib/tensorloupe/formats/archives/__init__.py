"""Archives around formats we read: ZIP members in place (members), Hugging Face's DDUF (a stored
ZIP of a diffusers folder of safetensors) and llamafile (an executable with a ZIP holding a GGUF)."""
