"""A second Python for the expert analysis: layers measured beside this worker.

Measuring the experts of a layer (decoding their signatures, comparing them: moe/gram.py) runs on
one core. When an analysis first runs, the worker starts another Pyodide in a worker of its own
(web/compute.mjs); once it is up, the analysis hands it a layer whenever it holds fewer than two
(redundancy.LayerHelper, HELPER_LAYERS): this worker reads the layer's signature bytes (the
reads it makes anyway) and the helper decodes and compares them with the same code
(redundancy.measure_bytes) while this worker goes on with the next layers, so both cores work.
The answer is the same bit for bit (the same bytes, the same Python), and the layers are
finished in order.

The bytes go over as they were read, with a JSON description of the windows, and the answer
comes back as raw doubles (`encode_layer`, `layer_reply`, `decode_measures`, tested in CPython),
so no value is rounded on the way. Only `PageHelper` touches JavaScript; without JSPI (it waits
for the answer with run_sync) there is no helper and the worker measures every layer itself.
"""

from __future__ import annotations

import json
from array import array
from typing import Callable

from ..sampler.gather import WindowBytes
from ..moe.gram import Gram
from ..moe.redundancy import Measures, measure_bytes


def encode_layer(windows: list[WindowBytes], per_expert: list[int]) -> tuple[bytes, str]:
    """A layer's signature bytes back to back, and what they are (JSON): each window's dtype,
    byte order, skip, count and size, and how many windows each expert has."""
    described = [[w.dtype, w.big_endian, w.skip, w.count, len(w.data)] for w in windows]
    return b"".join([w.data for w in windows]), json.dumps({"windows": described, "per_expert": per_expert})


def layer_reply(data: bytes, meta: str) -> bytes:
    """The helper's side: the Measures of the layer `encode_layer` described, as doubles: the
    n x n cosines row by row, then the n norms, the n sums and the n sums of magnitudes."""
    described = json.loads(meta)
    windows, start = [], 0
    for dtype, big_endian, skip, count, size in described["windows"]:
        windows.append(WindowBytes(dtype, big_endian, skip, count, data[start:start + size]))
        start += size
    if start != len(data):
        raise ValueError(f"the layer's {len(data):,} bytes are not the {start:,} its windows describe")
    gram, magnitudes = measure_bytes(windows, described["per_expert"])
    out = array("d", [x for row in gram.cosines for x in row])
    for values in (gram.norms, gram.sums, magnitudes):
        out.extend(array("d", values))
    return out.tobytes()


def js_layer_reply(data, meta) -> bytes:
    """layer_reply called from web/compute.mjs: `data` a Uint8Array, `meta` a string."""
    return layer_reply(data.to_bytes(), str(meta))


def decode_measures(data: bytes, n: int) -> Measures:
    values = array("d")
    values.frombytes(data)
    if len(values) != n * n + 3 * n:
        raise ValueError(f"the helper's answer holds {len(values):,} values, not {n * n + 3 * n:,}")
    cosines = [values[i * n:(i + 1) * n].tolist() for i in range(n)]
    square = n * n
    return Measures(Gram(cosines, values[square:square + n].tolist(), values[square + n:square + 2 * n].tolist()),
                    values[square + 2 * n:].tolist())


class PageHelper:
    """The second Pyodide (web/compute.mjs), through the worker's JavaScript. `wait_for` awaits a
    JavaScript promise (pyodide.ffi.run_sync; a parameter for the tests)."""

    def __init__(self, js, wait_for: Callable | None = None):
        self._js = js
        self._wait_for = wait_for
        js.tensorloupeHelperStart()          # boots it (once per page): ready a few seconds later

    def ready(self) -> bool:
        return bool(self._js.tensorloupeHelperReady())

    def start(self, windows: list[WindowBytes], per_expert: list[int]) -> "Handed":
        data, meta = encode_layer(windows, per_expert)
        answer = self._js.tensorloupeHelperLayer(_to_js(memoryview(data)), meta)
        return Handed(self, windows, per_expert, answer)

    def _await(self, promise):
        if self._wait_for is not None:
            return self._wait_for(promise)
        from pyodide.ffi import run_sync
        return run_sync(promise)


class Handed:
    """A layer the helper holds (redundancy.Handover). `handed` is worker.mjs's
    {answer: a promise of the answer's bytes, settled: whether it has come}."""

    def __init__(self, helper: PageHelper, windows: list[WindowBytes], per_expert: list[int], handed):
        self._helper, self._windows, self._per_expert, self._handed = helper, windows, per_expert, handed

    def done(self) -> bool:
        return bool(self._handed.settled)

    def __call__(self) -> Measures:
        try:
            return decode_measures(self._helper._await(self._handed.answer).to_bytes(), len(self._per_expert))
        except Exception:
            # The helper failed (its worker died, or its answer is wrong): this layer is
            # measured here, from the same bytes, so the analysis is whole and the same.
            return measure_bytes(self._windows, self._per_expert)


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
