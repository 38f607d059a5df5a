"""What a user may name as one checkpoint, turned into the files that open together.

Every command (and `tensorloupe.open`) accepts the same things: one file; several files that are
parts of one checkpoint (safetensors shards, split GGUF parts, with or without the index); a
folder holding one checkpoint; a `*.safetensors.index.json` or `*.bin.index.json` (its shards are the files it names,
beside it); and URLs of any of these files (an index URL's shards are resolved relative to it),
object store URLs too (s3://, gs://, az://, hf://), where a folder is a URL ending in '/' (its
objects are listed). A diffusers folder's model_index.json URL, or its http(s) folder URL ending
in '/', names its components' files (pipeline_urls.py: found by name, no server lists a folder).
A `config.json` beside the model is found too (moe reads its top-k). `org/model[@revision]` is
the snapshot in the local Hugging Face cache, else the model's files on the Hub (hubremote.py).

Names only, plus the index's JSON: nothing here reads a checkpoint.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from ..display import some_of
from ..errors import UsageError
from ..source import is_url, open_source
from ..source.objectstore import is_object_url
from .detect import EXTENSIONS
from .grouping import METADATA_NAME, group, is_index_name
from .pipeline import MODEL_INDEX
from .hubcache import Cached, NotCached, find as find_cached, is_hub_name
from .shards import read_index
from .deepspeed import LATEST, is_member as is_zero_file, read_tag


class Target(NamedTuple):
    files: list[str]          # paths or URLs to open together (tensorloupe.open([...]))
    # where an org/model name was found: the Hugging Face cache, or else the Hub (hubremote.OnHub)
    hub: Cached | None = None

    def follows(self, asked: bool) -> bool:
        """Whether to follow a redirect to another site: if asked, and for a model read from the
        Hub, which sends weight files from another host (its CDN) by a redirect."""
        return asked or (self.hub is not None and self.hub.EXTRAS_KEY == "hub_remote")


def resolve(items) -> Target:
    """The files (and config.json) that `items` (paths, folders, index files, URLs) name."""
    if isinstance(items, (str, os.PathLike)):
        items = [items]
    items = [os.fspath(i) if isinstance(i, os.PathLike) else i for i in items]
    hub = None
    if len(items) == 1 and is_hub_name(items[0]):   # org/model[@rev]: its cached snapshot
        try:
            hub = find_cached(items[0])
            items = [hub.folder]
        except NotCached as missing:                # else the Hub's files, by HTTP Range
            from .hubremote import locate
            hub = locate(items[0], missing)
            items = hub.files
    if len(items) == 1 and isinstance(items[0], str) and items[0].startswith(("http://", "https://")):
        from .pipeline_urls import index_url
        index = index_url(items)
        if index is not None:          # a diffusers folder by URL: its files found by name
            items = _pipeline_by_url(index)
    expanding = [isinstance(i, str) and _expands(i) for i in items]
    # An index given with shards beside it names the set; the shards given are the ones wanted.
    alone = all(expanding) or not any(isinstance(i, str) and is_index_name(i)
                                      for i in items)
    files: list = []
    found: list = []        # what folders and indexes add; a file given twice stays an error
    for item, expands in zip(items, expanding):
        # bytes and ByteSources (the Python API) are files already
        if expands and (alone or not is_index_name(item)):
            found += _expand(item)
        else:
            files.append(item)
    files += [f for i, f in enumerate(found) if f not in files and f not in found[:i]]
    if not files:
        raise UsageError("no files were given")
    return Target(files, hub)


def needs_resolving(target) -> bool:
    """Whether a single path must go through resolve(): a folder or an index file."""
    return isinstance(target, (str, os.PathLike)) and (
        _expands(os.fspath(target)) or is_hub_name(target))


def _expands(item: str) -> bool:
    return is_index_name(item) or _is_folder(item)


def _is_folder(item: str) -> bool:
    """A local folder, or an object store prefix (a URL ending in '/')."""
    if is_object_url(item):
        return item.endswith("/")
    return not is_url(item) and os.path.isdir(item)


def _expand(item: str) -> list[str]:
    if is_index_name(item):
        return [item] + _shards_of(item)
    if is_object_url(item) and item.endswith("/"):
        return _prefix(item)
    if _is_folder(item):
        return _folder(item)
    return [item]


def _shards_of(index: str) -> list[str]:
    """The shard files an index names: URLs relative to its URL, or local files beside it (the
    missing ones are left to shards.py, which names them in a warning)."""
    source = open_source(index)
    try:
        weight_map = read_index(source)["weight_map"]
    finally:
        source.close()
    names = sorted(set(weight_map.values()))
    if is_object_url(index):
        from ..source.objectstore import sibling
        return [sibling(index, name) for name in names]
    if is_url(index):
        from urllib.parse import urljoin   # URLs only (urllib.parse brings ipaddress: slow in Pyodide)
        return [urljoin(index, name) for name in names]
    folder = os.path.dirname(index)
    present = [os.path.join(folder, n) for n in names if os.path.isfile(os.path.join(folder, n))]
    if not present:
        raise UsageError(f"none of the {len(names):,} shard files the index names is beside it "
                         f"(e.g. {names[0]})" if names else "the index names no shard files",
                         file=os.path.basename(index))
    return present


def _pipeline_by_url(index: str) -> list:
    """A diffusers folder's files by URL (pipeline_urls.py: model_index.json, each component's
    config.json and weights), as the sources its probes opened: each file's first ranged
    request is the one that found it, and is not asked again."""
    from ..source import CachedSource
    from . import hubfiles, pipeline_urls
    opened: list = []

    def probe_all(urls):
        found = pipeline_urls.http_probe_all(urls)
        opened.extend(p["source"] for p in found.values() if "source" in p)
        return found
    try:
        urls, probes = pipeline_urls.files(index, probe_all, pipeline_urls.http_open, hubfiles.shard_urls)
    except BaseException:
        for source in opened:
            source.close()
        raise
    kept = [probes[u]["source"] for u in urls]
    for source in opened:
        if not any(source is k for k in kept):
            source.close()
    return [CachedSource(s) for s in kept]


def _zero_tag(folder: str, names: list[str]) -> list[str] | None:
    """A DeepSpeed save folder (`latest` naming a tag folder of ZeRO files beside it): that tag
    folder's ZeRO files. Its zero_to_fp32.py is never run."""
    if LATEST not in names:
        return None
    tag = read_tag(os.path.join(folder, LATEST))
    inner = os.path.join(folder, tag) if tag else None
    if inner is None or not os.path.isdir(inner):
        return None
    files = sorted(n for n in os.listdir(inner) if is_zero_file(n))
    return [os.path.join(inner, n) for n in files] or None


def _folder(folder: str) -> list[str]:
    """The one checkpoint a folder holds (grouping.py's rule, as the page lists a dropped folder):
    its index and shards, one set of parts, or one file."""
    names = sorted(n for n in os.listdir(folder)
                   if _visible(n) and os.path.isfile(os.path.join(folder, n)))
    label = os.path.basename(os.path.normpath(folder)) or folder
    zero = _zero_tag(folder, names)
    if zero is not None:
        return zero
    if MODEL_INDEX in names:     # a diffusers folder: its components' files, one level down
        names += sorted(f"{d}/{n}" for d in os.listdir(folder)
                        if not d.startswith(".") and os.path.isdir(os.path.join(folder, d))
                        for n in os.listdir(os.path.join(folder, d))
                        if not n.startswith(".") and os.path.isfile(os.path.join(folder, d, n)))
    return _one_checkpoint(names, label, lambda n: os.path.join(folder, n))


def _prefix(url: str) -> list[str]:
    """The one checkpoint the objects directly under an object store prefix make up (the same
    rule as a local folder's)."""
    from ..source.objectstore import listing
    label = url.rstrip("/").rsplit("/", 1)[-1] or url
    return _one_checkpoint([n for n in listing(url) if _visible(n)], label, lambda n: url + n)


def _visible(name: str) -> bool:
    """Not a hidden file, but DCP's .metadata."""
    return not name.startswith(".") or name == METADATA_NAME


def _one_checkpoint(names: list[str], label: str, join) -> list[str]:
    """The files of the one checkpoint among a folder's `names`: its index and shards, one set of
    parts, or one file; `join` makes a name the folder's path or URL."""
    found = group(names, name=lambda n: n.rsplit("/", 1)[-1],
                  directory=lambda n: n.rsplit("/", 1)[0] if "/" in n else "", listed=lambda n: False)
    if len(found) > 1:
        raise UsageError("the folder holds several checkpoints: name the one to open",
                         file=label, found=some_of(g.name for g in found))
    if not found:
        raise UsageError(f"the folder holds no checkpoint file ({', '.join(EXTENSIONS)})",
                         file=label)
    members = found[0].members
    indexes = [n for n in members if is_index_name(n)]
    if indexes:
        # The index's shards, then the set's other parts in the folder: a shard the index does
        # not name is opened too, and shards.py says the index leaves it out.
        named = _expand(join(indexes[0]))
        return named + [p for p in map(join, members) if p not in named]
    return [join(n) for n in members]
