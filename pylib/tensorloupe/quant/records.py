"""The records grouping makes and decoders read: a stored part, a scheme (each fact with where it
came from), and a logical tensor. Apart from groups.py so that the scheme modules (mlx.py,
quanto.py) build and decode Logicals without importing the grouping that dispatches to them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Part:
    name: str
    dtype: str
    shape: tuple


@dataclass
class Scheme:
    layout: str
    method: str
    bits: int
    group_size: int | None = None
    symmetric: bool = True
    act_order: bool = False
    block: tuple | None = None
    strategy: str | None = None
    dtype: str | None = None     # the values' dtype where the scheme says one (torchao's subclass dtype)
    facts: dict = field(default_factory=dict)   # fact -> where it came from
    params: dict = field(default_factory=dict)  # a layout's own numbers (bnb's nested offset, ...)


@dataclass
class Logical:
    name: str
    shape: tuple
    scheme: Scheme | None
    parts: dict                  # role suffix -> Part
    reason: str | None = None    # set: packed, not dequantised
    # A part read as this many rows (its dims but the last merged), not dim 0's: gpt-oss MXFP4
    # blocks [E, R, G, 16] are E*R rows of G*16 bytes.
    part_rows: dict = field(default_factory=dict)

    @property
    def rows_cols(self) -> tuple:
        """The logical rows decoders produce, each of the last dim's values."""
        return math.prod(self.shape[:-1]), self.shape[-1]
