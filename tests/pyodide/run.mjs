// Run Python scripts inside Pyodide under Node, with host folders mounted through NODEFS.
//
//   node tests/pyodide/run.mjs SPEC.json
//
// SPEC: {"mounts": {"/host/pylib": "/abs/path/pylib", ...}, "path": ["/host/pylib", ...],
//        "runs": [{"script": "/host/tests/pyodide/parity.py", "argv": ["/host/out/x.json", ...]}]}
// The Pyodide runtime is the npm package pinned in package.json: the one the browser app serves.

import {readFileSync} from "node:fs";
import {loadPyodide} from "../../node_modules/pyodide/pyodide.mjs";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const started = performance.now();
const pyodide = await loadPyodide({
  stdout: () => {},
  stderr: (text) => process.stderr.write(`${text}\n`),
});
for (const [target, source] of Object.entries(spec.mounts)) {
  pyodide.FS.mkdirTree(target);
  pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, {root: source}, target);
}
pyodide.globals.set("spec_json", JSON.stringify(spec));
const timings = {boot_ms: Math.round(performance.now() - started)};
try {
  pyodide.runPython(`
import json, runpy, sys
spec = json.loads(spec_json)
sys.path[:0] = spec["path"]
for run in spec["runs"]:
    sys.argv = [run["script"], *run["argv"]]
    runpy.run_path(run["script"], run_name="__main__")
`);
} catch (error) {
  process.stderr.write(`${error.message}\n`);
  process.exit(1);
}
timings.total_ms = Math.round(performance.now() - started);
process.stdout.write(`${JSON.stringify({ok: true, python: pyodide.version, timings})}\n`);
