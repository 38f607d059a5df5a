// The Summary's "Save as safetensors…" card: the options `tensorloupe convert|extract|prune` has
// (dtype, Hugging Face names for GGUF, a regex, experts to drop, a shard size), the Save and Cancel
// buttons and the note that says how it went (#save-note: data-state saving | saved | cancelled |
// failed | idle, data-how folder | file | stream | blob). The worker applies the options with the
// CLI's engine (writing/options.py).

import {el} from "./dom.js";
import {Save, savedText} from "./saveas.js";
import {canPickFolder} from "./savetargets.js";

const DTYPES = [["", "as stored (quantised: float32)"], ["F32", "F32"], ["F16", "F16"], ["BF16", "BF16"]];
const NO_FOLDER = "this browser cannot write into a folder (no showDirectoryPicker): one file";

// {controls, note} for the open checkpoint `summary`; request: ctx.request.
export function saveForm(summary, request) {
  const gguf = summary.format.startsWith("gguf");
  const dtype = el("select", {id: "save-dtype", "aria-label": "dtype"},
    DTYPES.map(([value, text]) => el("option", {value, text})));
  const hfNames = el("input", {type: "checkbox", id: "save-hf-names", disabled: !gguf,
                               title: gguf ? "" : "only a GGUF file has names to map back"});
  const match = el("input", {type: "text", id: "save-match", placeholder: "all tensors, or a regex", spellcheck: "false"});
  const drop = el("input", {type: "text", id: "save-drop", placeholder: "L:E,… (no experts)", disabled: true, spellcheck: "false"});
  const recommended = el("button", {type: "button", class: "button subtle", id: "save-recommended", disabled: true,
                                    text: "Experts tab's recommendation"});
  const shardSize = el("input", {type: "text", id: "save-shard-size", placeholder: "one file, or e.g. 500MB", spellcheck: "false",
                                 disabled: !canPickFolder(), title: canPickFolder() ? "" : NO_FOLDER});
  const note = el("p", {class: "muted", id: "save-note", dataset: {state: "idle"}});
  const cancel = el("button", {type: "button", class: "button subtle", id: "save-cancel", text: "Cancel", hidden: true});
  const dangerous = Boolean(summary.extras.safety?.dangerous?.length || summary.extras.safety?.torch_reading);

  recommended.addEventListener("click", async () => {
    const threshold = document.getElementById("moe-threshold-range")?.value;   // what the Experts tab shows
    try {
      const {result} = await request("save_recommended", threshold ? {threshold: Number(threshold)} : {});
      drop.value = result.drop;
    } catch (error) {
      note.textContent = error.message;
    }
  });

  const options = () => {
    const out = {dtype: dtype.value};
    const pruning = drop.value.trim();
    if (pruning) out.drop = pruning;      // a prune takes the whole checkpoint (as `prune` does)
    else Object.assign(out, {hf_names: hfNames.checked && gguf, match: match.value.trim()});
    const size = shardSize.value.trim();
    if (size && canPickFolder()) Object.assign(out, {shard_size: size});
    if (canPickFolder() && (size || pruning)) out.folder = true;    // a prune's config.json goes with it
    return out;
  };

  const save = async () => {
    const run = new Save(request);
    cancel.hidden = false;
    cancel.onclick = () => run.cancel();
    note.dataset.state = "saving";
    delete note.dataset.how;
    delete note.dataset.progress;
    try {
      const saved = await run.run(options(), dangerous, note);
      if (typeof saved === "string") {
        note.textContent = saved === "cancelled" ? "cancelled, nothing written" : "not saved";
        note.dataset.state = saved === "cancelled" ? "cancelled" : "idle";
      } else {
        const one = shardSize.value.trim() && !canPickFolder() ? ` (${NO_FOLDER})` : "";
        note.textContent = savedText(saved) + one;
        note.dataset.how = saved.how;
        note.dataset.state = "saved";
      }
    } catch (error) {
      note.textContent = `not saved: ${error.message}`;
      note.dataset.state = "failed";
    } finally {
      cancel.hidden = true;
    }
  };

  const label = (text, input) => el("label", {class: "save-option"}, el("span", {text}), input);
  const controls = el("div", {class: "save-options", id: "save-options"},
    label("dtype", dtype), label("Hugging Face names", hfNames), label("tensors", match),
    label("drop experts", drop), recommended, label("shard size", shardSize),
    el("div", {class: "button-row"},
      el("button", {type: "button", class: "button", id: "save-safetensors", text: "Save as safetensors…",
                    title: "written here with the CLI's engine (the pickle is never run)", onclick: save}),
      cancel));
  return {controls, note};
}

// The model's MoE structure has arrived (model_details): the prune options work if it has experts.
export function showExperts(model) {
  const detected = Boolean(model.moe?.detected);
  for (const id of ["save-drop", "save-recommended"]) {
    const input = document.getElementById(id);
    if (input) input.disabled = !detected;
  }
  const drop = document.getElementById("save-drop");
  if (drop && detected) drop.placeholder = "L:E,… (layer:expert pairs)";
}
