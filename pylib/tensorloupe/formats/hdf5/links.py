"""Soft and external links (spec IV.A.2.q), resolved among the objects the walk found.

A soft link names a path in the same file, absolute (`/g/w`) or relative to the group that
holds it (`v`); the path may pass through other soft links. Each is resolved hop by hop over
the hard-linked objects (groups.walk), at most MAX_HOPS links deep: a path back to a link
already on the way is a loop, a name found nowhere is dangling; both are said for that link,
and the file still opens. A soft link to a dataset is listed as a tensor under the link's own
path (the target's descriptor: the same bytes); one to a group says which group (its datasets
are listed once, under their own paths).

An external link names another file and a path in it: listed with both here, followed (or
not, and why) by external.py.
"""

from __future__ import annotations

from typing import NamedTuple

MAX_HOPS = 40          # H5L_NUM_LINKS, HDF5's own limit on soft links followed for one path
MAX_LISTED = 10_000    # links described in the checkpoint's extras


class Resolved(NamedTuple):
    path: str                  # the link's path
    target: str | None         # the hard-linked object's path it reaches ("" the root), or None
    problem: str | None        # why it reaches nothing


def resolve(objects: dict, links: list) -> tuple[list[Resolved], dict[str, dict], list[str]]:
    """(resolved soft links, a description of every link by path, warnings); `objects` maps
    an object's path to it, `links` are groups.walk's (path, Link) pairs."""
    soft = {path: link.target for path, link in links if link.kind == "soft"}
    out, described, warnings = [], {}, []
    for path, link in links:
        if link.kind == "external":
            entry = {"kind": "external", "file": link.file, "path": link.target, "followed": False}
        else:
            found = _follow(path, soft, objects)
            out.append(found)
            entry = {"kind": "soft", "path": link.target}
            if found.problem:
                entry["problem"] = found.problem
                warnings.append(f"soft link {path!r} to {link.target!r}: {found.problem}")
            else:
                entry["resolved"] = "/" + found.target
                if not objects[found.target].is_dataset:
                    entry["group"] = True
        if len(described) < MAX_LISTED:
            described[path] = entry
    return out, described, warnings


def _follow(path: str, soft: dict, objects: dict) -> Resolved:
    """Where the soft link at `path` leads."""
    hops = [path]
    current = _joined(_parent(path), soft[path])
    while True:
        reached, through = _walk_path(current, soft, objects)
        if reached is not None:
            return Resolved(path, reached, None)
        if through is None:
            return Resolved(path, None, f"no object is at {'/' + current!r} (a dangling link)")
        link, rest = through
        if link in hops:
            chain = " → ".join("/" + h for h in hops + [link])
            return Resolved(path, None, f"the links loop ({chain})")
        if len(hops) >= MAX_HOPS:
            return Resolved(path, None, f"more than {MAX_HOPS:,} soft links deep")
        hops.append(link)
        current = _joined(_joined(_parent(link), soft[link]), rest)


def _walk_path(path: str, soft: dict, objects: dict):
    """(the object's path, None) if `path` names a hard-linked object; (None, (a soft link on
    the way, the rest of the path after it)) if it passes through one; (None, None) if neither."""
    parts = [p for p in path.split("/") if p and p != "."]
    at = ""
    for i, part in enumerate(parts):
        step = f"{at}/{part}" if at else part
        if step in objects:
            at = step
        elif step in soft:
            return None, (step, "/".join(parts[i + 1:]))
        else:
            return None, None
    return at, None


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _joined(base: str, target: str) -> str:
    """`target` (absolute, or relative to the group at `base`) as a path from the root."""
    if target.startswith("/"):
        return target.strip("/")
    return f"{base}/{target}".strip("/") if base else target.strip("/")
