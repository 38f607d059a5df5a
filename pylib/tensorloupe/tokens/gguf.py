"""A GGUF file's tokenizer, read from its metadata (gguf-py constants.py, Keys.Tokenizer).

Vocabularies of more than 1024 entries are lazy arrays (formats/gguf/metadata.py): only the
entries of the page shown are decoded, with `gguf.read_array`.
"""

from __future__ import annotations

from ..model import Checkpoint
from .vocab import MAX_TEMPLATE, Vocabulary, entry

TOKENS, SCORES, TYPES, MERGES = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                 "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
# gguf-py TokenType (llama.cpp llama_token_type); 0 is what unset arrays hold.
TOKEN_TYPES = {0: "undefined", 1: "normal", 2: "unknown", 3: "control", 4: "user_defined",
               5: "unused", 6: "byte"}
SPECIAL_IDS = (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("eot", "eot_token_id"),
               ("eom", "eom_token_id"), ("unk", "unknown_token_id"), ("pad", "padding_token_id"),
               ("sep", "seperator_token_id"), ("mask", "mask_token_id"))


class GgufVocabulary(Vocabulary):
    def __init__(self, ckpt: Checkpoint):
        self.ckpt = ckpt
        meta = ckpt.metadata
        tokens = meta.get(TOKENS)
        self.size = len(tokens) if isinstance(tokens, list) else int(tokens["length"])
        self.has_scores, self.has_types = SCORES in meta, TYPES in meta

    def encoder(self):
        """Built from the whole vocabulary, once per checkpoint (kept on it: opening the
        Tokens tab again, or another Vocabulary of the same checkpoint, does not reread it)."""
        cached = getattr(self.ckpt, "_token_encoder", None)
        if cached is None:
            from .codec.from_gguf import from_gguf
            cached = from_gguf(self.ckpt, self.size)
            self.ckpt._token_encoder = cached
        return cached

    def _array(self, key: str, start: int, count: int) -> list:
        from ..formats.gguf import reader as gguf   # GGUF checkpoints only (it brings the ggml codecs)
        return gguf.read_array(self.ckpt, key, start, count)

    def _entries(self, start: int, count: int) -> list[dict]:
        tokens = self._array(TOKENS, start, count)
        # scores/types shorter than the vocabulary (a broken file) leave the rest blank
        types = (self._array(TYPES, start, count) if self.has_types else []) + [None] * len(tokens)
        scores = (self._array(SCORES, start, count) if self.has_scores else []) + [None] * len(tokens)
        return [entry(start + i, t, TOKEN_TYPES.get(k, k) if k is not None else None, s)
                for i, (t, k, s) in enumerate(zip(tokens, types, scores))]

    def summary(self) -> dict:
        meta = self.ckpt.metadata
        special = {}
        for label, key in SPECIAL_IDS:
            token_id = meta.get(f"tokenizer.ggml.{key}")
            if isinstance(token_id, int) and not isinstance(token_id, bool):
                special[label] = ({"id": token_id, **_pick(self._entries(token_id, 1)[0])}
                                  if 0 <= token_id < self.size else {"id": token_id, "token": None,
                                                                     "problem": "outside the vocabulary"})
        merges = meta.get(MERGES)
        merges = (len(merges) if isinstance(merges, list)
                  else merges.get("length") if isinstance(merges, dict) else None)
        return {"source": "gguf", "file": self.ckpt.name, "model": meta.get("tokenizer.ggml.model"),
                "pre": meta.get("tokenizer.ggml.pre"), "size": self.size, "merges": merges,
                "scores": self.has_scores, "types": self.has_types, "special": special,
                "chat_template": _template(self.ckpt)}


def _pick(e: dict) -> dict:
    return {"token": e["token"], "shown": e["shown"], "type": e["type"]}


def _template(ckpt: Checkpoint) -> dict | None:
    key = "tokenizer.chat_template"
    value = ckpt.metadata.get(key)
    if value is None:
        return None
    length = len(value) if isinstance(value, str) else value.get("length", 0)
    from ..formats.gguf import reader as gguf
    text = gguf.read_string(ckpt, key, 0, MAX_TEMPLATE if not isinstance(value, str) else None)
    return {"text": text[:MAX_TEMPLATE], "length": length, "truncated": len(text) > MAX_TEMPLATE
            or (not isinstance(value, str) and length > MAX_TEMPLATE)}
