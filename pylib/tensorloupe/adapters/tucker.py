"""A CP/Tucker-decomposed conv factor (LyCORIS `use_tucker`, older `use_cp`; peft's
`use_effective_conv2d=True`), computed element by element from its three small factors:

  R[p, q, κ] = Σ_i Σ_j t[i, j, κ] · wa[i, p] · wb[j, q]

t the core [r, r, *k] (κ: a kernel position, row-major over k), wa [r, out] and wb [r, in]
(lycoris/functional/general.py `rebuild_tucker`, peft's `make_weight_cp`: einsum
"i j k l, i p, j r -> p r k l"). It is R's row p (output channel p) that a read asks for, laid
out as [in, *k] (element q·K + κ). A row mixes wa's column p into the core once (r·r·K
products: `mixed`), then each element is one r-term dot with wb's column q; so an element
needs the factors and nothing of the rest of the row: a heatmap cell costs r²·K + r, never a row.

  LoCon  ΔW = scale · R with t = lora_mid, wa = lora_upᵀ, wb = lora_down
  LoHa   ΔW = scale · R₁ ⊙ R₂ (hada_t1, hada_w1_a, hada_w1_b; hada_t2, hada_w2_a, hada_w2_b)
  LoKr   w2 = R (lokr_t2, lokr_w2_a, lokr_w2_b), then ΔW = scale · w1 ⊗ w2 (lycoris.py)

Sums are math.fsum (correctly rounded) in float64: a product of two float32 values is exact in
float64, so each `mixed` value is the exact sum rounded once, and the dot with wb once more.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from math import fsum
from operator import mul

KEPT_ROWS = 256      # rows' mixed cores kept (a heatmap lattice revisits its rows)


def _dot(left, right) -> float:
    try:
        return fsum(map(mul, left, right))
    except (OverflowError, ValueError):   # Inf - Inf, or an intermediate overflow (delta.py)
        return sum(map(mul, left, right))


def columns_of(values: list, rows: int) -> list[tuple]:
    """A row-major [rows, n] matrix's n columns, each a tuple of `rows` values."""
    n = len(values) // rows if rows else 0
    return list(zip(*(values[k * n:(k + 1) * n] for k in range(rows))))


def rows_of(values: list, width: int) -> list[list]:
    """A row-major [n, width] matrix's rows."""
    return [values[i * width:(i + 1) * width] for i in range(len(values) // width)] if width else []


class Tucker:
    """R from its core `t` (row-major [r, r, K] values), wa's columns (out r-tuples) and wb's
    columns (in r-tuples)."""

    def __init__(self, core: list, r: int, kernel: int, wa_columns: list, wb_columns: list):
        self.r, self.kernel = r, kernel
        self.wa, self.wb = wa_columns, wb_columns
        # the core's fibres over i: by_kernel[κ][j] = (t[0, j, κ], .., t[r-1, j, κ])
        self.by_kernel = [[tuple(core[(i * r + j) * kernel + k] for i in range(r)) for j in range(r)]
                          for k in range(kernel)]
        self._mixed: OrderedDict = OrderedDict()

    @property
    def shape(self) -> tuple[int, int]:
        """(out, in): R is [out, in, *k]."""
        return len(self.wa), len(self.wb)

    def mixed(self, p: int) -> list[tuple]:
        """u[κ][j] = Σ_i wa[i, p] · t[i, j, κ]: row p's core, one r-tuple per kernel position."""
        got = self._mixed.get(p)
        if got is None:
            column = self.wa[p]
            got = [tuple(_dot(column, fibre) for fibre in fibres) for fibres in self.by_kernel]
            self._mixed[p] = got
            if len(self._mixed) > KEPT_ROWS:
                self._mixed.popitem(last=False)
        return got

    def value(self, p: int, j: int) -> float:
        """R[p] at element j of its row (j = q·K + κ)."""
        q, k = divmod(j, self.kernel)
        return _dot(self.mixed(p)[k], self.wb[q])

    def row(self, p: int) -> list[float]:
        """R's row p, [in, *k] row-major."""
        u = self.mixed(p)
        return [_dot(uk, wb) for wb in self.wb for uk in u]


def frobenius_squared(t: Tucker) -> float:
    """‖R‖²_F from the factors alone: Σ_κ Σ (Gaᵀ·T_κ·Gb) ⊙ T_κ with Ga = Σ_p wa_p·wa_pᵀ and
    Gb = Σ_q wb_q·wb_qᵀ (r×r Gram matrices), r³ products per kernel position, no R made."""
    r = t.r
    ga = [[_dot([c[i] for c in t.wa], [c[k] for c in t.wa]) for k in range(r)] for i in range(r)]
    gb = [[_dot([c[j] for c in t.wb], [c[k] for c in t.wb]) for k in range(r)] for j in range(r)]
    total = []
    for fibres in t.by_kernel:          # fibres[j][i] = t[i, j, κ]
        core = [[fibres[j][i] for j in range(r)] for i in range(r)]            # T[i][j]
        left = [[_dot(ga[a], [core[i][j] for i in range(r)]) for j in range(r)] for a in range(r)]
        both = [[_dot(left[a], gb[b]) for b in range(r)] for a in range(r)]    # Ga·T·Gb
        total.append(fsum(both[a][b] * core[a][b] for a in range(r) for b in range(r)))
    return math.fsum(total)
