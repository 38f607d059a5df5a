"""LyCORIS adapters (LoHa, LoKr) shown as what they change: each adapted weight one float32 ΔW,
computed on demand from its factors like a LoRA pair's (delta.py), under the base weight's name.

  LoHa  ΔW = ((w1_a · w1_b) ⊙ (w2_a · w2_b)) · scale        (peft/tuners/loha/layer.py
        HadaWeight; lycoris/modules/loha.py): w1_a, w2_a [out, r], w1_b, w2_b [r, in·kh·kw]
  LoKr  ΔW = (w1 ⊗ w2) · scale, w1 = lokr_w1 or w1_a · w1_b, w2 = lokr_w2 or w2_a · w2_b
        (peft/tuners/lokr/layer.py make_kron; lycoris/modules/lokr.py), w2 2-D [c, d·kh·kw]
        or 4-D [c, d, kh, kw] (kron over the first two dims)

The scale: peft's `alpha / r` (r and alpha from adapter_config.json, rank_pattern and
alpha_pattern per module, r checked against the factors); kohya-named LyCORIS files (what the
lycoris library and ComfyUI load): `alpha / dim` with alpha the module's `.alpha` tensor (none
or 0: scale 1) and dim the inner size of w1_b (LoKr: w1_b's, else w2_b's; LoKr without a
decomposed factor: scale 1). A conv LoHa's or a 2-D-factor LoKr's base shape is not stored:
ΔW is shown as [out, in·kh·kw], which is that weight's elements in order.

Every element is computed in float64 (each r-term sum correctly rounded, math.fsum) and rounded
once to float32: torch's value when it computes in float64. Modules with CP-decomposed convs
(hada_t1/t2, lokr_t2) and the other LyCORIS algorithms (OFT, BOFT, GLoRA, IA3, full, norm) are
listed with their algorithm's name and kept as stored.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from math import fsum
from operator import mul

from ..dtypes import lookup
from ..errors import LOW_LEVEL_ERRORS, FormatError, TensorloupeError
from ..model import Tensor
from ..quant.logical import RowsSource
from .pairs import FLOAT_DTYPES, LYCORIS_COMPUTED, LYCORIS_OTHERS, MAX_FACTOR_VALUES, PEFT_PREFIX

LOHA, LOKR = "loha", "lokr"
# suffix -> (algorithm, role)
ROLES = {s: (LOHA if s.startswith(".hada") else LOKR, s[1:]) for s in LYCORIS_COMPUTED}
ALGORITHM_NAMES = {LOHA: "LoHa", LOKR: "LoKr"}


@dataclass
class Module:
    """One LyCORIS-adapted module's stored tensors by role (`hada_w1_a`, `lokr_w1`, `alpha`)."""
    module: str
    parts: dict = field(default_factory=dict)
    others: set = field(default_factory=set)     # algorithms of names not computed here

    @property
    def algorithm(self) -> str | None:
        found = {ROLES["." + role][0] for role in self.parts if role != "alpha"}
        return found.pop() if len(found) == 1 else None

    @property
    def stored(self) -> tuple:
        return tuple(self.parts.values())


def find_modules(tensors: list[Tensor], peft: bool) -> tuple[list[Module], list[Tensor]]:
    """The LyCORIS modules among `tensors` (peft's or kohya's names) and the tensors in none."""
    found: dict[str, Module] = {}
    rest = []
    for t in tensors:
        suffix = next((s for s in (*ROLES, *LYCORIS_OTHERS) if t.name.endswith(s)), None)
        if suffix is None and not peft and t.name.endswith(".alpha"):
            suffix = ".alpha"
        if suffix is None:
            rest.append(t)
            continue
        module = t.name[:-len(suffix)]
        if peft and module.startswith(PEFT_PREFIX):
            module = module[len(PEFT_PREFIX):]
        m = found.setdefault(module, Module(module))
        if suffix in LYCORIS_OTHERS:
            m.others.add(LYCORIS_OTHERS[suffix])
            m.parts[suffix[1:]] = t
        elif suffix[1:] in m.parts:
            rest.append(t)
        else:
            m.parts[suffix[1:]] = t
    return list(found.values()), rest


def _values(t: Tensor) -> list:
    return lookup(t.dtype).decode(t.source.read_data(t.offset, t.nbytes), t.big_endian)


def _columns(right: Tensor) -> list[tuple]:
    """A right-hand factor [inner, cols] as its columns, each a tuple of `inner` values."""
    b, inner = _values(right), right.shape[0]
    cols = math.prod(right.shape[1:])
    return list(zip(*(b[k * cols:(k + 1) * cols] for k in range(inner))))


def _product(left: Tensor, right: Tensor) -> tuple[tuple, list]:
    """(shape, row-major float64 values) of left · right, each sum correctly rounded (LoKr's
    small w1 and w2; LoHa's products are computed row by row instead)."""
    a, columns, inner = _values(left), _columns(right), left.shape[1]
    out = []
    for i in range(left.shape[0]):
        row = a[i * inner:(i + 1) * inner]
        out.extend(_dot(row, c) for c in columns)
    return (left.shape[0], len(columns)), out


def _dot(left, column) -> float:
    try:
        return fsum(map(mul, left, column))
    except (OverflowError, ValueError):   # Inf - Inf, or an intermediate overflow (delta.py)
        return sum(map(mul, left, column))


def plan(m: Module) -> tuple[tuple | None, int | None, str | None]:
    """(ΔW's shape, the module's rank or None, why it cannot be computed or None)."""
    if m.others:
        return None, None, f"LyCORIS {', '.join(sorted(m.others))} is not computed here"
    algorithm = m.algorithm
    if algorithm is None:
        return None, None, "its tensors mix LoHa and LoKr names"
    p = m.parts
    for name, t in p.items():
        if name != "alpha" and (t.problem or t.source is None or not t.contiguous
                                or t.dtype not in FLOAT_DTYPES or len(t.shape) not in (2, 4)
                                or (len(t.shape) == 4 and name != "lokr_w2")
                                or t.numel > MAX_FACTOR_VALUES):
            return None, None, (f"{t.name!r} ({t.dtype} {list(t.shape)}) is not a float matrix of "
                                f"at most {MAX_FACTOR_VALUES:,} values")
    alpha = p.get("alpha")
    if alpha is not None and (alpha.numel != 1 or alpha.dtype not in FLOAT_DTYPES or alpha.problem):
        return None, None, f"{alpha.name!r} is not one float (its alpha is a scalar)"
    if algorithm == LOHA:
        need = ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b")
        if any(n not in p for n in need):
            return None, None, f"LoHa needs {', '.join(need)}; it has {', '.join(sorted(p))}"
        w1a, w1b, w2a, w2b = (p[n].shape for n in need)
        if w1a[1] != w1b[0] or w2a[1] != w2b[0] or (w1a[0], w1b[1]) != (w2a[0], w2b[1]):
            return None, None, (f"the shapes {list(w1a)}, {list(w1b)}, {list(w2a)}, {list(w2b)} "
                                "are not a LoHa module's ([out, r], [r, in] twice)")
        return (w1a[0], w1b[1]), w1b[0], None
    w1 = _factor_shape(p, "lokr_w1")
    w2 = _factor_shape(p, "lokr_w2")
    if isinstance(w1, str) or isinstance(w2, str):
        return None, None, w1 if isinstance(w1, str) else w2
    if len(w1) != 2:
        return None, None, f"its w1 has shape {list(w1)}, not 2-D"
    rank = (p["lokr_w1_b"].shape[0] if "lokr_w1_b" in p else
            p["lokr_w2_b"].shape[0] if "lokr_w2_b" in p else None)
    if math.prod(w1) > MAX_FACTOR_VALUES or math.prod(w2) > MAX_FACTOR_VALUES:
        return None, None, (f"its w1 {list(w1)} or w2 {list(w2)} holds more than the "
                            f"{MAX_FACTOR_VALUES:,} values ΔW is computed from here")
    return (w1[0] * w2[0], w1[1] * w2[1]) + tuple(w2[2:]), rank, None


def _factor_shape(p: dict, key: str):
    """The shape of LoKr's w1 or w2: stored whole, or the product of its _a and _b."""
    if key in p:
        return p[key].shape
    a, b = p.get(key + "_a"), p.get(key + "_b")
    if a is None or b is None:
        return f"LoKr needs {key} or both {key}_a and {key}_b"
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return f"{key}_a {list(a.shape)} and {key}_b {list(b.shape)} cannot be multiplied"
    return (a.shape[0], b.shape[1])


def kohya_scale(m: Module, rank: int | None) -> tuple[float, float]:
    """(scale, alpha) as the lycoris library and ComfyUI take them from a file."""
    alpha_t = m.parts.get("alpha")
    alpha = float(_values(alpha_t)[0]) if alpha_t is not None else 0.0
    if not math.isfinite(alpha):
        raise ValueError(f"alpha is {alpha}")
    if not rank or not alpha:
        return 1.0, alpha or float(rank or 0)
    return alpha / rank, alpha


def delta_tensor(m: Module, shape: tuple, rank: int | None, scale: float, alpha: float,
                 layout: str) -> Tensor:
    algorithm = m.algorithm
    formula = ("((w1_a·w1_b) ⊙ (w2_a·w2_b))" if algorithm == LOHA else "(w1 ⊗ w2)")
    info = {"computed as": f"ΔW = {formula} · {scale:.6g} ({ALGORITHM_NAMES[algorithm]}, "
                           f"alpha {alpha:g}, rank {rank if rank is not None else 'full'})",
            "lycoris": {"layout": layout, "algorithm": algorithm, "module": m.module, "r": rank,
                        "alpha": alpha, "scale": scale}}
    stored = tuple(t for k, t in m.parts.items() if k != "alpha") + \
        ((m.parts["alpha"],) if "alpha" in m.parts else ())
    return Tensor(m.module + ".weight", "F32", shape, 0, 4 * math.prod(shape),
                  source=LycorisSource(m, shape, scale), info=info, parts=stored)


class LycorisSource(RowsSource):
    """The float32 rows of one module's ΔW; its factors are read whole on the first read."""

    def __init__(self, m: Module, shape: tuple, scale: float):
        first = next(t for k, t in m.parts.items() if k != "alpha")
        super().__init__(first, shape, math.prod(shape[1:]))
        self.m, self.shape, self.scale = m, shape, scale
        self._factors: tuple | None = None

    def _compute(self, r0: int, r1: int) -> array:
        try:
            return self._computed(r0, r1)
        except TensorloupeError as e:
            raise e.located(file=self.name)
        except LOW_LEVEL_ERRORS as e:
            raise FormatError(f"ΔW of {self.m.module!r} cannot be computed: {e}", file=self.name) from e

    def _computed(self, r0: int, r1: int) -> array:
        p, scale = self.m.parts, self.scale
        if self._factors is None:    # LoHa: w1_a, w2_a rows and w1_b, w2_b columns; LoKr: w1, w2
            if self.m.algorithm == LOHA:
                self._factors = ((_values(p["hada_w1_a"]), _columns(p["hada_w1_b"])),
                                 (_values(p["hada_w2_a"]), _columns(p["hada_w2_b"])))
            else:
                self._factors = (_whole(p, "lokr_w1"), _whole(p, "lokr_w2"))
        one, two = self._factors
        out = array("f")
        if self.m.algorithm == LOHA:
            (a1, c1), (a2, c2) = one, two
            k1, k2 = p["hada_w1_a"].shape[1], p["hada_w2_a"].shape[1]    # the two ranks
            for i in range(r0, r1):
                row1, row2 = a1[i * k1:(i + 1) * k1], a2[i * k2:(i + 1) * k2]
                out.extend(_dot(row1, x) * _dot(row2, y) * scale for x, y in zip(c1, c2))
            return out
        (_, b), w1 = one
        (c, d), w2 = two                      # w2 as [c, d·kh·kw]: ΔW's row i1·c + i2
        for i in range(r0, r1):
            i1, i2 = divmod(i, c)
            row2 = w2[i2 * d:(i2 + 1) * d]
            for j1 in range(b):
                x = w1[i1 * b + j1]
                out.extend(x * y * scale for y in row2)
        return out


def _whole(p: dict, key: str) -> tuple[tuple, list]:
    """LoKr's w1 or w2 as ((rows, cols), float64 values), a 4-D w2 as [c, d·kh·kw]."""
    if key in p:
        t = p[key]
        return (t.shape[0], math.prod(t.shape[1:])), [float(v) for v in _values(t)]
    return _product(p[key + "_a"], p[key + "_b"])
