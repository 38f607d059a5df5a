"""Which tensors of a pickled nn.Module are its parameters and which its buffers, as the module
itself records them.

`torch.save(module)` pickles each module's `__dict__` (the allow-list machine keeps it as the
inert state of a Marker): its `_parameters` dict holds what `module.parameters()` yields and its
`_buffers` dict what `module.buffers()` yields (BatchNorm's statistics, a registered mask or
scale of any name). That is evidence the names cannot give: a custom buffer named `scale` or a
learned `inv_freq` parameter. A state_dict alone records neither, and is judged by names.
"""

from __future__ import annotations

from ...unpickling.objects import Marker

PARAMETERS, BUFFERS = "_parameters", "_buffers"


def slots(root) -> dict[int, str]:
    """{id(tensor reference): "_parameters" or "_buffers"} for every tensor a pickled module's
    state lists in one of those slots. Each container is visited once (the memo shares them)."""
    out: dict[int, str] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        kind = type(obj)
        if kind is dict:
            stack.extend(obj.values())
        elif kind is list or kind is tuple:
            stack.extend(obj)
        elif kind is Marker:
            state = obj.state
            if type(state) is dict:
                for slot in (PARAMETERS, BUFFERS):
                    held = state.get(slot)
                    if type(held) is dict:
                        for value in held.values():
                            out.setdefault(id(value), slot)
                stack.extend(state.values())
            stack.extend(obj.args)
            stack.extend((obj.kwargs or {}).values())
    return out
