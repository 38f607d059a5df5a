"""tokenizer.json normalisers (the `tokenizers` library's normalizers/*.rs), as functions of the
text: one row per type in NORMALIZERS. A type not in the table is refused by name
(`unsupported`), never skipped: a skipped normaliser would tokenise differently.
"""

from __future__ import annotations

import unicodedata

from ...errors import UsageError
from . import charclass, precompiled

# The CJK ideograph blocks BertNormalizer pads with spaces (bert.rs is_chinese_char).
CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
       (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
KEEP_CONTROL = "\t\n\r"


def is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(a <= cp <= b for a, b in CJK)


def is_whitespace(ch: str) -> bool:
    """Rust's char::is_whitespace (Unicode White_Space)."""
    return ch in _WHITE


_WHITE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                   + "".join(map(chr, range(0x2000, 0x200B))))


def lowercase(text: str) -> str:
    """Per character, as NormalizedString::lowercase (no final-sigma rule, which str.lower has)."""
    return "".join(ch.lower() for ch in text) if not text.isascii() else text.lower()


def strip_accents(text: str) -> str:
    """NFD, then drop the nonspacing marks (Mn)."""
    return "".join(ch for ch in unicodedata.normalize("NFD", text) if not charclass.has(ch, "Mn"))


def _bert(spec: dict):
    clean, chinese = spec.get("clean_text", True), spec.get("handle_chinese_chars", True)
    lower = spec.get("lowercase", True)
    accents = spec.get("strip_accents")
    accents = lower if accents is None else accents

    def run(text: str) -> str:
        if clean:
            text = "".join(" " if is_whitespace(ch) else ch for ch in text
                           if ch not in "\x00\ufffd" and (ch in KEEP_CONTROL or not charclass.has(ch, "C")))
        if chinese:
            text = "".join(f" {ch} " if is_cjk(ch) else ch for ch in text)
        if accents:
            text = strip_accents(text)
        return lowercase(text) if lower else text
    return run


def replacer(spec: dict, kind: str = "normaliser"):
    """A Replace step (a normaliser, or a decoder on each token): String or Regex -> content."""
    pattern, content = spec.get("pattern") or {}, spec.get("content", "")
    if not isinstance(content, str) or not all(isinstance(v, str) for v in pattern.values()):
        raise UsageError(f"a Replace {kind} whose pattern or content is not text", found=str(spec)[:80])
    if "String" in pattern:
        return lambda text: text.replace(pattern["String"], content)
    if "Regex" in pattern:
        regex = charclass.translate(pattern["Regex"])
        return lambda text: regex.sub(content.replace("\\", "\\\\"), text)
    raise UsageError(f"a Replace {kind} without a String or Regex pattern", found=str(pattern)[:80])


def _strip(spec: dict):
    left, right = spec.get("strip_left", True), spec.get("strip_right", True)
    white = "".join(_WHITE)

    def run(text: str) -> str:
        text = text.lstrip(white) if left else text
        return text.rstrip(white) if right else text
    return run


def _sequence(spec: dict):
    steps = [build(s) for s in spec.get("normalizers") or []]

    def run(text: str) -> str:
        for step in steps:
            text = step(text)
        return text
    return run


def _precompiled(spec: dict):
    """SentencePiece's charsmap, as tokenizers applies it (precompiled.py)."""
    return precompiled.from_base64(spec.get("precompiled_charsmap")).for_json


def _form(form: str):
    return lambda spec: (lambda text: unicodedata.normalize(form, text))


NORMALIZERS = {
    "NFC": _form("NFC"), "NFD": _form("NFD"), "NFKC": _form("NFKC"), "NFKD": _form("NFKD"),
    "Lowercase": lambda spec: lowercase,
    "StripAccents": lambda spec: strip_accents,
    "BertNormalizer": _bert,
    "Replace": replacer,
    "Prepend": lambda spec: (lambda text, p=spec.get("prepend", ""): p + text if text else text),
    "Strip": _strip,
    "Sequence": _sequence,
    "Precompiled": _precompiled,
}


def unsupported(kind: str, name) -> UsageError:
    return UsageError(f"the tokenizer's {kind} {name!r} is not implemented by tensorloupe, so it "
                      "cannot encode with it (the vocabulary is still shown)")


def pick(table: dict, kind: str, spec, default):
    """The step a tokenizer.json part describes, from its table by "type" (`default` for null);
    a type not in the table is refused by name."""
    if spec is None:
        return default
    name = spec.get("type") if isinstance(spec, dict) else None
    if name not in table:
        raise unsupported(kind, name)
    return table[name](spec)


def build(spec: dict | None):
    """The normaliser a tokenizer.json `normalizer` describes (identity for null)."""
    return pick(NORMALIZERS, "normaliser", spec, lambda text: text)
