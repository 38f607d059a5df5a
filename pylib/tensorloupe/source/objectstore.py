"""ObjectStoreSource: an object in a bucket (s3://, gs://, az://, abfs://, hf://), read by ranged
reads through fsspec and the backend package of its scheme.

fsspec and its backends are an optional extra (`pip install 'tensorloupe[remote]'`), imported only
when such a URL is opened: the page never uses them, and a local file or an http(s) URL never
imports them. The guarantees are HttpSource's: the size comes from the store's own answer
(`info`), every read asks for exactly its range (`cat_file(path, start=, end=)`, never the whole
object), a reply that is not exactly that many bytes is refused (http_reply.wrong_range), a
vectored read runs at most CONCURRENCY requests at once, and each request of an asynchronous
backend (s3fs, gcsfs, adlfs: fsspec cancels it) has HttpSource's total deadline, `timeout`
seconds plus one per MB asked for, retries included. One difference: the backends read a reply
whole before returning it, so a server that ignores Range (no real store does) is refused after
its body has arrived, where HttpSource stops reading one byte past the range.

Credentials and endpoints come from where each backend already looks (for S3: AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, ~/.aws; fsspec's own config: FSSPEC_S3_ANON=true, ~/.config/fsspec/*.json),
and are never put in a message.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import FetchError, UnreadableError
from .base import ByteSource


class Backend(NamedTuple):
    protocol: str      # fsspec's name for it
    package: str       # the module (and pip distribution) that implements it
    store: str         # what it is, for messages


# One row per URL scheme we open. `pip install 'tensorloupe[remote]'` brings fsspec and s3fs;
# the others are installed by name when needed.
BACKENDS = {
    "s3": Backend("s3", "s3fs", "Amazon S3 (or an S3-compatible store)"),
    "gs": Backend("gcs", "gcsfs", "Google Cloud Storage"),
    "gcs": Backend("gcs", "gcsfs", "Google Cloud Storage"),
    "az": Backend("abfs", "adlfs", "Azure Blob Storage"),
    "abfs": Backend("abfs", "adlfs", "Azure Blob Storage"),
    "hf": Backend("hf", "huggingface_hub", "the Hugging Face Hub"),
}
SCHEMES = tuple(f"{scheme}://" for scheme in BACKENDS)
CONCURRENCY = 8        # requests in flight for one vectored read


def is_object_url(target) -> bool:
    return isinstance(target, str) and target.startswith(SCHEMES)


def backend_of(url: str) -> Backend:
    return BACKENDS[url.split("://", 1)[0]]


def filesystem(url: str, storage_options: dict | None = None):
    """(fsspec filesystem, path inside it) for an object URL, or an UnreadableError saying which
    package to install."""
    backend = backend_of(url)
    try:
        import fsspec
    except ImportError as e:
        raise missing(url, backend, "fsspec") from e
    try:
        cls = fsspec.get_filesystem_class(backend.protocol)
    except (ImportError, ValueError) as e:
        raise missing(url, backend, backend.package) from e
    try:
        fs = cls(**(storage_options or {}))
    except Exception as e:    # a backend's own complaint about its configuration
        raise UnreadableError(f"{backend.package} refuses its settings: {type(e).__name__}: {e}",
                              file=url) from e
    return fs, cls._strip_protocol(url)


def missing(url: str, backend: Backend, package: str) -> UnreadableError:
    extra = "pip install 'tensorloupe[remote]'" if backend.package == "s3fs" else \
        f"pip install fsspec {backend.package}"
    scheme = url.split("://", 1)[0]
    return UnreadableError(f"reading {scheme}:// URLs ({backend.store}) needs the {package} "
                           f"package, which is not installed: {extra}", file=url)


def failed(url: str, e: BaseException, what: str = "read the object",
           deadline=None) -> UnreadableError:
    """The error for a backend exception: not found, not permitted, too slow, or the store's own
    words."""
    if isinstance(e, TimeoutError) and deadline is not None:
        return FetchError(f"the store did not answer within {deadline.seconds:.0f} s", file=url)
    if isinstance(e, FileNotFoundError):
        return UnreadableError("no such object in the store", file=url)
    if isinstance(e, PermissionError):
        return FetchError("the store refuses access (check the credentials it is given: "
                          "environment variables or fsspec's config)", file=url)
    return FetchError(f"the store failed to {what}: {type(e).__name__}: {e}", file=url)


def deadline_for(fs, timeout: float, n: int):
    """(the Deadline of a request for n bytes, the keyword that sets it): fsspec's sync wrapper of
    an async backend takes `timeout` and cancels the request when it passes; a synchronous
    backend (huggingface_hub's) keeps its own timeouts."""
    from .http_reply import Deadline
    if not getattr(fs, "async_impl", False):
        return None, {}
    deadline = Deadline(timeout, n)
    return deadline, {"timeout": deadline.seconds}


class ObjectStoreSource(ByteSource):
    """An object in a bucket, read by ranged requests through fsspec (see the module)."""

    waits = True

    def __init__(self, url: str, name: str | None = None, storage_options: dict | None = None,
                 timeout: float = 10.0):
        super().__init__()
        from .remote import HEAD_BYTES, url_name
        self.url = url
        self.name = name or url_name(url)
        self.storage_options = storage_options
        self.timeout = timeout
        self.fs, self.path = filesystem(url, storage_options)
        # The size and the bytes every reader starts with, asked side by side: opening takes one
        # round trip, as HttpSource's first request (which brings both).
        info, head = self._map(lambda ask: ask(), [self._info, self._first])
        if info.get("type") == "directory":
            raise UnreadableError("the URL names a folder (a prefix), not an object: end it with "
                                  "'/' to open the checkpoint it holds", file=url)
        size = info.get("size")
        if not isinstance(size, int) or size < 0:
            raise FetchError("the store does not say the object's size", file=url,
                             expected="a size in bytes", found=repr(size))
        self.size = size
        self._head = b""
        if size:
            if isinstance(head, Exception):
                raise head
            self._head = self._count(self._checked(0, min(HEAD_BYTES, size), head))

    def _info(self) -> dict:
        deadline, within = deadline_for(self.fs, self.timeout, 0)
        try:
            return self.fs.info(self.path, **within)
        except Exception as e:
            raise failed(self.url, e, "describe the object", deadline) from e

    def _first(self):
        """The first HEAD_BYTES (fewer if the object is smaller), or the error asking raised
        (for an empty object or a prefix, which info() decides first)."""
        from .remote import HEAD_BYTES
        try:
            return self._fetch(0, HEAD_BYTES)
        except UnreadableError as e:
            return e

    def _fetch(self, offset: int, n: int):
        deadline, within = deadline_for(self.fs, self.timeout, n)
        try:
            return self.fs.cat_file(self.path, start=offset, end=offset + n, **within)
        except Exception as e:
            raise failed(self.url, e, deadline=deadline) from e

    def _checked(self, offset: int, n: int, data) -> bytes:
        """The reply to a request for bytes offset..offset+n-1, refused unless it is n bytes."""
        from .http_reply import wrong_range
        if not isinstance(data, (bytes, bytearray)) or len(data) != n:
            found = f"{len(data):,} bytes" if isinstance(data, (bytes, bytearray)) else \
                type(data).__name__
            raise wrong_range(self.name, self.url, offset, n, found)
        return bytes(data)

    def _range(self, offset: int, n: int) -> bytes:
        return self._checked(offset, n, self._fetch(offset, n))

    def _read(self, offset: int, n: int) -> bytes:
        known = self._head[offset:offset + n]    # fetched (and counted) at open
        if len(known) == n:
            return known
        return self._count(self._range(offset, n))

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """At most CONCURRENCY ranged requests at once; ranges that touch are one request (each
        request one counted read); a failure raises the first failing request's error."""
        from .http_pool import merge_touching, scatter
        out = [self._head[o:o + n] if o + n <= len(self._head) else b"" for o, n in ranges]
        wanted = [i for i, (o, n) in enumerate(ranges) if n and o + n > len(self._head)]
        requests = merge_touching([ranges[i] for i in wanted])
        bodies = self._map(lambda r: self._range(r[0], r[1]), requests)
        return scatter(ranges, wanted, requests, bodies, out, self._count)

    @staticmethod
    def _map(fn, items: list) -> list:
        if len(items) < 2:
            return [fn(item) for item in items]
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(CONCURRENCY, len(items)),
                                thread_name_prefix="tensorloupe-store") as pool:
            futures = [pool.submit(fn, item) for item in items]
        return [f.result() for f in futures]

    def _beside(self, name: str) -> ByteSource:
        return ObjectStoreSource(sibling(self.url, name), storage_options=self.storage_options,
                                 timeout=self.timeout)


def sibling(url: str, name: str) -> str:
    """The URL of object `name` under the same prefix as `url` (its last segment replaced)."""
    return f"{url.rsplit('/', 1)[0]}/{name}"


def listing(url: str, storage_options: dict | None = None, timeout: float = 10.0) -> list[str]:
    """The names of the objects directly under a folder URL (`s3://bucket/prefix/`), sorted."""
    fs, path = filesystem(url, storage_options)
    deadline, within = deadline_for(fs, timeout, 0)
    try:
        entries = fs.ls(path, detail=True, **within)
    except FileNotFoundError as e:
        raise UnreadableError("nothing is stored under this prefix", file=url) from e
    except Exception as e:
        raise failed(url, e, "list the prefix", deadline) from e
    prefix = path.rstrip("/") + "/"
    return sorted(e["name"][len(prefix):] if e["name"].startswith(prefix) else
                  e["name"].rsplit("/", 1)[-1]
                  for e in entries if e.get("type") == "file")
