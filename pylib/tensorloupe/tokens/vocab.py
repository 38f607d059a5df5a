"""What every tokenizer view shares: how a token is shown, one entry of a page, and paging and
search over a vocabulary of `size` tokens (gguf.py for GGUF, hf.py for Hugging Face
files beside a checkpoint).

Tokens are shown with their invisible characters made visible: a space as U+2423 (␣), control
characters as <0x0A> (llama.cpp's byte-token spelling), other invisible code points as <U+200B>.
SentencePiece's U+2581 (▁) and byte-level BPE's Ġ are ordinary characters and show as they are.
"""

from __future__ import annotations

import contextlib
import unicodedata

from ..errors import LOW_LEVEL_ERRORS, FormatError, UsageError

DEFAULT_PAGE = 50
MAX_PAGE = 5000
MAX_MATCHES = 200
SEARCH_CHUNK = 4096       # tokens decoded per step of a search
MAX_TEMPLATE = 64 << 10   # chat template characters shown
INVISIBLE = {"Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Cs", "Cn"}


def shown(token: str) -> str:
    """A token with whitespace and control characters made visible."""
    out = []
    for ch in token:
        if ch == " ":
            out.append("␣")
        elif ord(ch) < 0x80 and unicodedata.category(ch) == "Cc":
            out.append(f"<0x{ord(ch):02X}>")
        elif unicodedata.category(ch) in INVISIBLE:
            out.append(f"<U+{ord(ch):04X}>")
        else:
            out.append(ch)
    return "".join(out)


def entry(token_id: int, token, kind=None, score=None) -> dict:
    text = token if isinstance(token, str) else str(token)
    return {"id": token_id, "token": text, "shown": shown(text), "type": kind, "score": score}


@contextlib.contextmanager
def _as_format_error(vocab):
    """What a tokenizer file holds is data: a value of a shape the builders did not foresee is the
    file's error, never a traceback."""
    try:
        yield
    except LOW_LEVEL_ERRORS + (AttributeError,) as e:
        raise FormatError(f"the tokenizer cannot encode or decode this: a value in it has the wrong "
                          f"shape ({type(e).__name__})", file=vocab.summary().get("source")) from e


class Vocabulary:
    """Common paging and search over `size` tokens; subclasses give `_entries(start, count)`."""

    size = 0

    def _entries(self, start: int, count: int) -> list[dict]:
        raise NotImplementedError

    def summary(self) -> dict:
        raise NotImplementedError

    def encoder(self):
        """The Encoder (codec/encoder.py) for this tokenizer, built once (it needs the whole
        vocabulary: a GGUF one is read in full the first time)."""
        raise NotImplementedError

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        """`text` as token ids, as the `tokenizers` library / llama.cpp encode it; with
        `add_special` the ids the tokenizer adds around a sequence (BOS, [CLS] ... [SEP])."""
        encoder = self.encoder()
        with _as_format_error(self):
            return encoder.encode(text, add_special)

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        """Token ids as text (special tokens kept unless `skip_special`)."""
        encoder = self.encoder()
        with _as_format_error(self):
            return encoder.decode(list(ids), skip_special)

    def encoding(self, text: str, add_special: bool = True) -> dict:
        """What `tokens --encode` and the Tokens tab show: the ids and each token made visible."""
        ids = self.encode(text, add_special)
        pieces = self.encoder().pieces(ids)
        return {"encode": text, "ids": ids, "pieces": [shown(p) for p in pieces],
                "count": len(ids), "characters": len(text)}

    def decoding(self, ids: list[int], skip_special: bool = False) -> dict:
        text = self.decode(ids, skip_special)
        return {"decode": list(ids), "text": text,
                "decode_pieces": [shown(p) for p in self.encoder().pieces(list(ids))]}

    def page(self, start: int, count: int = DEFAULT_PAGE) -> dict:
        if start < 0 or count < 0:
            raise UsageError("start and count must be >= 0")
        if start >= self.size and self.size:
            raise UsageError(f"token {start:,} is past the end of the {self.size:,}-token vocabulary")
        count = min(count, MAX_PAGE, self.size - start)
        return {"start": start, "count": count, "tokens": self._entries(start, count)}

    def search(self, text: str, limit: int = DEFAULT_PAGE) -> dict:
        """Tokens whose text (or visible form) contains `text`; a number also finds that id.
        A space in `text` also matches SentencePiece's ▁ and byte-level BPE's Ġ."""
        limit = max(1, min(limit, MAX_MATCHES))
        matches: list[dict] = []
        if text.strip().isdigit() and int(text) < self.size:
            matches += self._entries(int(text), 1)
        needles = {text, text.replace(" ", "▁"), text.replace(" ", "Ġ")} if text else set()
        scanned, truncated = 0, False
        while needles and scanned < self.size and not truncated:
            chunk = self._entries(scanned, min(SEARCH_CHUNK, self.size - scanned))
            scanned += len(chunk)
            for e in chunk:
                if any(n in e["token"] or n in e["shown"] for n in needles) and e not in matches:
                    if len(matches) >= limit:
                        truncated = True
                        break
                    matches.append(e)
        return {"find": text, "matches": matches, "truncated": truncated,
                "scanned": scanned if not truncated else None}
