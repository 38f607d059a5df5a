// What the two Pythons (worker.mjs, compute.mjs) share: how an error reads in a reply, and how
// a runtime starts and finds our library. The wheel is imported straight from its zip
// (zipimport); a snapshot holds sys.path but not the file system, so the file is written again
// after every restore.

export const LIBRARY = "/lib/tensorloupe.whl";

export function messageOf(error) {
  return String(error && error.message || error);
}

// The reply to a request that failed outside Python's own envelope.
export function failure(kind, error) {
  return {ok: false, error: {kind, message: messageOf(error)}};
}

// loadPyodide's options for the runtime served beside this module, with `extra` (snapshot options).
export function runtimeOptions(extra = {}) {
  return {
    indexURL: new URL("./pyodide/", import.meta.url).href,
    stdout: (text) => console.log(text),
    stderr: (text) => console.warn(text),
    ...extra,
  };
}

export function addLibrary(pyodide, wheel) {
  pyodide.FS.mkdirTree("/lib");
  pyodide.FS.writeFile(LIBRARY, wheel);
  pyodide.runPython(`
import sys
if "${LIBRARY}" not in sys.path:
    sys.path.insert(0, "${LIBRARY}")
`);
}
