"""What working models look like: the rules' flags that a model's own conventions explain become
information, with the convention said. Calibrated on every architecture transformers builds,
freshly initialised and after a few training steps, and on published models
(bench/health_calibration.py); a real fault is never explained away, because each convention
asks for evidence a fault does not leave:

  fresh part       every norm of a part of the model (a stack of layers with the tensors named
                   beside it: "vision_tower.encoder.layers", the final norm with its layers) at its
                   initial value (all 1, or all 0 where the norm is 1 + w, as Gemma's): a freshly
                   initialised part (a whole fresh model, or a vision tower that text-only
                   training never reached); its untrained norms, zero-initialised, constant and
                   identical tensors and first-layer scales are its initialisation. One norm at
                   1 among trained ones is still a warning (it was not loaded); NaN never passes.
  open bound       a tensor that is one infinity everywhere (Gemma's audio clip bounds start so).
  idle buffers     BatchNorm's running_mean / running_var at 0 / 1 (updated in training mode
                   only), a VQ codebook's EMA buffers, I-BERT's integer-only copies (quant mode).
  equal vectors    copies among 1-D tensors (biases, norm weights) that start from one constant
                   and got the same updates; a copied matrix is still a warning.
  role constant    a tensor of one value where every member of its role (>= 2) has that value:
                   an initialisation convention (Mamba's D and dt_bias are 1 in every layer). A
                   constant among varied siblings is still a warning.
  role identical   copies that are every member of their role (>= 3 layers) while the other
                   layered roles differ between layers: a deterministic initialisation (Mamba's
                   A_log is log(1..N) in every layer). A copy of some layers, or every layer a
                   copy of one (a bad merge: most roles identical), is still a warning.
  first-layer norm a norm of its role's first layer below the trend by less than EDGE_FACTOR:
                   the first layer's norms see the embeddings directly and trained models scale
                   them apart from the layers after (published models do); a collapse or a
                   blow-up (x100 or more) still fires.
"""

from __future__ import annotations

import re

from ..display import counted
from .measure import Measure
from .rules import Flag, is_norm

# Flags a freshly initialised part explains (never a non-finite value).
FRESH_KINDS = ("norm_untrained", "dead", "constant", "duplicate", "scale", "norm_collapsed", "blowup")
# Buffers that stay at their initial 0 (or 1) until a mode of the model runs: BatchNorm's running
# statistics (training mode), a VQ codebook's EMA state (EnCodec's quantizer: k-means at the first
# batch), I-BERT's integer-only copies (quant mode).
BUFFERS = (
    (re.compile(r"(^|\.)running_(mean|var)$"),
     "BatchNorm running statistics at their initial values (0 mean, 1 variance): updated only "
     "when the layer runs in training mode"),
    (re.compile(r"(^|\.)codebook\.(embed|embed_avg|cluster_size)$"),
     "a vector quantiser's codebook state (EMA buffers), zero until its first training batch "
     "initialises it"),
    (re.compile(r"(^|\.)([^.]*_integer|[^.]*_scaling_factor)$"),
     "an integer-only quantisation buffer (I-BERT's), filled only when the model runs in quant mode"),
)
EDGE_FACTOR = 100.0     # a first-layer norm this far below its trend is collapsed all the same
NORM_INIT = (0.0, 1.0)  # a norm weight's initial values: 1 (x * w), 0 (x * (1 + w))


def calibrate(flags: list[Flag], measures: list[Measure]) -> list[Flag]:
    """`flags` with those a convention explains turned into information (in place)."""
    roles: dict[str, list[Measure]] = {}
    for m in measures:
        if m.measured:
            roles.setdefault(m.role, []).append(m)
    by_name = {m.name: m for m in measures}
    part = _components(measures)
    fresh = _fresh_parts(measures, part)
    identical = _identical_roles(flags, roles, by_name)
    layered = [r for r, ms in roles.items() if len({m.layer for m in ms if m.layer is not None}) >= 3]
    bad_merge = len(identical) * 2 > len(layered)
    for f in flags:
        m = by_name.get(f.tensor)
        if f.severity == "info" or m is None:
            continue
        why = _why(f, m, roles.get(m.role, []), fresh.get(part[m.name]), part[m.name],
                   m.role in identical and not bad_merge, [by_name[n] for n in f.related if n in by_name])
        if why:
            f.severity = "info"
            f.message = f"{f.message} Expected here: {why}."
            f.evidence["convention"] = why
    return flags


def _why(f: Flag, m: Measure, members: list[Measure], fresh: bool | None, part: str,
         whole_role_identical: bool, related: list[Measure]) -> str | None:
    """The convention that explains flag `f` on `m`, or None."""
    if f.kind == "nonfinite" and m.exact and not m.nan and (m.posinf == m.numel or m.neginf == m.numel):
        return ("every value is the same infinity: an open bound (a clipping limit not yet set, "
                "as Gemma's audio clip bounds start)")
    if f.kind == "nonfinite":
        return None      # a NaN or a stray infinity is never a convention
    buffer = next((why for pattern, why in BUFFERS if pattern.search(m.name)), None)
    if buffer and f.kind in ("dead", "constant", "duplicate"):
        return buffer
    if f.kind == "constant" and len(members) >= 2 and all(x.constant == m.constant for x in members):
        return (f"every one of the {counted(len(members), 'member')} of its role is {m.constant:g}: the "
                "architecture initialises it so (Mamba's D, dt_bias), and training moves it")
    if f.kind == "duplicate" and whole_role_identical:
        return (f"every one of the {counted(len(members), 'layer')} holds the same values while the other "
                "roles differ between layers: a deterministic initialisation (as Mamba's A_log), "
                "not a copy-paste")
    if f.kind == "duplicate" and len(m.shape) == 1 and all(len(x.shape) == 1 for x in related):
        return ("vectors (biases, norm weights) that start from one constant and get the same "
                "updates stay equal; a copied matrix would be a fault")
    if f.kind in ("norm_collapsed", "scale") and _first_layer_norm(m, members, f):
        return (f"it is its role's first layer, whose norms see the embeddings directly and "
                f"differ from the layers after in trained models; a collapse or blow-up "
                f"(x{EDGE_FACTOR:g} or more from its trend) would still be flagged")
    if fresh and f.kind in FRESH_KINDS:
        where = "the model's" if not part else f"{part}'s"
        return (f"every norm of {where} is at its initial value: a freshly initialised (or never "
                "trained) part, whose zero-initialised, constant or identical tensors are its "
                "architecture's initialisation")
    return None


def _components(measures: list[Measure]) -> dict[str, str]:
    """Each tensor's part of the model: the stack of layers it is in ("vision_tower.encoder.layers"),
    or for a tensor outside layers the stack it shares most leading name segments with (the final
    norm goes with its layers), else its first name segment."""
    stacks = sorted({m.role.split(".*")[0] for m in measures if m.layer is not None and ".*" in m.role})
    out = {}
    for m in measures:
        if m.layer is not None and ".*" in m.role:
            out[m.name] = m.role.split(".*")[0]
            continue
        parts = m.name.split(".")
        best, depth = "", 0
        for stack in stacks:
            common = 0
            for a, b in zip(parts, stack.split(".")):
                if a != b:
                    break
                common += 1
            if common > depth:
                best, depth = stack, common
        out[m.name] = best if depth else (parts[0] if len(parts) > 1 else "")
    return out


def _fresh_parts(measures: list[Measure], part: dict[str, str]) -> dict[str, bool]:
    """Per part: whether it has norms and every one is at an initial value. A part without norms
    is fresh if the whole model's norms are."""
    norms: dict[str, list[Measure]] = {}
    for m in measures:
        if m.measured and is_norm(m.name, m.shape):
            norms.setdefault(part[m.name], []).append(m)
    fresh = {p: all(m.constant in NORM_INIT and m.exact for m in ms) for p, ms in norms.items()}
    everywhere = bool(fresh) and all(fresh.values())
    return {p: fresh.get(p, everywhere) for p in set(part.values())}


def _identical_roles(flags: list[Flag], roles: dict, by_name: dict) -> set[str]:
    """Roles of >= 3 members that one duplicate flag covers whole."""
    out = set()
    for f in flags:
        if f.kind != "duplicate" or f.tensor not in by_name:
            continue
        role = by_name[f.tensor].role
        group = {f.tensor, *f.related}
        members = {m.name for m in roles.get(role, [])}
        if len(members) >= 3 and group == members:
            out.add(role)
    return out


def _first_layer_norm(m: Measure, members: list[Measure], f: Flag) -> bool:
    layers = [x.layer for x in members if x.layer is not None]
    factor = f.evidence.get("factor")
    return (is_norm(m.name, m.shape) and m.layer is not None and layers and m.layer == min(layers)
            and isinstance(factor, float) and 1 / EDGE_FACTOR < factor < EDGE_FACTOR)
