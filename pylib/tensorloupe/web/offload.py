"""A second Python for the expert analysis: a layer's similarities computed beside this worker.

Comparing the experts of a layer (gram.py) is ~75 % of the analysis in the page, and it runs on
one core. When an analysis first runs, the worker starts another Pyodide in a worker of its own
(web/compute.mjs); once it is up, the analysis hands it a layer's signatures whenever it holds
fewer than two (redundancy.GramHelper, HELPER_LAYERS): it computes that layer's Gram with the
same code while this worker measures and compares the next layers, so both cores work. The
answer is the same bit for bit (the same integers, the same Python), and the layers are
finished in order.

Signatures go over as raw doubles and the Gram comes back as raw doubles (`encode_vectors`,
`gram_reply`, `decode_gram`, tested in CPython), so no value is rounded on the way. Only
`PageHelper` touches JavaScript; without JSPI (it waits for the answer with run_sync) there is
no helper and the worker compares every layer itself, as before.
"""

from __future__ import annotations

from array import array
from typing import Callable

from ..gram import Gram, gram_steps


def encode_vectors(vectors: list[list[float]]) -> tuple[bytes, list[int]]:
    """The vectors' doubles back to back (native byte order: both sides are wasm), and their lengths."""
    flat = array("d")
    for v in vectors:
        flat.extend(array("d", v))
    return flat.tobytes(), [len(v) for v in vectors]


def gram_reply(data: bytes, lengths: list[int]) -> bytes:
    """The helper's side: the Gram of the vectors `encode_vectors` made, as doubles: the n x n
    cosines row by row, then the n norms, then the n sums."""
    flat = array("d")
    flat.frombytes(data)
    vectors, start = [], 0
    for n in lengths:
        vectors.append(flat[start:start + n].tolist())
        start += n
    *_, gram = gram_steps(vectors)
    out = array("d", [x for row in gram.cosines for x in row])
    out.extend(array("d", gram.norms))
    out.extend(array("d", gram.sums))
    return out.tobytes()


def js_gram_reply(data, lengths) -> bytes:
    """gram_reply called from web/compute.mjs: `data` a Uint8Array, `lengths` an Array."""
    return gram_reply(data.to_bytes(), [int(n) for n in lengths.to_py()])


def decode_gram(data: bytes, n: int) -> Gram:
    values = array("d")
    values.frombytes(data)
    if len(values) != n * n + 2 * n:
        raise ValueError(f"the helper's answer holds {len(values)} values, not {n * n + 2 * n}")
    cosines = [values[i * n:(i + 1) * n].tolist() for i in range(n)]
    return Gram(cosines, values[n * n:n * n + n].tolist(), values[n * n + n:].tolist())


class PageHelper:
    """The second Pyodide (web/compute.mjs), through the worker's JavaScript. `wait_for` awaits a
    JavaScript promise (pyodide.ffi.run_sync; a parameter for the tests)."""

    def __init__(self, js, wait_for: Callable | None = None):
        self._js = js
        self._wait_for = wait_for
        js.tensorloupeHelperStart()          # boots it (once per page): ready a few seconds later

    def ready(self) -> bool:
        return bool(self._js.tensorloupeHelperReady())

    def start(self, vectors: list[list[float]]) -> "Handed":
        data, lengths = encode_vectors(vectors)
        return Handed(self, vectors, self._js.tensorloupeHelperGram(_to_js(memoryview(data)), _to_js(lengths)))

    def _await(self, promise):
        if self._wait_for is not None:
            return self._wait_for(promise)
        from pyodide.ffi import run_sync
        return run_sync(promise)


class Handed:
    """A layer the helper holds (redundancy.Handover). `handed` is worker.mjs's
    {answer: a promise of the Gram's bytes, settled: whether it has come}."""

    def __init__(self, helper: PageHelper, vectors: list[list[float]], handed):
        self._helper, self._vectors, self._handed = helper, vectors, handed

    def done(self) -> bool:
        return bool(self._handed.settled)

    def __call__(self) -> Gram:
        try:
            return decode_gram(self._helper._await(self._handed.answer).to_bytes(), len(self._vectors))
        except Exception:
            # The helper failed (its worker died, or its answer is wrong): this layer is
            # compared here, so the analysis is still whole and still the same numbers.
            *_, gram = gram_steps(self._vectors)
            return gram


def _to_js(value):
    try:
        from pyodide.ffi import to_js
    except ImportError:       # CPython (tests)
        return value
    return to_js(value)


def page_helper() -> PageHelper | None:
    """The helper where this worker can wait for it (Pyodide with JSPI, entered with
    callPromising, and the page did not turn it off: `?helper=0`); else None."""
    try:
        from pyodide.ffi import can_run_sync
    except ImportError:       # CPython
        return None
    if not can_run_sync():
        return None
    import js
    if not getattr(js, "tensorloupeHelperStart", None) or not js.tensorloupeHelperAllowed():
        return None
    return PageHelper(js)
