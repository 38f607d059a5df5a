"""External links (spec IV.A.2.q, link type 64) followed where they stay in the folder the user
gave: the file an external link names is opened beside this one (`ByteSource.beside`: the same
folder on disk, a dropped folder, the files picked with it) only if its name is relative and
never climbs out ('..', absolute paths and drive letters are refused, as ONNX external data is);
a dataset at the link's path there is listed under the link's own path, read from that file.
Files reached this way do not follow their own external links (no chain, no loop between two
files), and at most MAX_FILES are opened. Whatever is not followed says why.
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import TensorloupeError
from ...model import Tensor
from ...source import ByteSource
from ...source.base import inside_folder
from ...source.cache import CachedSource

MAX_FILES = 64


def follow(source: ByteSource, described: dict, warnings: list[str], read) -> tuple[list[Tensor], list]:
    """(tensors reached through external links, the sources opened for them); `described` is
    links.resolve's description, whose external entries say what became of them; `read(source)`
    opens another HDF5 file without following its own external links."""
    opened: dict[str, object] = {}       # file name -> its checkpoint, or the TensorloupeError
    tensors = []
    for path, entry in described.items():
        if entry["kind"] != "external":
            continue
        name = inside_folder(entry["file"])
        if name is None:
            why = "its file is not inside the folder it was opened from (absolute paths and '..' are refused)"
        elif name not in opened and len(opened) >= MAX_FILES:
            why = f"more than {MAX_FILES:,} files are named by external links"
        else:
            if name not in opened:
                opened[name] = _open(source, name, read)
            why, tensor = _target(opened[name], path, entry)
            if tensor is not None:
                tensors.append(tensor)
        entry["followed"] = why is None
        if why:
            entry["problem"] = why
            warnings.append(f"{path!r} is an external link to {entry['path']!r} in {entry['file']!r}: "
                            f"listed, not followed: {why}")
    sources = [s for c in opened.values() if not isinstance(c, TensorloupeError) for s in c.sources]
    return tensors, sources


def _open(source: ByteSource, name: str, read):
    try:
        found = source.beside(name)
        return read(found if isinstance(found, CachedSource) else CachedSource(found))
    except TensorloupeError as e:
        return e


def _target(other, path: str, entry: dict) -> tuple[str | None, Tensor | None]:
    if isinstance(other, TensorloupeError):
        return f"{entry['file']!r} cannot be opened: {other.message}", None
    target = entry["path"].strip("/")
    found = next((t for t in other.tensors if t.name == target), None)
    if found is None:
        return f"{entry['file']!r} has no dataset at {entry['path']!r}", None
    return None, replace(found, name=path, info={**found.info,
                                                 "external link to": f"{entry['file']}:{entry['path']}"})
