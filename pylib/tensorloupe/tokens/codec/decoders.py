"""tokenizer.json decoders (tokenizers' decoders/*.rs): each maps the list of token strings to a
list of strings, joined at the end. One row per type in DECODERS; an unknown type is refused by
name. Without a decoder the tokens are joined with spaces, as tokenizers does.
"""

from __future__ import annotations

import re

from ...errors import UsageError
from .normalize import pick, replacer
from .pretokenize import from_byte_chars

BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
# WordPiece's cleanup (decoders/wordpiece.rs, tokenizers' cleanup function), in its order.
CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
           (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def cleanup(text: str) -> str:
    for a, b in CLEANUP:
        text = text.replace(a, b)
    return text


def _byte_fallback(spec: dict):
    def run(tokens: list[str]) -> list[str]:
        out, pending = [], bytearray()

        def flush():
            if pending:
                try:
                    out.append(pending.decode("utf-8"))
                except UnicodeDecodeError:
                    out.append("\ufffd" * len(pending))
                pending.clear()
        for t in tokens:
            m = BYTE_TOKEN.fullmatch(t) if len(t) == 6 else None
            if m:
                pending.append(int(m.group(1), 16))
            else:
                flush()
                out.append(t)
        flush()
        return out
    return run


def _metaspace(spec: dict):
    rep = spec.get("replacement", "▁")
    scheme = spec.get("prepend_scheme") or ("always" if spec.get("add_prefix_space", True) else "never")
    return lambda tokens: [t.replace(rep, "" if i == 0 and scheme != "never" else " ")
                           for i, t in enumerate(tokens)]


def _wordpiece(spec: dict):
    prefix, clean = spec.get("prefix", "##"), spec.get("cleanup", True)

    def run(tokens: list[str]) -> list[str]:
        out = []
        for i, t in enumerate(tokens):
            t = t[len(prefix):] if i and t.startswith(prefix) else (" " + t if i else t)
            out.append(cleanup(t) if clean else t)
        return out
    return run


def _replace(spec: dict):
    one = replacer(spec, "decoder")
    return lambda tokens: [one(t) for t in tokens]


def _strip(spec: dict):
    content, left, right = spec.get("content", " "), spec.get("start", 0), spec.get("stop", 0)

    def one(t: str) -> str:
        chars = list(t)
        a = 0
        while a < min(left, len(chars)) and chars[a] == content:
            a += 1
        b = len(chars)
        while len(chars) - b < right and b > a and chars[b - 1] == content:
            b -= 1
        return "".join(chars[a:b])
    return lambda tokens: [one(t) for t in tokens]


def _bpe(spec: dict):
    suffix = spec.get("suffix", "</w>")
    return lambda tokens: [t.replace(suffix, "" if i == len(tokens) - 1 else " ")
                           for i, t in enumerate(tokens)]


def _sequence(spec: dict):
    steps = [build(s) for s in spec.get("decoders") or []]

    def run(tokens: list[str]) -> list[str]:
        for step in steps:
            tokens = step(tokens)
        return tokens
    return run


DECODERS = {
    "ByteLevel": lambda spec: (lambda tokens: [from_byte_chars(tokens)]),
    "ByteFallback": _byte_fallback,
    "Fuse": lambda spec: (lambda tokens: ["".join(tokens)]),
    "Metaspace": _metaspace,
    "WordPiece": _wordpiece,
    "Replace": _replace,
    "Strip": _strip,
    "BPEDecoder": _bpe,
    "Sequence": _sequence,
}


def build(spec: dict | None):
    """The decoder a tokenizer.json `decoder` describes (tokens joined by spaces for null)."""
    return pick(DECODERS, "decoder", spec, lambda tokens: [" ".join(tokens)])
