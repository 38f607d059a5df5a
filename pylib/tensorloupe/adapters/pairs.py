"""Which stored tensors of an adapter are one LoRA pair, by name: the two layouts' tables.

PEFT (`save_pretrained`, peft/utils/save_and_load.py): `base_model.model.<module>.lora_A.weight`
[r, in] and `.lora_B.weight` [out, r] (conv: [r, in, kh, kw] and [out, r, 1, 1]), embeddings
`.lora_embedding_A` [r, num] and `.lora_embedding_B` [dim, r], DoRA's `.lora_magnitude_vector`;
`modules_to_save` as the trained copy under the module's own name; with `lora_bias=True`, B's
bias `.lora_B.bias` [out] (peft merges it as bias += scale · lora_B.bias).
LyCORIS (LoHa, LoKr: lycoris.py) by the same two namings: peft's `base_model.model.<module>.
hada_w1_a` (LoHaModel / LoKrModel) and kohya's `lora_unet_<module>.hada_w1_a` (with `.alpha`).
kohya/A1111 (sd-scripts networks/lora.py, `LoRAModule`): `lora_unet_<path with _>.lora_down.weight`
[r, in(, kh, kw)], `.lora_up.weight` [out, r(, 1, 1)], `.alpha` (a scalar); prefixes lora_unet_,
lora_te_, lora_te1_, lora_te2_ (the module path's dots are underscores, which cannot be undone:
ΔW is listed under the kohya module's name).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from ..dtypes import lookup
from ..model import Tensor

PEFT_PREFIX = "base_model.model."
PEFT, KOHYA = "peft-lora", "kohya-lora"
PEFT_LYCORIS, KOHYA_LYCORIS = "peft-lycoris", "kohya-lycoris"
NEEDS_CONFIG = (PEFT, PEFT_LYCORIS)      # layouts whose scale is in adapter_config.json
# suffix -> (layout, role in the pair, ΔW transposed: (B·A)^T, as peft's embedding layers do)
SUFFIXES = {
    ".lora_A.weight": (PEFT, "down", False), ".lora_B.weight": (PEFT, "up", False),
    ".lora_embedding_A": (PEFT, "down", True), ".lora_embedding_B": (PEFT, "up", True),
    ".lora_magnitude_vector": (PEFT, "magnitude", False),
    ".lora_magnitude_vector.weight": (PEFT, "magnitude", False),   # peft < 0.10
    ".lora_B.bias": (PEFT, "bias", False),                          # lora_bias=True
    ".lora_down.weight": (KOHYA, "down", False), ".lora_up.weight": (KOHYA, "up", False),
    ".alpha": (KOHYA, "alpha", False),
}
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")
# The whole right-hand factor (A, or B when transposed) is held as floats to compute ΔW: up
# to this many values (r 64 x 32,768 columns; ~80 MB of Python floats).
MAX_FACTOR_VALUES = 1 << 21


@dataclass
class Pair:
    """One adapted module: its LoRA factors as stored, and what ΔW is made of them."""
    layout: str
    module: str                  # peft: the base model's module path; kohya: its module name
    down: Tensor | None = None   # A / lora_down
    up: Tensor | None = None     # B / lora_up
    magnitude: Tensor | None = None
    alpha: Tensor | None = None
    bias: Tensor | None = None   # lora_B.bias (lora_bias=True): Δb = scale · bias
    transposed: bool = False

    @property
    def base_name(self) -> str:
        return self.module + ".weight"

    @property
    def rank(self) -> int:
        return self.down.shape[0]

    @property
    def shape(self) -> tuple:
        """ΔW's shape: the base weight's ([out, in], conv [out, in, kh, kw], transposed [in, out])."""
        if self.transposed:
            return (self.down.shape[1], self.up.shape[0])
        return (self.up.shape[0],) + tuple(self.down.shape[1:])

    @property
    def stored(self) -> tuple:
        return tuple(t for t in (self.down, self.up, self.magnitude, self.alpha) if t is not None)

    def problem(self) -> str | None:
        """Why ΔW cannot be computed from these tensors (None: it can)."""
        if self.down is None or self.up is None:
            missing, have = ("A (lora_down)", self.up) if self.down is None else ("B (lora_up)", self.down)
            return f"its {missing} is not in the file; {have.name!r} is shown as stored"
        for t in (self.down, self.up):
            if t.problem or t.source is None or not t.contiguous:
                return f"{t.name!r} cannot be read ({t.problem or 'not a contiguous tensor'})"
            if t.dtype not in FLOAT_DTYPES:
                return f"{t.name!r} is {t.dtype}, not a float type LoRA factors are stored in"
        d, u = self.down.shape, self.up.shape
        conv = len(d) == 4 and len(u) == 4 and tuple(u[2:]) == (1, 1) and not self.transposed
        if not (len(d) == 2 and len(u) == 2 or conv) or d[0] != u[1] or d[0] < 1:
            return (f"the shapes {list(d)} (A) and {list(u)} (B) are not a LoRA pair "
                    "([r, in] and [out, r], or conv [r, in, kh, kw] and [out, r, 1, 1])")
        whole = self.up if self.transposed else self.down
        if whole.numel > MAX_FACTOR_VALUES:
            return (f"{whole.name!r} holds {whole.numel:,} values, more than the "
                    f"{MAX_FACTOR_VALUES:,} a ΔW row is computed from here")
        if self.alpha is not None and (self.alpha.numel != 1 or self.alpha.dtype not in FLOAT_DTYPES
                                       or self.alpha.problem):
            return f"{self.alpha.name!r} is not one float (kohya's alpha is a scalar)"
        if self.magnitude is not None and self.magnitude.numel != self.shape[0]:
            return (f"its DoRA magnitude {self.magnitude.name!r} has {self.magnitude.numel:,} "
                    f"values for {self.shape[0]:,} output rows")
        if self.bias is not None and (self.bias.shape != (self.up.shape[0],) or self.transposed
                                      or self.bias.dtype not in FLOAT_DTYPES or self.bias.problem):
            return (f"its lora_B.bias {self.bias.name!r} is not {self.up.shape[0]:,} floats "
                    "(one per output row of B)")
        return None


FACTOR_SUFFIXES = tuple(s for s, (_, role, _) in SUFFIXES.items() if role in ("down", "up"))
# LyCORIS parameter names (the lycoris library's modules, as peft's LoHa/LoKr layers name them
# too): those computed (lycoris.py ROLES) and those of algorithms that are not, which are listed
# with their algorithm's name, never guessed
LYCORIS_COMPUTED = (".hada_w1_a", ".hada_w1_b", ".hada_w2_a", ".hada_w2_b", ".hada_t1", ".hada_t2",
                    ".lokr_w1", ".lokr_w1_a", ".lokr_w1_b", ".lokr_w2", ".lokr_w2_a", ".lokr_w2_b",
                    ".lokr_t2")
# LyCORIS LoCon with a Tucker core (use_tucker): a kohya LoRA pair and this, one module (lycoris.py)
LOCON_MID = ".lora_mid.weight"
LYCORIS_OTHERS = {".oft_blocks": "OFT", ".oft_diag": "Diag-OFT", ".oft_r": "BOFT",
                  ".diff": "full fine-tune (diff)", ".diff_b": "full fine-tune (diff)",
                  ".w_norm": "norm", ".b_norm": "norm", ".a1.weight": "GLoRA", ".a2.weight": "GLoRA",
                  ".b1.weight": "GLoRA", ".b2.weight": "GLoRA", ".ia3_l": "IA3"}
KOHYA_PREFIXES = ("lora_unet_", "lora_te_", "lora_te1_", "lora_te2_", "lycoris_")
# a layout in words (the CLI and the page say `kind`); LyCORIS ones add the algorithms computed
KINDS = {PEFT: "PEFT LoRA", KOHYA: "kohya/A1111 LoRA", PEFT_LYCORIS: "PEFT LyCORIS",
         KOHYA_LYCORIS: "LyCORIS (kohya names)"}
ALGORITHMS = {"loha": "LoHa", "lokr": "LoKr", "locon": "LoCon Tucker"}


def kind_of(layout: str, algorithms: dict | None = None) -> str:
    words = ", ".join(f"{ALGORITHMS.get(k, k)} ×{n:,}" for k, n in (algorithms or {}).items())
    return KINDS[layout] + (f" ({words})" if words else "")
# An adapter is made of its pairs: one is among its first tensors whatever the order (a
# modules_to_save copy or two may come first). Looking no further keeps every other open,
# a million-tensor header included, at one C-level check of a few names.
FIRST_NAMES = 256


def layout_of(names) -> str | None:
    """PEFT, KOHYA, PEFT_LYCORIS, KOHYA_LYCORIS or None (not an adapter), from the first
    FIRST_NAMES tensor names (a kohya file's other LyCORIS algorithms by their kohya prefix)."""
    for name in islice(names, FIRST_NAMES):
        if name.endswith(FACTOR_SUFFIXES):
            return next(SUFFIXES[s][0] for s in FACTOR_SUFFIXES if name.endswith(s))
        if name.endswith(LYCORIS_COMPUTED):
            return PEFT_LYCORIS if name.startswith(PEFT_PREFIX) else KOHYA_LYCORIS
        if name.startswith(KOHYA_PREFIXES) and name.endswith(tuple(LYCORIS_OTHERS)):
            return KOHYA_LYCORIS
    return None


def find_pairs(tensors: list[Tensor], layout: str) -> tuple[list[Pair], list[Tensor]]:
    """The pairs of `layout` among `tensors`, in file order, and the tensors in none."""
    found: dict[str, Pair] = {}
    others = []
    for t in tensors:
        hit = next(((s, role, tr) for s, (lay, role, tr) in SUFFIXES.items()
                    if lay == layout and t.name.endswith(s)), None)
        if hit is None:
            others.append(t)
            continue
        suffix, role, transposed = hit
        module = t.name[:-len(suffix)]
        if layout == PEFT and module.startswith(PEFT_PREFIX):
            module = module[len(PEFT_PREFIX):]
        pair = found.setdefault(module, Pair(layout, module))
        if getattr(pair, role) is not None:   # two tensors for one role: keep both as stored
            others.append(t)
            continue
        setattr(pair, role, t)
        pair.transposed = pair.transposed or transposed
    return list(found.values()), others


def scalar(t: Tensor) -> float:
    """A one-element float tensor's value (kohya's alpha)."""
    (value,) = lookup(t.dtype).decode(t.source.read_data(t.offset, t.nbytes), t.big_endian)
    return float(value)

