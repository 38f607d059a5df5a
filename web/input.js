// How files reach the page: the two pickers (files, folder), drag and drop anywhere (a dropped
// folder is walked for every file under it), and files opened with the installed app from the
// desktop (manifest file_handlers). Each hands `open(files)` File objects, or {file, rel, folder}
// for files found in a dropped folder, and {loose: true} when they are loose files (dropped, or
// picked with "Open files…"), not a folder's.

import {$} from "./dom.js";

export function listenForFiles({open, failed}) {
  for (const id of ["file-input", "folder-input"]) {
    $(id).addEventListener("change", (event) => {
      const input = event.target;
      open(input.files, {loose: id === "file-input"});
      input.value = "";
    });
  }

  let dragDepth = 0;
  const carriesFiles = (event) => [...(event.dataTransfer?.types || [])].includes("Files");
  window.addEventListener("dragenter", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    dragDepth += 1;
    $("drop-overlay").hidden = false;
  });
  window.addEventListener("dragover", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
  });
  window.addEventListener("dragleave", () => {
    dragDepth = Math.max(0, dragDepth - 1);
    if (!dragDepth) $("drop-overlay").hidden = true;
  });
  window.addEventListener("drop", (event) => {
    event.preventDefault();
    dragDepth = 0;
    $("drop-overlay").hidden = true;
    const transfer = event.dataTransfer;
    if (!transfer) return;
    // The entries must be taken now: a drop's items are gone once this handler returns.
    const entries = [...transfer.items].filter((item) => item.kind === "file")
      .map((item) => item.webkitGetAsEntry?.()).filter(Boolean);
    if (entries.some((entry) => entry.isDirectory)) {
      droppedFiles(entries).then(open, (error) => failed("Could not read the dropped folder.", error.message));
    } else if (transfer.files.length) {
      open(transfer.files, {loose: true});
    }
  });

  if ("launchQueue" in window) {
    window.launchQueue.setConsumer(async (params) => {
      if (params.files?.length) open(await Promise.all(params.files.map((handle) => handle.getFile())));
    });
  }
}

// Every file under the dropped entries, with its path in the drop ("/folder/sub/name").
async function droppedFiles(entries) {
  const out = [];
  const walk = async (entry, inFolder) => {
    if (entry.isFile) {
      const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
      out.push({file, rel: entry.fullPath, folder: inFolder});
      return;
    }
    const reader = entry.createReader();
    const children = [];
    for (;;) {   // readEntries answers in batches (100 in Chromium) until an empty one
      const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
      if (!batch.length) break;
      children.push(...batch);
    }
    children.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const child of children) await walk(child, true);
  };
  for (const entry of entries) await walk(entry, false);
  return out;
}
