"""A Hugging Face tokenizer beside a checkpoint: `tokenizer.json` (the `tokenizers` library's
serialisation) and/or `tokenizer_config.json` (transformers' settings).

tokenizer.json: {"model": {"type": "BPE" | "WordPiece" | "Unigram" | "WordLevel", "vocab":
{token: id} (Unigram: [[token, score], ...], the id being the position), "merges": [...]},
"added_tokens": [{"id", "content", "special"}], "pre_tokenizer": {"type": ...} | null}.
tokenizer_config.json: "bos_token", "eos_token", "pad_token", "unk_token", ... (a string, or
{"content": ...}), "chat_template", "added_tokens_decoder": {id: {"content", "special"}}.
Both are already parsed (bounded) by opening/beside.py; this only reads them.
"""

from __future__ import annotations

from ..opening.beside import Found
from ..errors import FormatError, UsageError
from .vocab import MAX_TEMPLATE, Vocabulary, entry

# Ids are dense in real tokenizers (a few unused slots at most); a file whose ids are mostly holes
# would make paging and search walk empty ranges, so it is refused.
SPARSE_FACTOR, SPARSE_SLACK = 2, 1024
SPECIAL_NAMES = (("bos", "bos_token"), ("eos", "eos_token"), ("unk", "unk_token"),
                 ("pad", "pad_token"), ("sep", "sep_token"), ("cls", "cls_token"),
                 ("mask", "mask_token"), ("eot", "eot_token"))


class JsonVocabulary(Vocabulary):
    def __init__(self, tokenizer: Found, config: Found):
        self.where = [f.where for f in (tokenizer, config) if f.data is not None]
        data, self.config = tokenizer.data or {}, config.data or {}
        self.data, self._encoder = tokenizer.data, None
        model = data.get("model") if isinstance(data.get("model"), dict) else {}
        self.model_type = model.get("type") if isinstance(model.get("type"), str) else None
        self.tokens: dict[int, str] = {}
        self.scores: dict[int, float] = {}
        self.kinds: dict[int, str] = {}
        vocab = model.get("vocab")
        if isinstance(vocab, dict):
            self.tokens = {i: t for t, i in vocab.items() if isinstance(i, int) and i >= 0}
        elif isinstance(vocab, list):
            for i, item in enumerate(vocab):
                if isinstance(item, list) and item and isinstance(item[0], str):
                    self.tokens[i] = item[0]
                    if len(item) > 1 and isinstance(item[1], (int, float)):
                        self.scores[i] = item[1]
        added = [a for a in data.get("added_tokens") or [] if isinstance(a, dict)]
        decoder = self.config.get("added_tokens_decoder")
        if isinstance(decoder, dict):
            added += [{"id": int(k), **v} for k, v in decoder.items()
                      if isinstance(v, dict) and str(k).isdigit()]
        for a in added:
            if isinstance(a.get("id"), int) and isinstance(a.get("content"), str):
                self.tokens.setdefault(a["id"], a["content"])
                self.kinds[a["id"]] = "special" if a.get("special") else "added"
        merges = model.get("merges")
        self.merges = len(merges) if isinstance(merges, list) else None
        pre = data.get("pre_tokenizer")
        self.pre = pre.get("type") if isinstance(pre, dict) else None
        self.size = max(self.tokens) + 1 if self.tokens else 0
        if self.size > SPARSE_FACTOR * len(self.tokens) + SPARSE_SLACK:
            raise FormatError(f"token ids go up to {self.size - 1:,} for only {len(self.tokens):,} "
                              "tokens", file=self.where[0].rsplit("/", 1)[-1])
        self.ids = {t: i for i, t in self.tokens.items()}

    def encoder(self):
        if self.data is None:
            raise UsageError(f"only {self.where[0].rsplit('/', 1)[-1]} is beside the model: encoding "
                             "needs tokenizer.json (its model, merges and pre-tokenizer)")
        if self._encoder is None:
            from .codec.from_json import from_json
            self._encoder = from_json(self.data, self.where[0].rsplit('/', 1)[-1])
        return self._encoder

    def _entries(self, start: int, count: int) -> list[dict]:
        return [entry(i, self.tokens.get(i, ""), self.kinds.get(i, "normal" if i in self.tokens else "missing"),
                      self.scores.get(i)) for i in range(start, min(start + count, self.size))]

    def summary(self) -> dict:
        special = {}
        for label, key in SPECIAL_NAMES:
            value = self.config.get(key)
            text = value.get("content") if isinstance(value, dict) else value
            if isinstance(text, str):
                token_id = self.ids.get(text)
                special[label] = {"id": token_id, "token": text, "shown": entry(0, text)["shown"],
                                  "type": self.kinds.get(token_id)}
        return {"source": " + ".join(w.rsplit("/", 1)[-1] for w in self.where),
                "file": ", ".join(self.where), "model": self.model_type
                or self.config.get("tokenizer_class"), "pre": self.pre, "size": self.size,
                "merges": self.merges, "scores": bool(self.scores), "types": bool(self.kinds),
                "special": special, "chat_template": _template(self.config.get("chat_template"))}


def _template(value) -> dict | None:
    if isinstance(value, list):  # [{"name": "default", "template": ...}, ...]
        value = next((t.get("template") for t in value if isinstance(t, dict)
                      and t.get("name") == "default"), None)
    if not isinstance(value, str):
        return None
    return {"text": value[:MAX_TEMPLATE], "length": len(value), "truncated": len(value) > MAX_TEMPLATE}
