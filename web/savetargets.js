// Where "Save as" writes, chosen in this order:
//   folder  a directory handle (showDirectoryPicker): a shard set and its index, file by file;
//   file    the file showSaveFilePicker gives, written as it comes;
//   stream  a download the service worker (sw.js) answers with a stream fed chunk by chunk from
//           here through a MessageChannel, one chunk at a time (the StreamSaver.js technique):
//           neither this tab nor the service worker holds more than a chunk or two, whatever the
//           file's size;
//   blob    a Blob made of the chunks, downloaded at the end: the fallback when no service worker
//           controls the page (the browser keeps a Blob's parts in its blob storage, which grows
//           with the file).
// A target is picked once (the user's picker), then opened for each attempt: open(plan) gives a
// writer {write(file, chunk), close(), abort(), interrupt?()}; abort removes what the attempt
// wrote; interrupt ends a write that is waiting (the stream's).

import {download, el} from "./dom.js";

const PICKER_TYPES = [{description: "safetensors", accept: {"application/octet-stream": [".safetensors"]}}];
const STREAM_PATH = "__save__/";          // sw.js answers these addresses (SAVE_PATH there)

export const canPickFolder = () => typeof window.showDirectoryPicker === "function";
const canPickFile = () => typeof window.showSaveFilePicker === "function";
const streamWorker = () => navigator.serviceWorker?.controller || null;

// The target for a save of `name` (one file) or into a folder; rejects with AbortError when the
// user closes a picker.
export async function pickTarget(name, folder) {
  if (folder) return folderTarget(await window.showDirectoryPicker({mode: "readwrite"}));
  if (canPickFile()) return fileTarget(await window.showSaveFilePicker({suggestedName: name, types: PICKER_TYPES}));
  const worker = streamWorker();
  return worker ? streamTarget(worker) : blobTarget();
}

function fileTarget(handle) {
  return {how: "file", open: async () => {
    const writable = await handle.createWritable();   // empty; the file changes only on close
    return {write: (file, chunk) => writable.write(chunk), close: () => writable.close(),
            abort: () => writable.abort()};
  }};
}

// Files one after another; each is the browser's swap file until closed, and the files an
// aborted attempt closed already are removed.
function folderTarget(dir) {
  return {how: "folder", open: async (plan) => {
    const closed = [];
    let current = null;
    let index = -1;
    const finish = async () => {
      if (!current) return;
      await current.close();
      closed.push(plan.files[index].name);
      current = null;
    };
    return {
      async write(file, chunk) {
        if (file !== index) {
          await finish();
          index = file;
          current = await (await dir.getFileHandle(plan.files[file].name, {create: true})).createWritable();
        }
        await current.write(chunk);
      },
      close: finish,
      async abort() {
        await current?.abort();
        current = null;
        for (const name of closed.splice(0)) await dir.removeEntry(name).catch(() => {});
      },
    };
  }};
}

let frames = [];   // the hidden frames of earlier streamed downloads, removed by the next save

// The service worker's stream: it asks for a chunk ("pull") whenever its queue is empty; write
// waits for that ask, so a chunk leaves this tab only as fast as the download takes it.
function streamTarget(worker) {
  return {how: "stream", open: async (plan) => {
    for (const frame of frames.splice(0)) frame.remove();
    const {port1: port, port2} = new MessageChannel();
    const id = crypto.randomUUID();
    let asked = 0;
    let wake = null;
    let stopped = null;
    const registered = new Promise((resolve) => {
      port.onmessage = ({data}) => {
        if (data.type === "registered") resolve();
        else if (data.type === "pull") asked += 1;
        else if (data.type === "cancelled") stopped = new DOMException("the download was cancelled", "AbortError");
        wake?.();
      };
    });
    const {name, size} = plan.files[0];
    worker.postMessage({type: "save-stream", id, name, size}, [port2]);
    await registered;
    const frame = el("iframe", {hidden: true, src: `${STREAM_PATH}${id}/${encodeURIComponent(name)}`});
    document.body.append(frame);
    frames.push(frame);
    return {
      async write(file, chunk) {
        while (!asked && !stopped) await new Promise((resolve) => { wake = resolve; });
        if (stopped) throw stopped;
        asked -= 1;
        port.postMessage({type: "chunk", chunk}, [chunk.buffer]);
        worker.postMessage({type: "keepalive"});   // a message event keeps the worker awake
      },
      async close() { port.postMessage({type: "end"}); },
      async abort() { port.postMessage({type: "abort"}); },   // the worker closes the port
      // a cancel while write waits for the worker's ask (a stalled download): stop waiting
      interrupt() {
        stopped = stopped || new DOMException("the save was cancelled", "AbortError");
        wake?.();
      },
    };
  }};
}

function blobTarget() {
  return {how: "blob", open: async (plan) => {
    const parts = [];
    return {write: (file, chunk) => { parts.push(new Blob([chunk])); },
            close: () => download(new Blob(parts, {type: "application/octet-stream"}), plan.files[0].name),
            abort: () => { parts.length = 0; }};
  }};
}
