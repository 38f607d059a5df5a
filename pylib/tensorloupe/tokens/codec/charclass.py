"""Unicode character classes for pre-tokenizer regexes, which Python's `re` lacks.

Tokenizer regexes (tokenizers' Split, llama.cpp's llama-vocab.cpp) are Oniguruma patterns with
`\\p{L}`, `\\p{N}`, ... and a Unicode `\\s` (the White_Space property: not U+001C..U+001F, which
Python's `\\s` takes). `translate` rewrites such a pattern into one `re` compiles, with each class
spelled as code-point ranges built once from `unicodedata` (one pass over the code points that can hold them,
cached: about 0.2 s in CPython, so only a tokenizer that encodes pays for it). Anything else with a
Unicode meaning that differs between the two engines (`\\w`, `\\b`, other properties) is refused
by name rather than run with Python's meaning.
"""

from __future__ import annotations

import functools
import itertools
import re
import sys
import unicodedata

from ...errors import UsageError

# Unicode White_Space (PropList.txt): what Oniguruma's and Rust's \s match.
WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# Properties a pattern may name: a general category (one letter: the group).
PROPERTIES = ("L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No",
              "P", "S", "Z")
SHORTHANDS = {"s": lambda: WHITE_SPACE, "d": lambda: ranges("Nd")}
REFUSED = set("wWbBhHRXKG")   # escapes whose Unicode meaning differs between the engines


# Planes 4-13 are unassigned and planes 15-16 private use in every Unicode version so far (16.0):
# no letter, mark, number, punctuation, symbol or separator lives there, so the scan skips them
# (a third of the time) unless the runtime's Unicode is newer than what this was checked on.
SCANNED = ((0, 0x3FFFF), (0xE0000, 0xEFFFF))
CHECKED_UNICODE = 16


@functools.cache
def _by_category() -> dict[str, list[tuple[int, int]]]:
    """Every assigned code point's general category, as ranges per category."""
    out: dict[str, list[tuple[int, int]]] = {}
    newer = int(unicodedata.unidata_version.split(".")[0]) > CHECKED_UNICODE
    for first, last in ((0, sys.maxunicode),) if newer else SCANNED:
        at = first    # map and groupby run in C: 4x faster than a loop over the code points
        for cat, run in itertools.groupby(map(unicodedata.category, map(chr, range(first, last + 1)))):
            n = sum(1 for _ in run)
            out.setdefault(cat, []).append((at, at + n - 1))
            at += n
    return out


def _escape(cp: int) -> str:
    return f"\\U{cp:08x}" if cp > 0xFFFF else f"\\u{cp:04x}"


@functools.cache
def ranges(prop: str) -> str:
    """The inside of a `[...]` class for a general category (`L`) or one of its parts (`Lu`)."""
    spans = sorted(span for cat, found in _by_category().items() if cat.startswith(prop)
                   and cat != "Cs" for span in found)
    return "".join(_escape(a) if a == b else f"{_escape(a)}-{_escape(b)}" for a, b in spans)


def has(ch: str, prop: str) -> bool:
    """Whether a character is in a general category (`C`) or one of its parts (`Mn`)."""
    return unicodedata.category(ch).startswith(prop)


def _property(pattern: str, i: int) -> tuple[str, int]:
    end = pattern.find("}", i)
    if pattern[i:i + 1] != "{" or end < 0:
        raise UsageError("the pre-tokenizer regex has a \\p without {name}", found=pattern[:80])
    name = pattern[i + 1:end]
    if name not in PROPERTIES:
        raise UsageError(f"the pre-tokenizer regex uses \\p{{{name}}}, which tensorloupe does not "
                         "implement", expected=", ".join(PROPERTIES))
    return ranges(name), end + 1


@functools.cache
def translate(pattern: str) -> re.Pattern:
    """An Oniguruma tokenizer pattern as a compiled Python regex with the same meaning."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt in "pP":
                inner, i = _property(pattern, i + 2)
                negated = nxt == "P"
            elif nxt.lower() in SHORTHANDS:
                inner, i, negated = SHORTHANDS[nxt.lower()](), i + 2, nxt.isupper()
            elif nxt in REFUSED:
                raise UsageError(f"the pre-tokenizer regex uses \\{nxt}, whose Unicode meaning "
                                 "tensorloupe does not implement", found=pattern[:80])
            else:
                out.append(pattern[i:i + 2])
                i += 2
                continue
            if negated and in_class:
                raise UsageError("the pre-tokenizer regex negates a class inside a class",
                                 found=pattern[:80])
            out.append(inner if in_class else f"[{'^' if negated else ''}{inner}]")
            continue
        if ch == "[" and not in_class:
            in_class = True
            out.append(ch)
            if pattern[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
            if pattern[i + 1:i + 2] == "]":   # a literal ] first in the class
                out.append("\\]")
                i += 1
        elif ch == "[" and in_class:
            out.append("\\[")
        elif ch == "]" and in_class:
            in_class = False
            out.append(ch)
        else:
            out.append(ch)
        i += 1
    try:
        return re.compile("".join(out))
    except re.error as e:
        raise UsageError(f"the pre-tokenizer regex does not compile: {e}", found=pattern[:80]) from e
