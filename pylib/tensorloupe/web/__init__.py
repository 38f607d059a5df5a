"""The browser app's Python side: message handlers the Web Worker (web/worker.mjs) calls.

The worker mounts dropped files with Pyodide's WORKERFS and calls `dispatch(op, args_json)`; each
handler is a thin call into the library that returns JSON-able data (and, for pixels and values,
binary buffers the worker transfers to the page without copying). The handlers are plain Python:
they run, and are tested, in CPython too.
"""

from .handlers import Session, dispatch, session

__all__ = ["Session", "dispatch", "session"]
