// The second Python of the expert analysis (tensorloupe/web/offload.py: why): a Pyodide of its
// own that measures a layer (tensorloupe.moe.redundancy.measure_bytes) while the main worker goes on
// with the next ones. Started by worker.mjs when an analysis first runs; it never sees a file,
// only the bytes of the layers it is sent.
//
// worker.mjs -> here: {type: "boot", wheel: Uint8Array, snapshot}  the library, as worker.mjs has
//                                                    it, and its memory snapshot (or null)
//                     {id, data: ArrayBuffer, meta: JSON}  a layer's signature bytes (offload.encode_layer)
// here -> worker.mjs: {type: "ready", booted: "snapshot" | "fresh"} / {type: "failed", message}
//                     {id, data: ArrayBuffer} (the answer's doubles, transferred) / {id, error}

import {addLibrary, messageOf, runtimeOptions} from "./runtime.mjs";

let pyodide = null;
let reply = null;     // tensorloupe.web.offload.js_layer_reply
const waiting = [];   // layers that came before the boot finished

self.onmessage = async ({data: message}) => {
  if (message.type === "boot") return boot(message.wheel, message.snapshot);
  if (!reply) return waiting.push(message);
  answer(message);
};

async function boot(wheel, snapshot) {
  try {
    const {loadPyodide} = await import("./pyodide/pyodide.mjs");
    let booted = "fresh";
    if (snapshot) {
      // The main worker's snapshot (worker.mjs): the runtime with the library imported.
      try {
        pyodide = await loadPyodide(runtimeOptions({_loadSnapshot: snapshot}));
        booted = "snapshot";
      } catch (error) {
        console.warn(`the stored snapshot did not restore here (${messageOf(error)}): booting from scratch`);
        pyodide = null;
      }
    }
    if (!pyodide) pyodide = await loadPyodide(runtimeOptions());
    addLibrary(pyodide, wheel);
    reply = pyodide.pyimport("tensorloupe.web.offload").js_layer_reply;
    self.postMessage({type: "ready", booted});
    for (const message of waiting.splice(0)) answer(message);
  } catch (error) {
    self.postMessage({type: "failed", message: messageOf(error)});
  }
}

function answer({id, data, meta}) {
  try {
    const measured = reply(new Uint8Array(data), meta);
    const bytes = measured.toJs();
    measured.destroy();
    const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
    self.postMessage({id, data: buffer}, [buffer]);
  } catch (error) {
    self.postMessage({id, error: messageOf(error)});
  }
}
