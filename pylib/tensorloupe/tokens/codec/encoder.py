"""Text -> token ids and back, in pure Python, as the `tokenizers` library (tokenizer.json) and
llama.cpp (GGUF vocabularies, from_gguf.py) do it:

1. added tokens are cut out of the text first (tokenizers' AddedVocabulary: those with
   "normalized": false on the raw text, leftmost-longest, with lstrip/rstrip/single_word; the
   others on each piece after normalisation);
2. each other piece is normalised (normalize.py) and pre-tokenised (pretokenize.py);
3. each word goes through the model (models.py);
4. the post-processor adds the sequence's special tokens (BOS, [CLS] ... [SEP]).
Decoding maps ids to token strings and runs the decoder (decoders.py). Every part a tokenizer
names that is not implemented is refused by name when the encoder is built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from ...errors import UsageError
from .normalize import is_whitespace

MAX_TEXT = 1 << 20     # characters encoded at once (a pasted book is cut by the caller)
MAX_IDS = 1 << 20


@dataclass(frozen=True)
class Added:
    """One added token (tokenizers' AddedToken; a GGUF control/user-defined token)."""
    id: int
    content: str
    special: bool = True
    normalized: bool = False
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


@dataclass
class Encoder:
    tokens: dict[int, str]                     # id -> token string (decode)
    model: Callable[[str], list[int]]          # one word -> ids
    normalizer: Callable[[str], str] = lambda t: t
    pre_tokenizer: Callable = lambda pieces: pieces
    decoder: Callable[[list[str]], list[str]] = lambda ts: ["".join(ts)]
    added: list[Added] = field(default_factory=list)
    prefix: list[int] = field(default_factory=list)   # ids the post-processor adds before ...
    suffix: list[int] = field(default_factory=list)   # ... and after one sequence
    segment: Callable | None = None    # llama.cpp: encodes one raw-text fragment whole (from_gguf)
    longest_first: bool = False        # llama.cpp cuts added tokens out longest first, one by one

    def __post_init__(self):
        self.special = {a.id for a in self.added if a.special}
        raw = [a for a in self.added if not a.normalized]
        normed = [a for a in self.added if a.normalized]
        self._raw = self._matcher(raw, lambda t: t)
        self._normed = self._matcher(normed, self.normalizer)

    @staticmethod
    def _matcher(added: list[Added], normalize):
        if not added:
            return None
        by_text: dict[str, Added] = {}
        for a in added:
            by_text.setdefault(normalize(a.content), a)
        by_text.pop("", None)
        if not by_text:
            return None
        alternatives = sorted(by_text, key=len, reverse=True)   # leftmost-longest
        return re.compile("|".join(map(re.escape, alternatives))), by_text

    @staticmethod
    def _cut(text: str, matcher) -> list[tuple[str, int | None]]:
        """`text` as pieces, each (text, None) or (its text, an added token's id)."""
        if matcher is None or not text:
            return [(text, None)] if text else []
        regex, by_text = matcher
        out: list[tuple[str, int | None]] = []
        at = 0
        for m in regex.finditer(text):
            a, b = m.span()
            token = by_text[m.group()]
            if token.single_word and ((a > 0 and _is_word(text[a - 1]))
                                      or (b < len(text) and _is_word(text[b]))):
                continue
            if a < at:
                continue
            if token.lstrip:
                while a > at and is_whitespace(text[a - 1]):
                    a -= 1
            if token.rstrip:
                while b < len(text) and is_whitespace(text[b]):
                    b += 1
            if a > at:
                out.append((text[at:a], None))
            out.append((text[a:b], token.id))
            at = b
        if at < len(text):
            out.append((text[at:], None))
        return out

    def _partition(self, text: str) -> list[tuple[str, int | None]]:
        """llama.cpp's tokenizer_st_partition: each special token, longest first, cut out of
        every fragment still text."""
        pieces: list[tuple[str, int | None]] = [(text, None)] if text else []
        if self._raw is None:
            return pieces
        for content in sorted(self._raw[1], key=len, reverse=True):
            token = self._raw[1][content].id
            out: list[tuple[str, int | None]] = []
            for piece, found in pieces:
                if found is not None or content not in piece:
                    out.append((piece, found))
                    continue
                parts = piece.split(content)
                for k, part in enumerate(parts):
                    if k:
                        out.append((content, token))
                    if part:
                        out.append((part, None))
            pieces = out
        return pieces

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise UsageError("the text to encode must be a string", found=type(text).__name__)
        if len(text) > MAX_TEXT:
            raise UsageError(f"the text has {len(text):,} characters; at most {MAX_TEXT:,} are "
                             "encoded at once")
        ids: list[int] = list(self.prefix) if add_special else []
        start, after_special = 0, True
        cut = self._partition(text) if self.longest_first else self._cut(text, self._raw)
        for piece, token in cut:
            if token is not None:
                ids.append(token)
            elif self.segment is not None:
                ids += self.segment(piece, after_special)
            else:
                at = start     # where each piece starts (Metaspace's "first" asks for 0)
                for sub, sub_token in self._cut(self.normalizer(piece), self._normed):
                    if sub_token is not None:
                        ids.append(sub_token)
                    else:
                        ids += [i for word, _ in self.pre_tokenizer([(sub, at)]) if word
                                for i in self.model(word)]
                    at += len(sub)
            start += len(piece)
            after_special = token is not None
        return ids + (list(self.suffix) if add_special else [])

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.tokens.get(i, "") for i in ids]

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        if len(ids) > MAX_IDS:
            raise UsageError(f"{len(ids):,} ids to decode; at most {MAX_IDS:,} at once")
        bad = [i for i in ids if not isinstance(i, int) or isinstance(i, bool) or i not in self.tokens]
        if bad:
            raise UsageError(f"{len(bad):,} of the ids are not in the vocabulary", found=bad[:5])
        return "".join(self.decoder([self.tokens[i] for i in ids
                                     if not (skip_special and i in self.special)]))
