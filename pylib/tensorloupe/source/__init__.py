"""Byte sources: the only way any reader touches file bytes.

A source has a `name`, a `size` and `read(offset, n)`, which returns exactly `n` bytes or raises
TruncatedError naming the offset and the shortfall. Every source counts the reads it makes and the
bytes they return, so tests and benchmarks can prove that opening a 40 GB file reads only its header.

In the browser every read costs ~1-1.5 ms whatever its size, so slow sources are wrapped in
CachedSource (fixed aligned blocks, LRU, bounded memory) and the sampler coalesces its ranges.

    base.py    ByteSource, MemorySource, FileSource, SliceSource, SourceFile (a file-like view)
    cache.py   CachedSource
    remote.py  HttpSource (http_pool.py: keep-alive connections; http_reply.py: reply checks)
    objectstore.py  ObjectStoreSource: s3://, gs://, az://, hf:// through fsspec (optional extra)
"""

from __future__ import annotations

from .base import ByteSource, FileSource, MemorySource
from .cache import CachedSource
from .objectstore import ObjectStoreSource, is_object_url

__all__ = ["ByteSource", "is_url", "open_source"]


def is_url(target) -> bool:
    """A remote file: an http(s) URL or an object store's (s3://, gs://, az://, hf://...)."""
    return isinstance(target, str) and (target.startswith(("http://", "https://"))
                                        or is_object_url(target))


def open_source(target, name: str | None = None, follow_redirects: bool = False) -> ByteSource:
    """A cached source for a path, URL, bytes-like object or existing source."""
    if isinstance(target, ByteSource):
        return target
    if isinstance(target, (bytes, bytearray, memoryview)):
        return MemorySource(target, name or "<memory>")
    if is_object_url(target):
        return CachedSource(ObjectStoreSource(target, name))
    if is_url(target):
        from .remote import HttpSource
        return CachedSource(HttpSource(target, name, follow_redirects=follow_redirects))
    return CachedSource(FileSource(target, name))
