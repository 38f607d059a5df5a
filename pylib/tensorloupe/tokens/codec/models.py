"""The tokenisation models, each a function of one pre-tokenised word -> token ids:

- BPE (tokenizers models/bpe/word.rs, llama.cpp llm_tokenizer_bpe): start from characters and
  merge the adjacent pair of lowest merge rank, leftmost first, until no pair has a rank.
- SPM (llama.cpp llm_tokenizer_spm, a GGUF "llama" vocabulary): merge the adjacent pair whose
  concatenation is a token of highest score, leftmost first; what stays unknown becomes byte tokens.
- WordPiece (tokenizers models/wordpiece): greedy longest match, "##" on continuations, the whole
  word [UNK] if any part cannot be matched.
- Unigram (tokenizers models/unigram/model.rs encode_optimized): the best-scoring segmentation
  (Viterbi); a character no token starts with costs min score - 10 and runs of them fuse into one
  unknown.
A word's ids are cached: real text repeats words.
"""

from __future__ import annotations

import heapq

from ...errors import UsageError

UNK_PENALTY = 10.0
CACHE_LIMIT = 1 << 16


def byte_tokens(ids: dict[str, int], text: str) -> list[int] | None:
    """`text`'s UTF-8 bytes as <0xXX> tokens, or None if one is missing."""
    out = [ids.get(f"<0x{b:02X}>") for b in text.encode("utf-8")]
    return None if None in out else out


class Cached:
    def __init__(self):
        self.cache: dict[str, list[int]] = {}

    def __call__(self, word: str) -> list[int]:
        hit = self.cache.get(word)
        if hit is None:
            hit = self.encode(word)
            if len(self.cache) < CACHE_LIMIT:
                self.cache[word] = hit
        return hit

    def encode(self, word: str) -> list[int]:
        raise NotImplementedError


class Bpe(Cached):
    def __init__(self, ids: dict[str, int], ranks: dict[tuple[str, str], int], unk: str | None = None,
                 byte_fallback: bool = False, fuse_unk: bool = False, ignore_merges: bool = False,
                 missing: str = "unk"):
        super().__init__()
        self.ids, self.ranks, self.byte_fallback = ids, ranks, byte_fallback
        self.unk = ids.get(unk) if unk is not None else None
        self.fuse_unk, self.ignore_merges = fuse_unk, ignore_merges
        self.missing = missing   # "unk": tokenizers; "bytes": llama.cpp (each byte's token, if any)

    def encode(self, word: str) -> list[int]:
        if self.ignore_merges and word in self.ids:
            return [self.ids[word]]
        syms = list(word)
        ranks = self.ranks
        while len(syms) > 1:
            best, at = None, -1
            for i in range(len(syms) - 1):
                r = ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            syms[at:at + 2] = [syms[at] + syms[at + 1]]
        out: list[int] = []
        for s in syms:
            token = self.ids.get(s)
            if token is not None:
                out.append(token)
                continue
            if self.missing == "bytes":   # llama.cpp: each byte as a one-byte token, if one is
                out += [self.ids[chr(b)] for b in s.encode("utf-8") if b < 0x80 and chr(b) in self.ids]
                continue
            fallback = byte_tokens(self.ids, s) if self.byte_fallback else None
            if fallback is not None:
                out += fallback
            elif self.unk is not None and not (self.fuse_unk and out and out[-1] == self.unk):
                out.append(self.unk)
            # no unknown token: tokenizers leaves what it cannot spell out
        return out


class Spm(Cached):
    """llama.cpp's SentencePiece merge by score (llm_tokenizer_spm_session.tokenize). A bigram is
    queued only if its concatenation is a token, so every merged symbol is one; a symbol left
    unmerged and unknown is spelled as its bytes' tokens (llama.cpp's resegment and byte_to_token:
    <0xXX>, else the byte as a one-character token)."""

    def __init__(self, ids: dict[str, int], scores: list[float]):
        super().__init__()
        self.ids, self.scores = ids, scores

    def encode(self, text: str) -> list[int]:
        syms = list(text)
        n = len(syms)
        prev, nxt = list(range(-1, n - 1)), [*range(1, n), -1]
        queue: list = []
        ids, scores = self.ids, self.scores

        def bigram(left: int, right: int) -> None:
            if left >= 0 and right >= 0:
                joined = syms[left] + syms[right]
                token = ids.get(joined)
                if token is not None:
                    # highest score first; on a tie the leftmost (llm_bigram_spm::comparator)
                    heapq.heappush(queue, (-scores[token], left, right, len(joined)))

        for i in range(1, n):
            bigram(i - 1, i)
        while queue:
            _, left, right, size = heapq.heappop(queue)
            if not syms[left] or not syms[right] or len(syms[left]) + len(syms[right]) != size:
                continue
            syms[left] += syms[right]
            syms[right] = ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            bigram(prev[left], left)
            bigram(left, nxt[left])
        out: list[int] = []
        i = 0 if n else -1
        while i != -1:
            token = ids.get(syms[i])
            out += [token] if token is not None else [self.byte(b) for b in syms[i].encode("utf-8")]
            i = nxt[i]
        return out

    def byte(self, b: int) -> int:
        token = self.ids.get(f"<0x{b:02X}>", self.ids.get(chr(b)) if b < 0x80 else None)
        if token is None:
            raise UsageError(f"the vocabulary has no token for byte 0x{b:02X} (<0x{b:02X}>), which "
                             "the text needs")
        return token


class WordPiece(Cached):
    def __init__(self, ids: dict[str, int], unk: str, prefix: str = "##", max_chars: int = 100):
        super().__init__()
        if unk not in ids:
            raise UsageError(f"the WordPiece unknown token {unk!r} is not in the vocabulary")
        self.ids, self.unk, self.prefix, self.max_chars = ids, ids[unk], prefix, max_chars

    def encode(self, word: str) -> list[int]:
        if len(word) > self.max_chars:
            return [self.unk]
        out, start = [], 0
        while start < len(word):
            end, found = len(word), None
            while start < end:
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.ids:
                    found = self.ids[piece]
                    break
                end -= 1
            if found is None:
                return [self.unk]
            out.append(found)
            start = end
        return out


class Unigram(Cached):
    def __init__(self, pieces: list[tuple[str, float]], unk_id: int | None, byte_fallback: bool = False):
        super().__init__()
        self.ids = {}
        for i, (p, _) in enumerate(pieces):
            self.ids.setdefault(p, i)
        self.scores = [s for _, s in pieces]
        self.unk_id, self.byte_fallback = unk_id, byte_fallback
        self.unk_score = min(self.scores, default=0.0) - UNK_PENALTY
        self.longest = max((len(p) for p, _ in pieces), default=1)

    def encode(self, text: str) -> list[int]:
        n = len(text)
        best = [None] * (n + 1)          # (score, start, id)
        best[0] = (0.0, 0, None)
        ids, scores = self.ids, self.scores
        for start in range(n):
            here = best[start][0]
            single = False
            for end in range(start + 1, min(n, start + self.longest) + 1):
                token = ids.get(text[start:end])
                if token is None:
                    continue
                score = here + scores[token]
                if best[end] is None or score > best[end][0]:
                    best[end] = (score, start, token)
                if end == start + 1:
                    single = True
            if not single:
                score = here + self.unk_score
                if best[start + 1] is None or score > best[start + 1][0]:
                    best[start + 1] = (score, start, self.unk_id)
        words: list[tuple[str, int | None]] = []
        end = n
        while end > 0:
            _, start, token = best[end]
            if token == self.unk_id and self.unk_id is not None and words and words[-1][1] == self.unk_id:
                words[-1] = (text[start:end] + words[-1][0], token)
            else:
                words.append((text[start:end], token))
            end = start
        out: list[int] = []
        for piece, token in reversed(words):
            if token == self.unk_id and self.byte_fallback:
                fallback = byte_tokens(ids, piece)
                if fallback is not None:
                    out += fallback
                    continue
            if token is None:
                raise UsageError(f"the text has {piece!r}, which the vocabulary cannot spell and "
                                 "which has no unknown token")
            out.append(token)
        return out
