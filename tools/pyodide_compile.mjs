// Compile Python sources to bytecode with Pyodide's own interpreter, for build.py: the wheel then
// carries .pyc files Pyodide loads without compiling (compiling is most of an import there, and
// the host's CPython is another version, whose bytecode Pyodide cannot load).
//
//   node tools/pyodide_compile.mjs < {"files": {"tensorloupe/x.py": "source", ...}}
//   -> {"cache_tag": "cpython-314", "pycs": {"tensorloupe/x.py": "<base64 .pyc>", ...}}
//
// The .pyc files are unchecked-hash ones (PEP 552): valid whatever the files' times, and only
// ever shipped next to the exact sources they were compiled from (one wheel).

import {loadPyodide} from "../node_modules/pyodide/pyodide.mjs";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const pyodide = await loadPyodide({stdout: () => {}, stderr: (text) => process.stderr.write(`${text}\n`)});
pyodide.globals.set("request_json", Buffer.concat(chunks).toString("utf8"));
process.stdout.write(pyodide.runPython(`
import base64, importlib.util, json, sys
from importlib._bootstrap_external import _code_to_hash_pyc

def pyc(name, text):
    data = text.encode("utf-8")
    code = compile(data, name, "exec", dont_inherit=True)
    return base64.b64encode(_code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)).decode()

files = json.loads(request_json)["files"]
json.dumps({"cache_tag": sys.implementation.cache_tag,
            "pycs": {name: pyc(name, text) for name, text in sorted(files.items())}})
`));
