"""What working models look like: the rules' flags that a model's own conventions explain become
information, with the convention said. Calibrated on every architecture transformers builds,
freshly initialised and after a few training steps, and on published models
(bench/health_calibration.py); a real fault is never explained away, because each convention
asks for evidence a fault does not leave:

  fresh norms      a norm at its initial value (all 1, or all 0 where the norm is 1 + w, as
                   Gemma's) while EVERY norm of the model is at one: a freshly initialised model.
                   One norm at 1 among trained ones is still a warning (it was not loaded).
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

from .measure import Measure
from .rules import Flag, is_norm

EDGE_FACTOR = 100.0     # a first-layer norm this far below its trend is collapsed all the same
NORM_INIT = (0.0, 1.0)  # a norm weight's initial values: 1 (x * w), 0 (x * (1 + w))


def calibrate(flags: list[Flag], measures: list[Measure]) -> list[Flag]:
    """`flags` with those a convention explains turned into information (in place)."""
    roles: dict[str, list[Measure]] = {}
    for m in measures:
        if m.measured:
            roles.setdefault(m.role, []).append(m)
    by_name = {m.name: m for m in measures}
    fresh = _fresh_norms(measures)
    identical = _identical_roles(flags, roles, by_name)
    layered = [r for r, ms in roles.items() if len({m.layer for m in ms if m.layer is not None}) >= 3]
    bad_merge = len(identical) * 2 > len(layered)
    for f in flags:
        if f.severity == "info":
            continue
        m = by_name.get(f.tensor)
        if m is None:
            continue
        members = roles.get(m.role, [])
        why = None
        if f.kind == "norm_untrained" and fresh:
            why = ("every norm of the model is at its initial value, as in a freshly initialised "
                   "model (not a fault if the model is meant to be untrained)")
        elif f.kind == "constant" and len(members) >= 2 and all(x.constant == m.constant for x in members):
            why = (f"every one of the {len(members)} members of its role is {m.constant:g}: the "
                   "architecture initialises it so (Mamba's D, dt_bias), and training moves it")
        elif f.kind == "duplicate" and m.role in identical and not bad_merge:
            why = (f"every one of the {len(members)} layers holds the same values while the other "
                   "roles differ between layers: a deterministic initialisation (as Mamba's A_log), "
                   "not a copy-paste")
        elif f.kind in ("norm_collapsed", "scale") and _first_layer_norm(m, members, f):
            why = (f"it is its role's first layer, whose norms see the embeddings directly and "
                   f"differ from the layers after in trained models; a collapse (x{EDGE_FACTOR:g} "
                   "or more below its trend) would still be an error")
        if why:
            f.severity = "info"
            f.message = f"{f.message} Expected here: {why}."
            f.evidence["convention"] = why
    return flags


def _fresh_norms(measures: list[Measure]) -> bool:
    norms = [m for m in measures if m.measured and is_norm(m.name, m.shape)]
    return bool(norms) and all(m.constant in NORM_INIT and m.exact for m in norms)


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
