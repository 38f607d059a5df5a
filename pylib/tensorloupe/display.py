"""How a number or a string reaches a person: byte sizes, counts, and short forms of values.

Shared by every text rendering (the CLI's, each analysis' text.py) and by analyses that
word their findings (memory lines), so none of them imports another's renderer.
"""

from __future__ import annotations


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


def short(value, width: int = 100) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[:width - 1] + "…"
