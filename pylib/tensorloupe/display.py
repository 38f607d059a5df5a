"""How a number or a string reaches a person: byte sizes, counts, and short forms of values.

Shared by every text rendering (the CLI's, each analysis' text.py) and by analyses that
word their findings (memory lines), so none of them imports another's renderer.
"""

from __future__ import annotations

import re


def human_bytes(n: int) -> str:
    # Integer comparisons and division: a header can make a count no float can hold (1e1233).
    for power, unit in enumerate(("B", "KiB", "MiB", "GiB", "TiB")):
        if n < 1024 ** (power + 1) or unit == "TiB":
            if n >= 1024 ** 5 * 1000:
                return f"{scientific(n)} B"
            return f"{n} B" if unit == "B" else f"{n / 1024 ** power:.1f} {unit}"
    return str(n)


def human_count(n: int) -> str:
    if n >= 10**15:
        return scientific(n)
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def exact_count(n: int) -> str:
    """1,234,567; beyond what str() may print (4,300 digits), the scientific form."""
    return f"{n:,}" if n.bit_length() < 14000 else scientific(n)


def scientific(n: int) -> str:
    """A non-negative integer of any size as 1.23e45, by integer arithmetic only (no float
    conversion to overflow, no str() of more than 4,300 digits)."""
    if n < 1000:
        return str(n)
    exponent = int((n.bit_length() - 1) * 0.30102999566398120)
    while 10 ** (exponent + 1) <= n:
        exponent += 1
    while 10 ** exponent > n:
        exponent -= 1
    mantissa = n * 100 // 10 ** exponent  # three significant digits, truncated
    return f"{mantissa // 100}.{mantissa % 100:02d}e{exponent}"


def cut(text: str, width: int = 200) -> str:
    """`text`, or its first width - 1 characters and an ellipsis: a name quoted in a message
    (a file may hold names of megabytes; a mistyped one may be a pasted paragraph)."""
    return text if len(text) <= width else text[:width - 1] + "…"


def short(value, width: int = 100) -> str:
    """A value on one line, cut with an ellipsis; control characters from a file made visible."""
    text = value if isinstance(value, str) else repr(value)
    text = escaped(text.replace("\n", " "))
    return text if len(text) <= width else text[:width - 1] + "…"


# Characters a terminal acts on instead of showing: C0 and C1 controls, DEL (escape sequences
# clear the screen, hide text, set the window title, write the clipboard), bidi overrides and
# isolates (reorder what is shown), the Unicode line separators, and lone surrogates (which no
# encoder writes: a traceback). A string from a file reaches a terminal with these made visible.
_INVISIBLE = ([*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x200E, 0x200F, 0x2028, 0x2029,
               *range(0x202A, 0x202F), *range(0x2066, 0x206A), *range(0xD800, 0xE000)])
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _INVISIBLE}
_ANY_ESCAPED = re.compile("[" + "".join(f"\\u{c:04x}" for c in _INVISIBLE) + "]")
# What our own text output may contain: its line breaks (and stderr's progress returns).
_OUTPUT_ESCAPES = {c: e for c, e in _ESCAPES.items() if c != 0x0A}
_STDERR_ESCAPES = {c: e for c, e in _OUTPUT_ESCAPES.items() if c != 0x0D}


def escaped(text: str) -> str:
    """A string from a file as a terminal may show it: every control character, bidi override
    and lone surrogate written out (`\\x1b`, `\\u202e`), newlines included."""
    # the search first: translate() through the 2,000-entry table costs 2.5 us a name, and a
    # 1M-tensor table escapes 3M strings that almost never hold one
    return text.translate(_ESCAPES) if _ANY_ESCAPED.search(text) else text


class TerminalText:
    """A text stream that shows no control character it is given but its own line breaks: the
    CLI's stdout and stderr, so that no string a file carries (a tensor name, a metadata value, a
    global's name) can move the cursor, clear the report or rewrite the verdict, whichever
    renderer printed it. Renderers still escape file strings themselves (`escaped`), so that a
    newline in a name cannot start a line of its own."""

    def __init__(self, stream, returns: bool = False):
        self._stream = stream
        self._table = _STDERR_ESCAPES if returns else _OUTPUT_ESCAPES

    def write(self, text: str) -> int:
        return self._stream.write(text.translate(self._table))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def csv_cell(value):
    """A CSV cell a spreadsheet shows as text: one that starts like a formula (= + - @, or a tab
    or carriage return before one) gets a leading apostrophe, as OWASP's CSV-injection advice
    says; numbers stay numbers."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def some_of(names, at_most: int = 10) -> str:
    """`a, b, c` for a few names; for many, the first `at_most` and how many more (a folder of
    10,000 models would otherwise be a message of 200 KB)."""
    names = list(names)
    shown = ", ".join(names[:at_most])
    return shown if len(names) <= at_most else f"{shown} and {len(names) - at_most:,} more"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`1 tensor`, `2 tensors`, `22,000 tensors`: a count with its noun, grouped, in the number
    it agrees with (`plural` where adding an s is wrong: counted(n, "matrix", "matrices"))."""
    return f"{exact_count(n)} {noun if n == 1 else plural or noun + 's'}"


def html_table(rows, header: tuple[str, ...] = (), caption: str = "") -> str:
    """An HTML table for a notebook (`_repr_html_`): every cell and the caption escaped, since
    a string from a file (a tensor named `<script>`) is data there too."""
    from html import escape   # a notebook's cost, not the CLI's or the page's
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return (f"<table>{f'<caption>{escape(caption)}</caption>' if caption else ''}"
            f"{f'<thead><tr>{head}</tr></thead>' if head else ''}<tbody>{body}</tbody></table>")
