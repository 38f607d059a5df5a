"""llama.cpp's UGM tokenizer (a GGUF vocabulary with tokenizer.ggml.model "t5": SentencePiece
Unigram, as T5, mT5 and XLM-RoBERTa convert), after src/llama-vocab.cpp's llm_tokenizer_ugm and
llm_tokenizer_ugm_session, one raw-text fragment at a time (special tokens are cut out first by
the Encoder, as tokenizer_st_partition does):

1. normalise over the UTF-8 bytes (normalize_prefix): at each offset the longest user-defined
   token is kept as it is, else the charsmap's longest rule applies (precompiled.py), else one
   character passes (an invalid byte becomes U+FFFD); then spaces become ▁, a run of spaces is
   merged into one ▁ before the next word if remove_extra_whitespaces, trailing ones dropped,
   and one ▁ is put before the first word if add_space_prefix;
2. Viterbi over the result with the scores of normal, user-defined (score 0) and unused tokens;
   a character no token spells costs min(normal score) - 10 as the unknown token, and runs of
   unknowns fuse into one. A challenger must score strictly higher to replace, shortest first.
There is no byte fallback: llama.cpp keeps byte tokens out of the UGM trie.
"""

from __future__ import annotations

import struct

from .precompiled import Charsmap

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
UNK_PENALTY = 10.0
SPACE = "▁"


def _f32(x: float) -> float:
    """llama.cpp keeps unknown_token_score in a float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


class Ugm:
    def __init__(self, words: list[str], scores: list[float], types: list[int], unk: int,
                 charsmap: Charsmap | None, add_space_prefix: bool, remove_extra_whitespaces: bool):
        self.unk, self.charsmap = unk, charsmap
        self.prefix, self.merge = add_space_prefix, remove_extra_whitespaces
        self.ids: dict[str, int] = {}
        self.score: dict[int, float] = {}
        normal = []
        for i, (w, s, t) in enumerate(zip(words, scores, types)):
            if t in (NORMAL, USER_DEFINED, UNUSED) and w:
                self.ids[w] = i      # the trie's insert: a repeated text keeps the last id
                self.score[i] = 0.0 if t == USER_DEFINED else float(s)
            if t == NORMAL:
                normal.append(float(s))
        self.user = sorted({w.encode("utf-8") for w, t in zip(words, types)
                            if t == USER_DEFINED and w}, key=len, reverse=True)
        # llama.cpp starts min_score at FLT_MAX: no normal token leaves it there
        self.unk_score = _f32((min(normal) if normal else 3.4028234663852886e38) - UNK_PENALTY)
        self.longest = max(map(len, self.ids), default=1)

    def _prefix(self, data: bytes, at: int) -> tuple[str, int]:
        """normalize_prefix: (the normalised text of the bytes at `at`, how many it consumed)."""
        for user in self.user:
            if data.startswith(user, at):
                return user.decode("utf-8"), len(user)
        if self.charsmap is not None:
            hit = self.charsmap.longest(data, at)
            if hit is not None:
                return hit[1], hit[0]
        lead = data[at]
        size = 1 if lead < 0x80 else 2 if lead >> 5 == 6 else 3 if lead >> 4 == 14 else \
            4 if lead >> 3 == 30 else 0
        try:
            return data[at:at + size].decode("utf-8"), size
        except UnicodeDecodeError:
            return "\ufffd", 1

    def normalize(self, text: str) -> str:
        data = text.encode("utf-8", "surrogatepass")
        out: list[str] = []
        prepended = in_word = False
        at = 0
        while at < len(data):
            piece, used = self._prefix(data, at)
            for ch in piece:
                if ch != " ":
                    if not in_word:
                        in_word = True
                        if (self.prefix and not prepended) or self.merge:
                            out.append(SPACE)
                            prepended = True
                    out.append(ch)
                else:
                    in_word = False
                    if not self.merge:
                        out.append(SPACE)
            at += used
        return "".join(out)

    def __call__(self, text: str, after_special: bool = True) -> list[int]:
        text = self.normalize(text)
        n = len(text)
        if not n:
            return []
        ids, score, unk = self.ids, self.score, self.unk
        best: list = [None] * (n + 1)        # (score, start, id)
        best[0] = (0.0, 0, unk)
        for start in range(n):
            here = best[start][0]
            single = False
            for end in range(start + 1, min(n, start + self.longest) + 1):
                token = ids.get(text[start:end])
                if token is None:
                    continue
                if end == start + 1:
                    single = True
                challenger = here + score[token]
                if best[end] is None or challenger > best[end][0]:
                    best[end] = (challenger, start, token)
            if not single:
                challenger = here + self.unk_score
                if best[start + 1] is None or challenger > best[start + 1][0]:
                    best[start + 1] = (challenger, start, unk)
        out: list[int] = []
        end, prev_unknown = n, False
        while end > 0:
            _, start, token = best[end]
            if not (prev_unknown and token == unk):
                out.append(token)
            prev_unknown = token == unk
            end = start
        return out[::-1]


def decoder(words: list[str], types: list[int], add_space_prefix: bool):
    """llama.cpp's token_to_piece for UGM (special tokens shown): control, unknown and
    user-defined tokens as their text, normal ones with ▁ as a space, byte tokens as their byte,
    others as nothing; detokenize drops one leading space of the first piece if
    add_space_prefix."""
    kind = {}
    for w, t in zip(words, types):
        kind.setdefault(w, t)

    def run(pieces: list[str]) -> list[str]:
        data = bytearray()
        for k, p in enumerate(pieces):
            t = kind.get(p, NORMAL)
            if t == NORMAL:
                raw = p.replace(SPACE, " ").encode("utf-8")
            elif t in (CONTROL, UNKNOWN, USER_DEFINED):
                raw = p.encode("utf-8")
            elif t == BYTE and len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
                raw = bytes([int(p[3:5], 16)])
            else:
                raw = b""
            if k == 0 and add_space_prefix and raw.startswith(b" "):
                raw = raw[1:]
            data += raw
        return [data.decode("utf-8", errors="replace")]
    return run
