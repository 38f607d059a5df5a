"""The tokenizer a checkpoint carries: vocabulary pages, search, special tokens, chat template.

GGUF keeps the tokenizer in its metadata (gguf-py constants.py, Keys.Tokenizer):
`tokenizer.ggml.tokens` (strings), `.scores` (float32), `.token_type` (int32, TokenType below),
`.merges`, `.model`, `.pre`, `*_token_id` and `tokenizer.chat_template`. Vocabularies of more than
1024 entries are lazy arrays (formats/gguf/metadata.py): only the entries of the page shown are
decoded, with `gguf.read_array`, so page 1 of a 262k vocabulary reads a few KB.

Safetensors and PyTorch checkpoints keep it beside them, as Hugging Face `tokenizer.json` and
`tokenizer_config.json` (tokenizer_json.py), read whole but bounded (beside.py).

Tokens are shown with invisible characters made visible (vocab.shown).
"""

from __future__ import annotations

import os

from . import beside
from .errors import FormatError, UsageError
from .model import Checkpoint
from .source import is_url
from .tokenizer_json import JsonVocabulary
from .vocab import DEFAULT_PAGE, MAX_TEMPLATE, Vocabulary, entry

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

    def _array(self, key: str, start: int, count: int) -> list:
        from .formats.gguf import reader as gguf   # GGUF checkpoints only (it brings the ggml codecs)
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
    from .formats.gguf import reader as gguf
    text = gguf.read_string(ckpt, key, 0, MAX_TEMPLATE if not isinstance(value, str) else None)
    return {"text": text[:MAX_TEMPLATE], "length": length, "truncated": len(text) > MAX_TEMPLATE
            or (not isinstance(value, str) and length > MAX_TEMPLATE)}


def available(ckpt: Checkpoint, files: list | None = None) -> str | None:
    """Where the checkpoint's tokenizer is ("gguf", or the tokenizer file beside a local file),
    None if it has none. Decides on names only (no file is read): what the page asks to decide
    whether to offer a Tokens tab. URLs are not probed (a request the user did not ask for)."""
    if ckpt.format == "gguf" and TOKENS in ckpt.metadata:
        return "gguf"
    local = [f for f in files or [] if isinstance(f, str) and not is_url(f)]
    for name in (beside.TOKENIZER_NAME, beside.TOKENIZER_CONFIG_NAME):
        if local and os.path.isfile(beside.sibling(local[0], name)):
            return name
    return None


def vocabulary(ckpt: Checkpoint, files: list | None = None) -> Vocabulary:
    """The checkpoint's tokenizer: GGUF metadata, else tokenizer.json beside the files."""
    if ckpt.format == "gguf" and TOKENS in ckpt.metadata:
        value = ckpt.metadata[TOKENS]
        if not isinstance(value, list) and not (isinstance(value, dict) and value.get("array")):
            raise FormatError(f"{TOKENS} is not an array", file=ckpt.name, format="gguf",
                              found=type(value).__name__)
        return GgufVocabulary(ckpt)
    found = beside.find(files or [], beside.TOKENIZER_NAME)
    config = beside.find(files or [], beside.TOKENIZER_CONFIG_NAME)
    for f in (found, config):
        if f.problem:
            raise UsageError(f"{f.where} cannot be used: {f.problem}", file=ckpt.name)
    if found.data is None and config.data is None:
        where = "its metadata has no tokenizer.ggml.tokens" if ckpt.format == "gguf" else \
            f"there is no {beside.TOKENIZER_NAME} or {beside.TOKENIZER_CONFIG_NAME} beside it"
        raise UsageError(f"no tokenizer: {where}", file=ckpt.name)
    return JsonVocabulary(found, config)


def print_tokens(doc: dict) -> None:
    print(f"Tokenizer ({doc['source']}: {doc.get('file') or ''})")
    for label in ("model", "pre", "size", "merges"):
        if doc.get(label) is not None:
            print(f"  {label:<10} {doc[label]:,}" if isinstance(doc[label], int) else f"  {label:<10} {doc[label]}")
    for label, s in doc.get("special", {}).items():
        print(f"  {label:<10} {s.get('id')}  {s.get('shown') if s.get('token') is not None else s.get('problem', '')}")
    template = doc.get("chat_template")
    if template:
        cut = " (truncated)" if template["truncated"] else ""
        print(f"  chat template: {template['length']:,} characters{cut}")
        for line in template["text"].splitlines()[:12]:
            print(f"    | {line}")
    rows = doc.get("tokens") if "tokens" in doc else doc.get("matches", [])
    if "find" in doc:
        more = " (more not shown)" if doc["truncated"] else f" (all {doc['scanned']:,} tokens searched)"
        print(f"\n{len(rows)} tokens matching {doc['find']!r}{more}")
    else:
        print(f"\nTokens {doc['start']:,}..{doc['start'] + doc['count'] - 1:,} of {doc['size']:,}")
    for e in rows:
        score = "" if e["score"] is None else f"{e['score']:g}"
        print(f"  {e['id']:>8}  {e['shown']:<24} {e['type'] or '':<12} {score}")
