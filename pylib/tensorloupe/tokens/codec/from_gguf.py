"""An Encoder (encoder.py) from a GGUF file's tokenizer metadata, as llama.cpp's
src/llama-vocab.cpp tokenises (llama.cpp itself cannot be installed here: PyPI has no
llama-cpp-python wheel, only a source package to compile):

- "gpt2": byte-level BPE with `tokenizer.ggml.merges`, pre-tokenised by the regexes that
  `tokenizer.ggml.pre` names (PRE below; an unknown name is refused, not guessed);
- "llama": SentencePiece, merging by `tokenizer.ggml.scores` (models.Spm), a space prefixed to
  the text and after each special token, spaces as ▁, unknown characters as <0xXX> byte tokens;
- "bert": WordPiece over words that start with ▁ (convert_hf_to_gguf writes "##x" as "x" and
  "x" as "▁x"), after llama.cpp's own normalisation (llm_tokenizer_wpm_session::preprocess);
- "t5": SentencePiece Unigram (llama.cpp's UGM, ugm.py) with `tokenizer.ggml.precompiled_charsmap`
  as its normaliser (precompiled.py).
Special tokens (types control, user-defined, unknown) are cut out of the text first, longest
first (tokenizer_st_partition), and BOS/EOS/SEP added as `tokenizer.ggml.add_*_token` say
(defaults per model as llama-vocab.cpp's load()).
"""

from __future__ import annotations

import unicodedata
from typing import NamedTuple

from ...errors import LOW_LEVEL_ERRORS, FormatError, UsageError
from ...model import Checkpoint
from . import charclass, models, ugm
from .encoder import Added, Encoder
from .normalize import is_cjk, is_whitespace, lowercase
from .precompiled import Charsmap
from .pretokenize import byte_chars, from_byte_chars, split

KEY = "tokenizer.ggml."
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
          r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
         r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre -> (the regexes applied in turn, ignore_merges, add_bos default), from
# llama-vocab.cpp's load() and llm_tokenizer_bpe's constructor.
_PRE_ROWS = (
    (("default",), ((r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"), False, False)),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "dbrx", "smaug-bpe"),
     ((LLAMA3,), True, True)),
    (("gpt-2", "phi-2", "mpt", "olmo", "jina-es", "jina-de", "roberta-bpe"), ((GPT2,), False, False)),
    (("qwen2", "deepseek-r1-qwen", "stablelm2"), ((QWEN2,), False, False)),
    (("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone"),
     ((r"\p{N}", GPT2), False, False)),
)
PRE = {name: row for names, row in _PRE_ROWS for name in names}
TYPES_SPECIAL = {2, 3, 4}           # unknown, control, user-defined (cache_special_tokens)


class Defaults(NamedTuple):
    """llama-vocab.cpp load()'s defaults per tokenizer.ggml.model, before the metadata's own."""
    add_bos: bool
    add_eos: bool
    add_sep: bool
    bos: int | None
    eos: int | None
    sep: int | None


MODEL_DEFAULTS = {"llama": Defaults(True, False, False, 1, 2, None),
                  "gpt2": Defaults(False, False, False, 11, 11, None),
                  "bert": Defaults(True, False, True, 101, None, 102),
                  "t5": Defaults(False, True, False, None, 1, None)}


def _meta(ckpt: Checkpoint, name: str, default=None):
    return ckpt.metadata.get(KEY + name, default)


def _length(ckpt: Checkpoint, name: str) -> int:
    """Entries of a metadata array, lazy (a record with its length) or read at open (a list)."""
    value = ckpt.metadata.get(KEY + name)
    return int(value.get("length", 0)) if isinstance(value, dict) else len(value or [])


def _whole(ckpt: Checkpoint, name: str, size: int | None = None) -> list:
    from ...formats.gguf import reader as gguf   # GGUF checkpoints only
    if KEY + name not in ckpt.metadata:
        return []
    return gguf.read_array(ckpt, KEY + name, 0, _length(ckpt, name) if size is None else size)


def _regex_split(patterns):
    compiled = [charclass.translate(p) for p in patterns]

    def run(text: str) -> list[str]:
        pieces = [(text, 0)]
        for regex in compiled:
            pieces = [p for t, s in pieces for p in split(t, s, [m.span() for m in regex.finditer(t)],
                                                            "Isolated")]
        return [t for t, _ in pieces]
    return run


def _flag(ckpt, name: str, default: bool) -> bool:
    value = _meta(ckpt, name)
    return value if isinstance(value, bool) else default


def from_gguf(ckpt: Checkpoint, size: int) -> Encoder:
    """The Encoder a GGUF file's tokenizer metadata describes (a value of the wrong type in it is
    the file's FormatError)."""
    try:
        return _from_gguf(ckpt, size)
    except LOW_LEVEL_ERRORS + (AttributeError,) as e:
        raise FormatError(f"the tokenizer cannot be built: a value has the wrong type "
                          f"({type(e).__name__})", file=ckpt.name, format="gguf") from e


def _from_gguf(ckpt: Checkpoint, size: int) -> Encoder:
    kind = _meta(ckpt, "model")
    if kind not in MODEL_DEFAULTS:
        raise UsageError(f"tokenizer.ggml.model {kind!r} is not implemented by tensorloupe, so it "
                         "cannot encode with it", expected=", ".join(MODEL_DEFAULTS))
    words = _whole(ckpt, "tokens", size)
    types = _whole(ckpt, "token_type", size) or [1] * size
    ids: dict[str, int] = {}
    for i, w in enumerate(words):
        if not isinstance(w, str):
            raise UsageError(f"token {i:,} is not a string", file=ckpt.name)
        ids.setdefault(w, i)
    tokens = dict(enumerate(words))
    special = [Added(i, words[i]) for i in range(min(size, len(types))) if types[i] in TYPES_SPECIAL
               and words[i]]
    known = MODEL_DEFAULTS[kind]
    add_bos = known.add_bos
    if kind == "gpt2":
        segment, decoder, add_bos = _bpe(ckpt, ids, add_bos)
    elif kind == "llama":
        segment, decoder = _spm(ckpt, ids, size)
    elif kind == "t5":
        segment, decoder = _ugm(ckpt, words, types, size)
    else:
        segment, decoder = _wpm(ckpt, ids)
    bos, eos, sep = (_meta(ckpt, f"{n}_token_id", d) for n, d in
                     (("bos", known.bos), ("eos", known.eos), ("seperator", known.sep)))
    prefix, suffix = [], []
    for flag, default, token, where in (("add_bos_token", add_bos, bos, prefix),
                                        ("add_eos_token", known.add_eos, eos, suffix),
                                        ("add_sep_token", known.add_sep, sep, suffix)):
        if _flag(ckpt, flag, default):
            if not isinstance(token, int) or not 0 <= token < size:
                raise UsageError(f"{KEY}{flag} is true but its token id is not in the vocabulary",
                                 file=ckpt.name, found=token)
            where.append(token)
    return Encoder(tokens=tokens, model=lambda w: [], decoder=decoder, added=special,
                   prefix=prefix, suffix=suffix, segment=segment, longest_first=True)


def _bpe(ckpt: Checkpoint, ids: dict[str, int], add_bos: bool):
    pre = _meta(ckpt, "pre") or "default"
    if pre not in PRE:
        raise UsageError(f"tokenizer.ggml.pre {pre!r} is a pre-tokenizer tensorloupe does not know, "
                         "so it cannot encode with it (a guess would tokenise differently)",
                         expected=", ".join(sorted(PRE)))
    patterns, ignore_merges, bos_default = PRE[pre]
    merges = _whole(ckpt, "merges")
    ranks: dict[tuple[str, str], int] = {}
    for rank, m in enumerate(merges):
        cut = m.find(" ", 1) if isinstance(m, str) else -1
        if cut > 0:
            ranks.setdefault((m[:cut], m[cut + 1:]), rank)
    model = models.Bpe(ids, ranks, ignore_merges=ignore_merges, missing="bytes")
    words = _regex_split(patterns)
    table = byte_chars()

    def segment(text: str, after_special: bool) -> list[int]:
        return [i for w in words(text) for i in model("".join(table[b] for b in w.encode("utf-8")))]

    return segment, lambda pieces: [from_byte_chars(pieces)], add_bos or bos_default


def _spm(ckpt: Checkpoint, ids: dict[str, int], size: int):
    scores = _whole(ckpt, "scores", size)
    if len(scores) < size:
        raise UsageError("a SentencePiece GGUF vocabulary needs tokenizer.ggml.scores for every "
                         "token", file=ckpt.name)
    model = models.Spm(ids, scores)
    prefix_space = _flag(ckpt, "add_space_prefix", True)

    def segment(text: str, after_special: bool) -> list[int]:
        text = (" " + text if prefix_space and after_special else text).replace(" ", "▁")
        return model(text)

    def decoder(pieces: list[str]) -> list[str]:
        data = bytearray()
        for p in pieces:
            if len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
                data.append(int(p[3:5], 16))
            else:
                data += p.replace("▁", " ").encode("utf-8")
        text = data.decode("utf-8", errors="replace")
        return [text[1:] if prefix_space and text.startswith(" ") else text]
    return segment, decoder


def _ugm(ckpt: Checkpoint, words: list[str], types: list, size: int):
    scores = _whole(ckpt, "scores", size)
    if len(scores) < size:
        raise UsageError("a t5 (Unigram) GGUF vocabulary needs tokenizer.ggml.scores for every "
                         "token", file=ckpt.name)
    raw = _whole(ckpt, "precompiled_charsmap")
    charsmap = None
    if raw:
        charsmap = Charsmap(bytes(b & 0xFF for b in raw), f"{KEY}precompiled_charsmap")
    # llama-vocab.cpp: add_space_prefix and remove_extra_whitespaces default to false
    prefix = _flag(ckpt, "add_space_prefix", False)
    model = ugm.Ugm(words, scores, list(types), _meta(ckpt, "unknown_token_id", 2), charsmap,
                    prefix, _flag(ckpt, "remove_extra_whitespaces", False))
    return model, ugm.decoder(words, list(types), prefix)


def _wpm(ckpt: Checkpoint, ids: dict[str, int]):
    lower = _flag(ckpt, "normalizer.lowercase", True) if KEY + "normalizer.lowercase" in ckpt.metadata \
        else True
    accents = _flag(ckpt, "normalizer.strip_accents", lower)
    longest = max(map(len, ids), default=1)
    unk = _meta(ckpt, "unknown_token_id", 100)
    has = charclass.has

    def words(text: str) -> list[str]:
        if accents:
            text = unicodedata.normalize("NFD", text)
        out, word = [], []
        for ch in text:
            if is_whitespace(ch):
                if word:
                    out.append("".join(word))
                    word = []
                continue
            if ch in "\x00\ufffd" or has(ch, "C") or (accents and has(ch, "Mn")):
                continue
            s = lowercase(ch) if lower else ch
            if has(ch, "P") or (ord(ch) < 0x7F and has(ch, "S")) or is_cjk(ch):
                if word:
                    out.append("".join(word))
                    word = []
                out.append(s)
            else:
                word.append(s)
        return out + (["".join(word)] if word else [])

    def one(word: str) -> list[int]:
        word = "▁" + word
        out, i = [], 0
        while i < len(word):
            for j in range(min(len(word), i + longest), i, -1):
                token = ids.get(word[i:j])
                if token is not None:
                    out.append(token)
                    i = j
                    break
            else:
                return [unk]
        return out

    def segment(text: str, after_special: bool) -> list[int]:
        return [i for w in words(text) for i in one(w)]

    def decoder(pieces: list[str]) -> list[str]:
        text = "".join(p.replace("▁", " ") for p in pieces)
        return [text[1:] if text.startswith(" ") else text]
    return segment, decoder
