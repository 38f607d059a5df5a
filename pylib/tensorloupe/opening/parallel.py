"""Run independent waits side by side: opening every shard of a remote checkpoint, or the Range
requests of one vectored read, each mostly waiting on a server.

Threads where the interpreter has them (CPython); one after the other where it has not (Pyodide,
whose page-side reads are made concurrent by the worker's JavaScript instead). Results come back in
the order asked, and a failure raises the error of the first failing item in that order, so the
message is the same as the one-at-a-time code gives.
"""

from __future__ import annotations

import sys
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_WORKERS = 16
THREADS = sys.platform != "emscripten"


def map_parallel(fn: Callable[[T], R], items: Iterable[T], workers: int = MAX_WORKERS) -> list[R]:
    items = list(items)
    if not THREADS or workers < 2 or len(items) < 2:
        return [fn(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor
    results: list = [None] * len(items)
    errors: list = [None] * len(items)

    def run(i: int) -> None:
        try:
            results[i] = fn(items[i])
        except BaseException as e:  # re-raised below, in input order
            errors[i] = e

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        list(pool.map(run, range(len(items))))
    for error in errors:
        if error is not None:
            raise error
    return results
