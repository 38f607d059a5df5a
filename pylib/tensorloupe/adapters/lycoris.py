"""LyCORIS adapters (LoHa, LoKr, and LoCon with a Tucker core) shown as what they change: each
adapted weight one float32 ΔW, computed on demand from its factors like a LoRA pair's (delta.py),
under the base weight's name.

  LoHa  ΔW = ((w1_a · w1_b) ⊙ (w2_a · w2_b)) · scale        (peft/tuners/loha/layer.py
        HadaWeight; lycoris/modules/loha.py): w1_a, w2_a [out, r], w1_b, w2_b [r, in·kh·kw]
  LoKr  ΔW = (w1 ⊗ w2) · scale, w1 = lokr_w1 or w1_a · w1_b, w2 = lokr_w2 or w2_a · w2_b
        (peft/tuners/lokr/layer.py make_kron; lycoris/modules/lokr.py), w2 2-D [c, d·kh·kw]
        or 4-D [c, d, kh, kw] (kron over the first two dims)
  CP/Tucker convs (LyCORIS use_tucker / use_cp, peft use_effective_conv2d; tucker.py):
        LoHa with hada_t1/hada_t2 [r, r, *k] and w1_a, w1_b, w2_a, w2_b [r, out] / [r, in];
        LoKr with lokr_t2 [r, r, *k] and w2_a [r, c], w2_b [r, d] (w2 rebuilt whole: it is
        c·d·K values, at most MAX_FACTOR_VALUES, as a stored lokr_w2 is);
        LoCon (kohya names) lora_down [r, in, 1, 1], lora_mid [r, r, *k], lora_up [out, r, 1, 1]:
        ΔW = scale · lora_mid ×₁ lora_up ×₂ lora_down. ΔW is [out, in, *k].

The scale: peft's `alpha / r` (r and alpha from adapter_config.json, rank_pattern and
alpha_pattern per module, r checked against the factors); kohya-named LyCORIS files (what the
lycoris library and ComfyUI load): `alpha / dim` with alpha the module's `.alpha` tensor (none
or 0: scale 1) and dim the inner size of w1_b (LoKr: w1_b's, else w2_b's; LoKr without a
decomposed factor: scale 1; LoCon: lora_down's rows). A conv LoHa's or a 2-D-factor LoKr's base
shape is not stored: ΔW is shown as [out, in·kh·kw], which is that weight's elements in order.

Every element is computed in float64 (each r-term sum correctly rounded, math.fsum) and rounded
once to float32: torch's value when it computes in float64. A read computes the rows it covers;
a heatmap's cells are computed alone (`elements`). The other LyCORIS algorithms (OFT, BOFT,
GLoRA, IA3, full, norm) are listed with their algorithm's name and kept as stored.
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
from .pairs import FLOAT_DTYPES, LOCON_MID, LYCORIS_COMPUTED, LYCORIS_OTHERS, MAX_FACTOR_VALUES, PEFT_PREFIX
from .tucker import Tucker, columns_of, rows_of

LOHA, LOKR, LOCON = "loha", "lokr", "locon"
# suffix -> (algorithm, role); LoCon's are kohya LoRA names, a LyCORIS module's only beside a lora_mid
ROLES = {s: (LOHA if s.startswith(".hada") else LOKR, s[1:]) for s in LYCORIS_COMPUTED}
LOCON_ROLES = {s: (LOCON, s[1:]) for s in (".lora_down.weight", ".lora_up.weight", LOCON_MID)}
ROLES.update(LOCON_ROLES)
ALGORITHM_NAMES = {LOHA: "LoHa", LOKR: "LoKr", LOCON: "LoCon"}
TUCKER_CORES = ("hada_t1", "hada_t2", "lokr_t2", "lora_mid.weight")


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
    with_mid = set() if peft else {t.name[:-len(LOCON_MID)] for t in tensors if t.name.endswith(LOCON_MID)}
    for t in tensors:
        suffix = next((s for s in (*ROLES, *LYCORIS_OTHERS) if t.name.endswith(s)), None)
        if suffix in LOCON_ROLES and t.name[:-len(suffix)] not in with_mid:
            suffix = None
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


# the dims each role may have: the 2-D factors, and a Tucker core's or a conv factor's 3..5
# (conv1d, conv2d, conv3d: [r, r, *k], lora_down [r, in, 1..], lora_up [out, r, 1..])
CONV_DIMS = (3, 4, 5)
ROLE_DIMS = {**{role: (2,) for _, role in ROLES.values()}, "lokr_w2": (2, *CONV_DIMS),
             **{role: CONV_DIMS for role in (*TUCKER_CORES, "lora_down.weight", "lora_up.weight")}}


def plan(m: Module) -> tuple[tuple | None, int | None, str | None]:
    """(ΔW's shape, the module's rank or None, why it cannot be computed or None)."""
    if m.others:
        return None, None, f"LyCORIS {', '.join(sorted(m.others))} is not computed here"
    algorithm = m.algorithm
    if algorithm is None:
        return None, None, "its tensors mix the names of more than one LyCORIS algorithm"
    p = m.parts
    for name, t in p.items():
        if name != "alpha" and (t.problem or t.source is None or not t.contiguous
                                or t.dtype not in FLOAT_DTYPES or len(t.shape) not in ROLE_DIMS[name]
                                or t.numel > MAX_FACTOR_VALUES):
            return None, None, (f"{t.name!r} ({t.dtype} {list(t.shape)}) is not a float "
                                f"{' or '.join(f'{d}-D' for d in ROLE_DIMS[name])} factor of "
                                f"at most {MAX_FACTOR_VALUES:,} values")
    alpha = p.get("alpha")
    if alpha is not None and (alpha.numel != 1 or alpha.dtype not in FLOAT_DTYPES or alpha.problem):
        return None, None, f"{alpha.name!r} is not one float (its alpha is a scalar)"
    if algorithm == LOCON:
        return _plan_locon(p)
    if algorithm == LOHA and ("hada_t1" in p or "hada_t2" in p):
        return _plan_loha_tucker(p)
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
    w2 = _tucker_w2_shape(p) if "lokr_t2" in p else _factor_shape(p, "lokr_w2")
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


def _tucker_factors_fit(core, wa, wb, names: tuple) -> str | None:
    """Why core [r, r, *k], wa [r, out], wb [r, in] are not one Tucker factor (None: they are)."""
    r = core[0]
    if core[1] != r or len(wa) != 2 or len(wb) != 2 or wa[0] != r or wb[0] != r or r < 1:
        return (f"the shapes {list(core)} ({names[0]}), {list(wa)} ({names[1]}), {list(wb)} "
                f"({names[2]}) are not a CP/Tucker factor's ([r, r, *k], [r, out], [r, in])")
    return None


def _plan_loha_tucker(p: dict):
    need = ("hada_t1", "hada_w1_a", "hada_w1_b", "hada_t2", "hada_w2_a", "hada_w2_b")
    if any(n not in p for n in need):
        return None, None, f"LoHa with CP-decomposed conv needs {', '.join(need)}; it has {', '.join(sorted(p))}"
    t1, w1a, w1b, t2, w2a, w2b = (p[n].shape for n in need)
    why = _tucker_factors_fit(t1, w1a, w1b, need[:3]) or _tucker_factors_fit(t2, w2a, w2b, need[3:])
    if why is None and (w1a[1], w1b[1], tuple(t1[2:])) != (w2a[1], w2b[1], tuple(t2[2:])):
        why = (f"its two halves make {[w1a[1], w1b[1], *t1[2:]]} and {[w2a[1], w2b[1], *t2[2:]]}: "
               "a LoHa's two products have one shape")
    if why:
        return None, None, why
    return (w1a[1], w1b[1], *t1[2:]), w1b[0], None


def _plan_locon(p: dict):
    need = ("lora_down.weight", "lora_mid.weight", "lora_up.weight")
    if any(n not in p for n in need):
        return None, None, f"LoCon with a Tucker core needs {', '.join(need)}; it has {', '.join(sorted(p))}"
    down, mid, up = (p[n].shape for n in need)
    r, k = down[0], tuple(mid[2:])
    if not (len(down) == len(up) == len(mid) and set(down[2:]) == {1} == set(up[2:])
            and mid[0] == mid[1] == r == up[1] and r >= 1):
        return None, None, (f"the shapes {list(down)} (lora_down), {list(mid)} (lora_mid), {list(up)} "
                            "(lora_up) are not a LoCon Tucker module's ([r, in, 1, 1], [r, r, kh, kw], "
                            "[out, r, 1, 1])")
    return (up[0], down[1], *k), r, None


def _tucker_w2_shape(p: dict):
    """LoKr's w2 rebuilt from lokr_t2 [r, r, *k], w2_a [r, c], w2_b [r, d]: [c, d, *k]."""
    if "lokr_w2" in p or "lokr_w2_a" not in p or "lokr_w2_b" not in p:
        return "LoKr with CP-decomposed conv needs lokr_t2, lokr_w2_a and lokr_w2_b (and no lokr_w2)"
    t, wa, wb = p["lokr_t2"].shape, p["lokr_w2_a"].shape, p["lokr_w2_b"].shape
    return _tucker_factors_fit(t, wa, wb, ("lokr_t2", "lokr_w2_a", "lokr_w2_b")) or (wa[1], wb[1], *t[2:])


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


FORMULAS = {LOHA: "((w1_a·w1_b) ⊙ (w2_a·w2_b))", LOKR: "(w1 ⊗ w2)",
            "loha-tucker": "(R(t1, w1_a, w1_b) ⊙ R(t2, w2_a, w2_b))",
            "lokr-tucker": "(w1 ⊗ R(t2, w2_a, w2_b))", LOCON: "R(lora_mid, lora_upᵀ, lora_down)"}


def delta_tensor(m: Module, shape: tuple, rank: int | None, scale: float, alpha: float,
                 layout: str) -> Tensor:
    algorithm = m.algorithm
    tucker = any(k in m.parts for k in TUCKER_CORES)
    formula = FORMULAS[algorithm + "-tucker" if tucker and algorithm != LOCON else algorithm]
    how = (f"ΔW = {formula} · {scale:.6g} ({ALGORITHM_NAMES[algorithm]}"
           + (", CP/Tucker conv: R(t, a, b) = t ×₁ aᵀ ×₂ bᵀ" if tucker else "")
           + f", alpha {alpha:g}, rank {rank if rank is not None else 'full'})")
    info = {"computed as": how,
            "lycoris": {"layout": layout, "algorithm": algorithm, "module": m.module, "r": rank,
                        "alpha": alpha, "scale": scale, "tucker": tucker}}
    stored = tuple(t for k, t in m.parts.items() if k != "alpha") + \
        ((m.parts["alpha"],) if "alpha" in m.parts else ())
    return Tensor(m.module + ".weight", "F32", shape, 0, 4 * math.prod(shape),
                  source=LycorisSource(m, shape, scale), info=info, parts=stored)


def _tucker(p: dict, core: str, wa: str, wb: str) -> Tucker:
    """core [r, r, *k], wa [r, out], wb [r, in] as a Tucker factor (LoCon's lora_up is
    [out, r, 1..]: its rows are wa's columns)."""
    t = p[core]
    r, kernel = t.shape[0], math.prod(t.shape[2:])
    a, b = p[wa], p[wb]
    wa_columns = ([tuple(row) for row in rows_of(_values(a), r)] if wa == "lora_up.weight"
                  else columns_of(_values(a), r))
    return Tucker(_values(t), r, kernel, wa_columns, columns_of(_values(b), r))


class LycorisSource(RowsSource):
    """The float32 rows of one module's ΔW; its factors are read whole on the first read, and
    a read computes only the rows it covers, `elements` only the elements asked."""

    def __init__(self, m: Module, shape: tuple, scale: float):
        first = next(t for k, t in m.parts.items() if k != "alpha")
        super().__init__(first, shape, math.prod(shape[1:]))
        self.m, self.shape, self.scale = m, shape, scale
        self.width = math.prod(shape[1:])
        self._factors: tuple | None = None

    def _compute(self, r0: int, r1: int) -> array:
        return self._located(self._computed, r0, r1)

    def elements(self, positions: list[int]) -> list[float]:
        """ΔW's values at row-major element `positions`, each computed alone from the factors
        (the sampler's gather asks this of a source that has it: a heatmap's cells)."""
        return self._located(self._elements, positions)

    def _located(self, compute, *args):
        try:
            return compute(*args)
        except TensorloupeError as e:
            raise e.located(file=self.name)
        except LOW_LEVEL_ERRORS as e:
            raise FormatError(f"ΔW of {self.m.module!r} cannot be computed: {e}", file=self.name) from e

    def _kind(self) -> str:
        p = self.m.parts
        if self.m.algorithm == LOCON:
            return LOCON
        if self.m.algorithm == LOHA:
            return "loha-tucker" if "hada_t1" in p else LOHA
        return LOKR

    def factors(self) -> tuple:
        """The factors as computed from, read whole once: LoHa: w1_a, w2_a rows and w1_b, w2_b
        columns; LoKr: w1 and w2 (w2 rebuilt whole from a Tucker core); Tucker: tucker.Tucker."""
        if self._factors is None:
            p, kind = self.m.parts, self._kind()
            if kind == LOCON:
                self._factors = (_tucker(p, "lora_mid.weight", "lora_up.weight", "lora_down.weight"),)
            elif kind == "loha-tucker":
                self._factors = (_tucker(p, "hada_t1", "hada_w1_a", "hada_w1_b"),
                                 _tucker(p, "hada_t2", "hada_w2_a", "hada_w2_b"))
            elif kind == LOHA:
                self._factors = ((_values(p["hada_w1_a"]), _columns(p["hada_w1_b"])),
                                 (_values(p["hada_w2_a"]), _columns(p["hada_w2_b"])))
            else:
                self._factors = (_whole(p, "lokr_w1"), _whole(p, "lokr_w2"))
        return self._factors

    def _elements(self, positions: list[int]) -> list[float]:
        kind, f, scale, width = self._kind(), self.factors(), self.scale, self.width
        out = array("f")
        if kind == LOCON:
            (t,) = f
            out.extend(t.value(*divmod(e, width)) * scale for e in positions)
        elif kind == "loha-tucker":
            t1, t2 = f
            for e in positions:
                i, j = divmod(e, width)
                out.append(t1.value(i, j) * t2.value(i, j) * scale)
        elif kind == LOHA:
            (a1, c1), (a2, c2) = f
            k1, k2 = self.m.parts["hada_w1_a"].shape[1], self.m.parts["hada_w2_a"].shape[1]
            for e in positions:
                i, j = divmod(e, width)
                out.append(_dot(a1[i * k1:(i + 1) * k1], c1[j]) * _dot(a2[i * k2:(i + 1) * k2], c2[j]) * scale)
        else:
            ((_, b), w1), ((c, d), w2) = f
            for e in positions:
                i, j = divmod(e, width)
                (i1, i2), (j1, j2) = divmod(i, c), divmod(j, d)
                out.append(w1[i1 * b + j1] * w2[i2 * d + j2] * scale)
        return out.tolist()

    def _computed(self, r0: int, r1: int) -> array:
        kind, f, scale = self._kind(), self.factors(), self.scale
        out = array("f")
        if kind == LOCON:
            (t,) = f
            for i in range(r0, r1):
                out.extend(v * scale for v in t.row(i))
            return out
        if kind == "loha-tucker":
            t1, t2 = f
            for i in range(r0, r1):
                out.extend(x * y * scale for x, y in zip(t1.row(i), t2.row(i)))
            return out
        if kind == LOHA:
            (a1, c1), (a2, c2) = f
            k1, k2 = self.m.parts["hada_w1_a"].shape[1], self.m.parts["hada_w2_a"].shape[1]    # the two ranks
            for i in range(r0, r1):
                row1, row2 = a1[i * k1:(i + 1) * k1], a2[i * k2:(i + 1) * k2]
                out.extend(_dot(row1, x) * _dot(row2, y) * scale for x, y in zip(c1, c2))
            return out
        ((_, b), w1), ((c, d), w2) = f        # w2 as [c, d·kh·kw]: ΔW's row i1·c + i2
        for i in range(r0, r1):
            i1, i2 = divmod(i, c)
            row2 = w2[i2 * d:(i2 + 1) * d]
            for j1 in range(b):
                x = w1[i1 * b + j1]
                out.extend(x * y * scale for y in row2)
        return out


def _whole(p: dict, key: str) -> tuple[tuple, list]:
    """LoKr's w1 or w2 as ((rows, cols), float64 values), a conv w2 as [c, d·kh·kw] (rebuilt
    from lokr_t2 when it is CP-decomposed: c·d·K values, bounded in `plan` as a stored w2 is)."""
    if key == "lokr_w2" and "lokr_t2" in p:
        t = _tucker(p, "lokr_t2", "lokr_w2_a", "lokr_w2_b")
        c, _ = t.shape
        rows = [t.row(i) for i in range(c)]
        return (c, len(rows[0]) if rows else 0), [v for row in rows for v in row]
    if key in p:
        t = p[key]
        return (t.shape[0], math.prod(t.shape[1:])), [float(v) for v in _values(t)]
    return _product(p[key + "_a"], p[key + "_b"])
