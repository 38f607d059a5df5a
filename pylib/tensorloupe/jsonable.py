"""Values made safe for JSON: the one place that knows JSON has no NaN or Infinity."""

from __future__ import annotations

import math


def json_number(value):
    """JSON has no NaN or Infinity: they travel as the strings "nan", "inf", "-inf"."""
    if isinstance(value, complex):
        return [json_number(value.real), json_number(value.imag)]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
