"""Extended grapheme clusters (Unicode UAX #29), as Rust's unicode-segmentation gives them to
tokenizers' Precompiled normaliser (precompiled.py). Python's stdlib has no segmenter, so the
rules are written out here: GB3-GB9b and the Hangul syllable rules. The emoji ZWJ rule (GB11)
and regional-indicator pairs (GB12/13) are left out on purpose: the clusters they form are at
least 6 bytes long, and Precompiled handles a cluster of 6 bytes or more char by char, exactly
as if it had been split. The character properties come from `unicodedata`, so they follow
Python's Unicode version rather than the Rust crate's.
"""

from __future__ import annotations

import unicodedata

CR, LF, ZWJ = "\r", "\n", "\u200d"
# Other_Grapheme_Extend and the emoji modifiers (Grapheme_Cluster_Break=Extend beyond Mn/Me)
_EXTEND = frozenset(map(chr, [0x09BE, 0x09D7, 0x0B3E, 0x0B57, 0x0BBE, 0x0BD7, 0x0CC2, 0x0CD5,
                              0x0CD6, 0x0D3E, 0x0D57, 0x0DCF, 0x0DDF, 0x1B35, 0x200C, 0x302E,
                              0x302F, 0xFF9E, 0xFF9F, 0x1133E, 0x11357, 0x114B0, 0x114BD,
                              0x115AF, 0x11930, 0x1D165, *range(0x1D16E, 0x1D173),
                              *range(0x1F3FB, 0x1F400), *range(0xE0020, 0xE0080)]))
# Mc characters whose Grapheme_Cluster_Break is Other, not SpacingMark; and two Lo that are
_NOT_SPACING = frozenset(map(chr, [0x102B, 0x102C, 0x1038, 0x1062, 0x1063, 0x1064,
                                   *range(0x1067, 0x106E), 0x1083, *range(0x1087, 0x108D),
                                   0x108F, 0x109A, 0x109B, 0x109C, 0x1A61, 0x1A63, 0x1A64,
                                   0xAA7B, 0xAA7D, 0x11720, 0x11721]))
_SPACING = frozenset("\u0e33\u0eb3")
_PREPEND = frozenset(map(chr, [*range(0x0600, 0x0606), 0x06DD, 0x070F, 0x0890, 0x0891, 0x08E2,
                               0x0D4E, 0x110BD, 0x110CD, 0x111C2, 0x111C3, 0x1193F, 0x11941,
                               0x11A3A, *range(0x11A84, 0x11A8A), 0x11D46, 0x11F02]))


def _kind(ch: str) -> str:
    """The Grapheme_Cluster_Break value, reduced to what the rules below tell apart."""
    if ch in (CR, LF):
        return ch
    if ch == ZWJ or ch in _EXTEND:
        return "X"
    if ch in _PREPEND:
        return "P"
    if ch in _SPACING:
        return "X"
    cat = unicodedata.category(ch)
    if cat in ("Mn", "Me") or (cat == "Mc" and ch not in _NOT_SPACING):
        return "X"             # Extend and SpacingMark: both attach to what precedes
    if cat in ("Cc", "Zl", "Zp", "Cf", "Cs"):
        return "C"
    cp = ord(ch)
    if 0x1100 <= cp <= 0x115F or 0xA960 <= cp <= 0xA97C:
        return "L"
    if 0x1160 <= cp <= 0x11A7 or 0xD7B0 <= cp <= 0xD7C6:
        return "V"
    if 0x11A8 <= cp <= 0x11FF or 0xD7CB <= cp <= 0xD7FB:
        return "T"
    if 0xAC00 <= cp <= 0xD7A3:
        return "LV" if (cp - 0xAC00) % 28 == 0 else "LVT"
    return "O"


_HANGUL = {("L", "L"), ("L", "V"), ("L", "LV"), ("L", "LVT"), ("LV", "V"), ("V", "V"),
           ("LV", "T"), ("V", "T"), ("LVT", "T"), ("T", "T")}


def _joins(before: str, after: str) -> bool:
    if before == CR and after == LF:                      # GB3
        return True
    if before in ("C", CR, LF) or after in ("C", CR, LF):  # GB4, GB5
        return False
    return (before, after) in _HANGUL or after == "X" or before == "P"   # GB6-8, GB9-9b


def clusters(text: str) -> list[str]:
    out: list[str] = []
    prev = None
    for ch in text:
        kind = _kind(ch)
        if prev is not None and _joins(prev, kind):
            out[-1] += ch
        else:
            out.append(ch)
        prev = kind
    return out
