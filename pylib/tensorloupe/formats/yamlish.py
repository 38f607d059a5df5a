"""The subset of YAML that NeMo's model_config.yaml uses (OmegaConf.save writes it): block
mappings and sequences by indentation, flow lists and maps (`[1, 2]`, `{a: 1}`), plain, single-
and double-quoted scalars, comments, and a leading `---`. Nothing is ever executed or resolved:
tags (`!!python/...`), anchors and aliases (`&a`, `*a`), block scalars (`|`, `>`) and several
documents are refused by name (YamlError), so a config is shown exactly or not at all.

Scalars become int, float, bool or None where YAML 1.2's core schema says so, else strings.
"""

from __future__ import annotations

import re

from ..errors import FormatError

MAX_DEPTH = 64
MAX_NODES = 200_000
INT = re.compile(r"[-+]?(0|[1-9][0-9_]*)$")
FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
SPECIAL = {"true": True, "false": False, "null": None, "~": None, "": None,
           ".inf": float("inf"), "+.inf": float("inf"), "-.inf": float("-inf"), ".nan": float("nan")}
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", '"': '"', "\\": "\\", "/": "/", " ": " "}


class YamlError(FormatError):
    """The text uses YAML this subset does not read, or is not YAML."""


def _fail(line: int, message: str) -> YamlError:
    return YamlError(f"line {line:,}: {message}")


def _strip_comment(text: str) -> str:
    quote, skip = None, False
    for i, ch in enumerate(text):
        if skip:
            skip = False
        elif quote:
            if quote == '"' and ch == "\\":
                skip = True                      # an escaped character, a quote included
            elif quote == "'" and ch == "'" and text[i + 1:i + 2] == "'":
                skip = True                      # '' is a quote inside a single-quoted string
            elif ch == quote:
                quote = None
        elif ch in "'\"" and (i == 0 or text[i - 1] in " \t[{,:-"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def loads(text: str):
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[:len(raw) - len(raw.lstrip())]:
            raise _fail(number, "indentation with a tab")
        body = _strip_comment(raw)
        if not body.strip():
            continue
        if body.strip() in ("---", "...") and not body.startswith(" "):
            if lines or body.strip() == "...":
                raise _fail(number, "several YAML documents (---) are not read")
            continue
        lines.append((number, len(body) - len(body.lstrip(" ")), body.strip()))
    parser = _Parser(lines)
    if not lines:
        return None
    value = parser.block(lines[0][1], 0)
    if parser.pos < len(lines):
        raise _fail(lines[parser.pos][0], "text after the document's end (bad indentation?)")
    return value


class _Parser:
    def __init__(self, lines):
        self.lines, self.pos, self.nodes = lines, 0, 0

    def count(self, line: int) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _fail(line, f"more than {MAX_NODES:,} values")

    def block(self, indent: int, depth: int):
        if depth > MAX_DEPTH:
            raise _fail(self.lines[self.pos][0], f"nested more than {MAX_DEPTH:,} deep")
        number, _, text = self.lines[self.pos]
        if text.startswith("- ") or text == "-":
            return self.sequence(indent, depth)
        if _key_split(text, number) is not None:
            return self.mapping(indent, depth)
        self.pos += 1
        return scalar(text, number)

    def sequence(self, indent: int, depth: int) -> list:
        out = []
        while self.pos < len(self.lines):
            number, at, text = self.lines[self.pos]
            if at != indent or not (text.startswith("- ") or text == "-"):
                break
            self.count(number)
            rest = text[1:].lstrip(" ")
            if not rest:
                self.pos += 1
                out.append(self.nested(indent, depth, number))
                continue
            # "- key: value" opens a mapping whose keys sit at the item's text column
            self.lines[self.pos] = (number, at + len(text) - len(rest), rest)
            out.append(self.block(at + len(text) - len(rest), depth + 1))
        return out

    def mapping(self, indent: int, depth: int) -> dict:
        out: dict = {}
        while self.pos < len(self.lines):
            number, at, text = self.lines[self.pos]
            if at != indent:
                if at > indent:
                    raise _fail(number, "unexpected indentation")
                break
            split = _key_split(text, number)
            if split is None:
                raise _fail(number, "expected 'key: value'")
            key, rest = split
            self.count(number)
            self.pos += 1
            if key in out:
                raise _fail(number, f"the key {key!r} appears twice")
            out[key] = self.nested(indent, depth, number, sequence_here=True) if not rest \
                else scalar(rest, number)
        return out

    def nested(self, indent: int, depth: int, number: int, sequence_here: bool = False):
        """The block under a 'key:' or '-' line: deeper lines, or (for a key) a sequence at
        the key's own indentation, as PyYAML allows; nothing means null."""
        if self.pos < len(self.lines):
            _, at, text = self.lines[self.pos]
            if at > indent or (sequence_here and at == indent and (text.startswith("- ") or text == "-")):
                return self.block(at, depth + 1)
        return None


def _key_split(text: str, number: int):
    """(key, rest) for 'key: rest' or 'key:', None if the line is no mapping entry."""
    if text[:1] in "'\"":
        end = _quoted_end(text, number)
        if text[end:end + 1] == ":" and (end + 1 == len(text) or text[end + 1] == " "):
            return scalar(text[:end], number, as_key=True), text[end + 1:].strip()
        return None
    if text[:1] in "[{":
        return None
    match = re.match(r"([^:#]*?[^\s:])?:(\s|$)", text)
    if not match or match.group(1) is None:
        return None
    key = match.group(1)
    _refuse(key, number)
    return key, text[match.end():].strip()


def _quoted_end(text: str, number: int) -> int:
    quote, i = text[0], 1
    while i < len(text):
        if text[i] == "\\" and quote == '"':
            i += 2
            continue
        if text[i] == quote:
            if quote == "'" and text[i + 1:i + 2] == "'":
                i += 2
                continue
            return i + 1
        i += 1
    raise _fail(number, "a quoted string does not end on its line")


def _refuse(text: str, number: int) -> None:
    if text[:1] == "!":
        raise _fail(number, f"a YAML tag ({text.split()[0][:40]!r}) is not read: tensorloupe never "
                    "constructs tagged objects")
    if text[:1] in "&*":
        raise _fail(number, "YAML anchors and aliases (& and *) are not read")
    if text in ("|", ">", "|-", ">-", "|+", ">+"):
        raise _fail(number, "block scalars (| and >) are not read")


def scalar(text: str, number: int, as_key: bool = False):
    text = text.strip()
    if text[:1] == '"':
        end = _quoted_end(text, number)
        if text[end:].strip():
            raise _fail(number, "text after a quoted string")
        return _unescape(text[1:end - 1], number)
    if text[:1] == "'":
        end = _quoted_end(text, number)
        if text[end:].strip():
            raise _fail(number, "text after a quoted string")
        return text[1:end - 1].replace("''", "'")
    if as_key:
        return text
    _refuse(text, number)
    if text[:1] in "[{":
        value, end = _flow(text, 0, number, 0)
        if text[end:].strip():
            raise _fail(number, "text after a flow collection")
        return value
    low = text.lower()
    if low in SPECIAL:
        return SPECIAL[low]
    if INT.match(text):
        return int(text.replace("_", ""))
    if FLOAT.match(text) and any(ch.isdigit() for ch in text):
        return float(text.replace("_", ""))
    return text


def _unescape(body: str, number: int) -> str:
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        code = body[i + 1:i + 2]
        if code in ESCAPES:
            out.append(ESCAPES[code])
            i += 2
        elif code in ("x", "u", "U"):
            width = {"x": 2, "u": 4, "U": 8}[code]
            digits = body[i + 2:i + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise _fail(number, f"a bad \\{code} escape")
            value = int(digits, 16)
            if value > 0x10FFFF:
                raise _fail(number, f"a \\{code} escape beyond Unicode")
            out.append(chr(value))
            i += 2 + width
        else:
            raise _fail(number, f"an unknown escape \\{code}")
    return "".join(out)


def _flow(text: str, i: int, number: int, depth: int):
    """A flow list or map starting at text[i]; (value, index after it)."""
    if depth > MAX_DEPTH:
        raise _fail(number, f"flow collections nested more than {MAX_DEPTH:,} deep")
    close = "]" if text[i] == "[" else "}"
    items: list = []
    i += 1
    while True:
        while i < len(text) and text[i] == " ":
            i += 1
        if i >= len(text):
            raise _fail(number, "a flow collection does not end on its line")
        if text[i] == close:
            break
        if text[i] in "[{":
            value, i = _flow(text, i, number, depth + 1)
            items.append(value)
        else:
            j = _quoted_end(text[i:], number) + i if text[i] in "'\"" else i
            while j < len(text) and text[j] not in ",]}":
                j += 1
            items.append(text[i:j].strip())
            i = j
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == ",":
            i += 1
        elif i < len(text) and text[i] != close:
            raise _fail(number, "expected ',' in a flow collection")
    if close == "]":
        return [v if not isinstance(v, str) else scalar(v, number) for v in items], i + 1
    out = {}
    for item in items:
        if not isinstance(item, str):
            raise _fail(number, "a flow map entry is not 'key: value'")
        split = _key_split(item, number) or (item, "")
        out[split[0]] = scalar(split[1], number) if split[1] else None
    return out, i + 1
