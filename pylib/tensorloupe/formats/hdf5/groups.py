"""The group graph: every object reachable from the root group, with its path and messages.

Two ways a group lists its members (spec IV.A.2.g, IV.A.2.r; III.A.1, III.B, III.C):
  - old style (h5py's default, libver="earliest"): a symbol table message names a v1 B-tree
    whose leaves point at symbol table nodes ("SNOD"), whose entries name objects by an offset
    into the group's local heap ("HEAP") of names;
  - new style (libver="latest"): link messages in the group's own header ("compact" storage,
    up to 8 links by default). More links move to a fractal heap ("dense" storage, dense.py).
The walk is depth-first in name order, bounded in depth and objects; a link back to a group on
the current path (a cycle) is refused. Soft and external links are collected, not followed
(links.py resolves the soft ones among the objects found).
"""

from __future__ import annotations

from typing import NamedTuple

from ...errors import LimitError
from . import messages
from .file import Cursor, H5File
from .headers import Message, read_header

MAX_DEPTH = 64
MAX_OBJECTS = 200_000
MAX_ENTRIES = 1 << 16          # entries of one B-tree node or symbol table node
BTREE, SNOD, HEAP = b"TREE", b"SNOD", b"HEAP"
GROUP_NODE = 0


class Obj(NamedTuple):
    path: str                  # "layers/dense/vars/0"; "" for the root group
    address: int               # its object header
    messages: list[Message]

    def first(self, kind: int) -> Message | None:
        return next((m for m in self.messages if m.type == kind), None)

    def all(self, kind: int) -> list[Message]:
        return [m for m in self.messages if m.type == kind]

    @property
    def is_dataset(self) -> bool:
        return self.first(messages.LAYOUT) is not None


def walk(h5: H5File, root: int, warnings: list[str],
         soft: list | None = None) -> list[Obj]:
    """Every object under the root, groups before their members; each soft or external link
    appended to `soft` as (its path, the Link) (a warning where `soft` is None)."""
    out: list[Obj] = []
    stack = [("", root, ())]
    while stack:
        path, address, ancestors = stack.pop()
        if len(out) >= MAX_OBJECTS:
            raise h5.fail(f"the file holds more than {MAX_OBJECTS:,} objects", None, LimitError)
        if address in ancestors:
            raise h5.fail(f"the group graph has a cycle: {path!r} links back to a group above it",
                          h5.base + address)
        if len(ancestors) > MAX_DEPTH:
            raise h5.fail(f"groups are nested more than {MAX_DEPTH:,} deep at {path!r}", None,
                          LimitError)
        obj = Obj(path, address, read_header(h5, address, repr(path or "/")))
        out.append(obj)
        if obj.is_dataset:
            continue
        children, others = _members(h5, obj)
        for link in others:
            if soft is not None and link.kind in ("soft", "external"):
                soft.append((f"{path}/{link.name}" if path else link.name, link))
            else:
                warnings.append(f"group {path or '/'!r}: the {link.kind} link {link.name!r} is not "
                                "followed")
        for name, child in sorted(children, reverse=True):
            stack.append((f"{path}/{name}" if path else name, child, ancestors + (address,)))
    return out


def _members(h5: H5File, obj: Obj) -> tuple[list[tuple[str, int]], list]:
    """(name, object header) of each hard link, and the other links."""
    found: list[tuple[str, int]] = []
    others: list = []
    where = repr(obj.path or "/")
    table = obj.first(messages.SYMBOL_TABLE)
    if table is not None:
        tree, heap = messages.symbol_table(h5, table.data, table.at)
        names = _local_heap(h5, heap, where)
        for node in _btree_leaves(h5, tree, where):
            found += _symbols(h5, node, names, where)
    for m in obj.all(messages.LINK):
        link = messages.link(h5, m.data, m.at)
        if link.kind == "hard":
            found.append((link.name, link.address))
        else:
            others.append(link)
    info = obj.first(messages.LINK_INFO)
    if info is not None:
        heap, index = messages.link_info(h5, info.data, info.at)
        if h5.defined(heap):
            from .dense import links
            for link in links(h5, heap, index, where):
                if link.kind == "hard":
                    found.append((link.name, link.address))
                else:
                    others.append(link)
    if len(found) + len(others) > MAX_ENTRIES * 64:
        raise h5.fail(f"group {where} has more than {MAX_ENTRIES * 64:,} members", None, LimitError)
    return found, others


def _local_heap(h5: H5File, address: int, where: str) -> bytes:
    n = 8 + 2 * h5.length_size + h5.offset_size
    c = Cursor(h5, h5.read(address, n, f"the local heap of group {where}"), h5.base + address,
               f"the local heap of group {where}")
    if c.take(4) != HEAP:
        raise h5.fail(f"group {where} names a local heap where there is none", h5.base + address,
                      expected="HEAP", found=c.data[:4].hex(" "))
    c.skip(4)
    size, _free, data = c.length(), c.length(), c.address()
    return h5.read(data, size, f"the local heap of group {where}")


def _btree_leaves(h5: H5File, root: int, where: str) -> list[int]:
    """The symbol table nodes a group's v1 B-tree points at, left to right."""
    leaves, queue, seen = [], [root], set()
    while queue:
        address = queue.pop(0)
        if address in seen:
            raise h5.fail(f"the B-tree of group {where} points at one of its nodes twice (a cycle)",
                          h5.base + address)
        seen.add(address)
        if len(seen) > MAX_OBJECTS:
            raise h5.fail(f"the B-tree of group {where} has too many nodes", None, LimitError)
        node_type, level, children = btree_node(h5, address, h5.length_size, f"group {where}")
        if node_type != GROUP_NODE:
            raise h5.fail(f"the B-tree of group {where} is not a group B-tree", h5.base + address,
                          expected="node type 0", found=node_type)
        (leaves if level == 0 else queue).extend(child for _key, child in children)
    return leaves


def btree_node(h5: H5File, address: int, key_size: int, what: str) -> tuple[int, int, list]:
    """A v1 B-tree node (III.A.1): its type, level and (key bytes, child address) pairs."""
    fixed = 8 + 2 * h5.offset_size
    head = Cursor(h5, h5.read(address, fixed, f"a B-tree node of {what}"), h5.base + address,
                  f"a B-tree node of {what}")
    if head.take(4) != BTREE:
        raise h5.fail(f"{what} points at a B-tree node that is not one", h5.base + address,
                      expected="TREE", found=head.data[:4].hex(" "))
    node_type, level, used = head.u8(), head.u8(), head.u16()
    if used > MAX_ENTRIES:
        raise h5.fail(f"a B-tree node of {what} declares {used:,} entries", h5.base + address,
                      LimitError)
    step = key_size + h5.offset_size
    body = Cursor(h5, h5.read(address + fixed, used * step + key_size, f"a B-tree node of {what}"),
                  h5.base + address + fixed, f"a B-tree node of {what}")
    children = []
    for _ in range(used):
        key = body.take(key_size)
        children.append((key, body.address()))
    return node_type, level, children


def _symbols(h5: H5File, address: int, names: bytes, where: str) -> list[tuple[str, int]]:
    head = Cursor(h5, h5.read(address, 8, f"a symbol table node of group {where}"),
                  h5.base + address, f"a symbol table node of group {where}")
    if head.take(4) != SNOD:
        raise h5.fail(f"the B-tree of group {where} points at no symbol table node",
                      h5.base + address, expected="SNOD", found=head.data[:4].hex(" "))
    head.skip(2)
    count = head.u16()
    entry = 2 * h5.offset_size + 24
    c = Cursor(h5, h5.read(address + 8, count * entry, f"a symbol table node of group {where}"),
               h5.base + address + 8, f"a symbol table node of group {where}")
    out = []
    for _ in range(count):
        name_at, header = c.address(), c.address()
        c.skip(24)
        end = names.find(b"\0", name_at)
        if name_at >= len(names) or end < 0:
            raise h5.fail(f"a member of group {where} has its name outside the group's local heap",
                          c.at + c.pos, found=name_at)
        out.append((names[name_at:end].decode("utf-8", "replace"), header))
    return out
