// "Save as safetensors…": the worker writes the open checkpoint with the CLI's writer
// (tensorloupe/web/save_ops.py), a chunk per request, and the page streams each chunk on:
// into the file the user picks (File System Access API: showSaveFilePicker, written as it comes)
// where the browser has it, else into a Blob made of the chunks, offered as a download (the
// browser keeps a Blob's parts in its own blob storage, on disk when large, not in this page's
// heap). A file whose pickle is dangerous is saved only after the user confirms.

import {download} from "./dom.js";
import {bytes} from "./format.js";

const PICKER_TYPES = [{description: "safetensors", accept: {"application/octet-stream": [".safetensors"]}}];

// Where the chunks go: a writable file, or the parts of a Blob to download.
async function sink(name) {
  if (typeof window.showSaveFilePicker === "function") {
    const handle = await window.showSaveFilePicker({suggestedName: name, types: PICKER_TYPES});
    const writable = await handle.createWritable();
    return {how: "file", write: (chunk) => writable.write(chunk), close: () => writable.close(),
            abort: () => writable.abort()};
  }
  const parts = [];
  return {how: "download", write: (chunk) => { parts.push(new Blob([chunk])); },
          close: () => download(new Blob(parts, {type: "application/octet-stream"}), name),
          abort: () => { parts.length = 0; }};
}

// Save the open checkpoint; `note` shows how it went. Resolves to "saved", "cancelled" or
// "refused" (the user did not confirm a dangerous file).
export async function saveAs(request, dangerous, note) {
  let allow = false;
  if (dangerous) {
    allow = window.confirm("The pickle of this file names a dangerous global. Its tensors are data " +
                           "and the pickle is never run: save them as safetensors?");
    if (!allow) return "refused";
  }
  const {result: plan, buffers} = await request("save_begin", {allow_dangerous: allow},
                                                {label: "Planning the safetensors file…"});
  let out;
  try {
    out = await sink(plan.file);
  } catch (error) {
    await request("save_end", {}, {quiet: true});
    if (error?.name === "AbortError") return "cancelled";    // the user closed the picker
    throw error;
  }
  try {
    await out.write(buffers[0]);
    let done = buffers[0].byteLength;
    while (done < plan.size) {
      const label = `Writing ${plan.file}: ${bytes(done)} of ${bytes(plan.size)}`;
      note.textContent = label;
      const {result, buffers: chunk} = await request("save_chunk", {}, {label});
      await out.write(chunk[0]);
      done = result.done;
    }
    await out.close();
  } catch (error) {
    await out.abort();
    await request("save_end", {}, {quiet: true}).catch(() => {});
    throw error;
  }
  const skipped = plan.skipped.length ? `; skipped ${plan.skipped.map((s) => `${s.name} (${s.why})`).join(", ")}` : "";
  note.textContent = `${out.how === "file" ? "saved" : "downloaded"} ${plan.file}: ` +
    `${plan.tensors} tensors, ${bytes(plan.size)}${skipped}`;
  note.dataset.state = "saved";
  note.dataset.how = out.how;
  return "saved";
}
