"""tokenizer.json pre-tokenizers (tokenizers' pre_tokenizers/*.rs): each turns a list of pieces
`(text, start)` into smaller pieces, `start` being where the piece began in the text given to
encode (Metaspace's prepend_scheme "first" asks whether that is 0). One row per type in
PRE_TOKENIZERS; an unknown type is refused by name.
"""

from __future__ import annotations

import functools

from ...errors import UsageError
from . import charclass
from .normalize import is_whitespace, pick, unsupported

# GPT-2's byte-level pre-tokenizer regex (tokenizers byte_level.rs, as in openai/gpt-2 encoder.py).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


@functools.cache
def byte_chars() -> tuple[str, ...]:
    """GPT-2's bytes_to_unicode: byte b is shown as this character (printable ones as themselves)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return tuple(table[b] for b in range(256))


@functools.cache
def char_bytes() -> dict[str, int]:
    return {ch: b for b, ch in enumerate(byte_chars())}


def from_byte_chars(tokens: list[str]) -> str:
    """Byte-level tokens back to text (tokenizers' ByteLevel decoder, llama.cpp's
    llama_decode_text): a token with a character outside the table counts as its own UTF-8."""
    table, data = char_bytes(), bytearray()
    for t in tokens:
        spelled = [table.get(ch) for ch in t]
        data += t.encode("utf-8") if None in spelled else bytes(spelled)
    return data.decode("utf-8", errors="replace")


def to_byte_chars(text: str) -> str:
    table = byte_chars()
    return "".join(table[b] for b in text.encode("utf-8"))


def split(text: str, start: int, spans: list[tuple[int, int]], behavior: str) -> list[tuple[str, int]]:
    """Cut `text` at the matched `spans` (sorted, not overlapping), as tokenizers'
    SplitDelimiterBehavior does (normalizer.rs `split`: the same folds)."""
    if behavior not in BEHAVIORS:
        raise UsageError(f"unknown split behaviour {behavior!r}", expected=", ".join(BEHAVIORS))
    cuts: list[tuple[int, int, bool]] = []   # (from, to, is_match) covering the text
    at = 0
    for a, b in spans:
        if a == b:
            continue
        if a > at:
            cuts.append((at, a, False))
        cuts.append((a, b, True))
        at = b
    if at < len(text):
        cuts.append((at, len(text), False))
    pieces: list[list[int]] = []
    previous = False
    if behavior == "MergedWithNext":
        for a, b, match in reversed(cuts):
            if match and not previous and pieces:
                pieces[-1][0] = a
            else:
                pieces.append([a, b])
            previous = match
        pieces.reverse()
    else:
        for a, b, match in cuts:
            if behavior == "Removed":
                if not match:
                    pieces.append([a, b])
            elif behavior == "Isolated":
                pieces.append([a, b])
            elif (match and not previous if behavior == "MergedWithPrevious"
                  else match == previous) and pieces:
                pieces[-1][1] = b
            else:
                pieces.append([a, b])
            previous = match
    return [(text[a:b], start + a) for a, b in pieces]


def _regex_split(regex, behavior: str, invert: bool = False):
    def run(pieces):
        out = []
        for text, start in pieces:
            spans = [m.span() for m in regex.finditer(text)]
            if invert:
                spans = _gaps(spans, len(text))
            out += split(text, start, spans, behavior)
        return out
    return run


def _gaps(spans, length):
    gaps, at = [], 0
    for a, b in spans:
        if a > at:
            gaps.append((at, a))
        at = b
    return gaps + ([(at, length)] if at < length else [])


def _char_split(test, behavior: str):
    def run(pieces):
        out = []
        for text, start in pieces:
            out += split(text, start, [(i, i + 1) for i, ch in enumerate(text) if test(ch)], behavior)
        return out
    return run


def _split(spec: dict):
    pattern = spec.get("pattern") or {}
    if "String" in pattern:
        import re
        regex = re.compile(re.escape(pattern["String"]))
    elif "Regex" in pattern:
        regex = charclass.translate(pattern["Regex"])
    else:
        raise UsageError("a Split pre-tokenizer without a String or Regex pattern", found=str(pattern)[:80])
    return _regex_split(regex, spec.get("behavior", "Isolated"), bool(spec.get("invert")))


def _byte_level(spec: dict):
    prefix, use_regex = spec.get("add_prefix_space", True), spec.get("use_regex", True)
    regex = charclass.translate(GPT2_PATTERN) if use_regex else None

    def run(pieces):
        out = []
        for text, start in pieces:
            if prefix and not text.startswith(" "):
                text = " " + text
            parts = ([(m.group(), start + m.start()) for m in regex.finditer(text)]
                     if regex is not None else [(text, start)])
            out += [(to_byte_chars(t), s) for t, s in parts]
        return out
    return run


def _metaspace(spec: dict):
    rep = spec.get("replacement", "▁")
    scheme = spec.get("prepend_scheme") or ("always" if spec.get("add_prefix_space", True) else "never")
    if scheme not in ("always", "first", "never"):
        raise unsupported("Metaspace prepend_scheme", scheme)
    cut = spec.get("split", True)

    def run(pieces):
        out = []
        for text, start in pieces:
            text = text.replace(" ", rep)
            if not text.startswith(rep) and (scheme == "always" or (scheme == "first" and start == 0)):
                text = rep + text
            out += (split(text, start, [(i, i + 1) for i, ch in enumerate(text) if ch == rep],
                          "MergedWithNext") if cut else [(text, start)])
        return out
    return run


def is_punctuation(ch: str) -> bool:
    """Rust's is_ascii_punctuation or a Unicode P* character (bert.rs, punctuation.rs)."""
    return (ch.isascii() and not ch.isalnum() and ch.isprintable() and ch != " ") \
        or charclass.has(ch, "P")


def _bert(spec: dict):
    words = _char_split(is_whitespace, "Removed")
    punct = _char_split(is_punctuation, "Isolated")
    return lambda pieces: punct(words(pieces))


def _sequence(spec: dict):
    steps = [build(s) for s in spec.get("pretokenizers") or []]

    def run(pieces):
        for step in steps:
            pieces = step(pieces)
        return pieces
    return run


PRE_TOKENIZERS = {
    "ByteLevel": _byte_level,
    "Split": _split,
    "Metaspace": _metaspace,
    "BertPreTokenizer": _bert,
    "WhitespaceSplit": lambda spec: _char_split(is_whitespace, "Removed"),
    "Punctuation": lambda spec: _char_split(is_punctuation, spec.get("behavior", "Isolated")),
    "Digits": lambda spec: _char_split(lambda ch: charclass.has(ch, "N"),
                                       "Isolated" if spec.get("individual_digits") else "Contiguous"),
    "Sequence": _sequence,
}


def build(spec: dict | None):
    """The pre-tokenizer a tokenizer.json `pre_tokenizer` describes (one piece for null)."""
    return pick(PRE_TOKENIZERS, "pre-tokenizer", spec, lambda pieces: pieces)
