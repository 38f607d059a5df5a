// "Save as safetensors…": the worker writes the open checkpoint with the CLI's engine
// (tensorloupe/web/save_ops.py), a chunk per request, and the page streams each chunk on to the
// target the user picked (savetargets.js). Between chunks the page checks its cancel flag: a
// cancel aborts the target (nothing is left: the picked file keeps what it held, a folder loses
// the files this save wrote, a streamed download fails) and ends the worker's write. A tensor
// whose bytes fail to read makes the worker answer "restart": the attempt is aborted and the save
// starts again without that tensor (its reason in __metadata__ "skipped", as `convert` does).
// A file whose pickle is dangerous is saved only after the user confirms.

import {bytes} from "./format.js";
import {pickTarget} from "./savetargets.js";

// What the note says of each target (savetargets.js), so that the path taken is visible.
const HOW = {folder: ["saved into the folder", ""], file: ["saved", ""],
             stream: ["downloaded", " (streamed by the service worker)"],
             blob: ["downloaded", " (held in this tab until the end: no service worker controls the page)"]};

export class Cancelled extends Error {}

// One save; `cancel()` stops it between two chunks.
export class Save {
  constructor(request) {
    this.request = request;
    this.cancelled = false;
    this.out = null;          // the writer of the attempt under way
  }

  cancel() {
    this.cancelled = true;
    this.out?.interrupt?.();
  }

  // Resolves to {how, plan, failed} (failed: the tensors a restart left out) or "refused" (the user did not confirm a dangerous file)
  // or "cancelled" (a picker closed, or cancel()); `options` are save_begin's (save_ops.py).
  async run(options, dangerous, note) {
    let allow = false;
    if (dangerous) {
      allow = window.confirm("The pickle of this file names a dangerous global. Its tensors are data " +
                             "and the pickle is never run: save them as safetensors?");
      if (!allow) return "refused";
    }
    const args = {...options, allow_dangerous: allow};
    let plan = await this.begin(args);
    let target;
    try {
      target = await pickTarget(plan.files[0].name, Boolean(options.folder));
    } catch (error) {
      await this.request("save_end", {}, {quiet: true});
      if (error?.name === "AbortError") return "cancelled";    // the user closed the picker
      throw error;
    }
    const failed = [];
    for (;;) {
      const outcome = await this.attempt(target, plan, note);
      if (outcome === "cancelled") return "cancelled";
      if (outcome === "done") return {how: target.how, plan, failed};
      failed.push(outcome);                   // {name, why}: again without it
      plan = await this.begin({...args, retry: true});
    }
  }

  begin(args) {
    return this.request("save_begin", args, {label: "Planning the safetensors file…"}).then((r) => r.result);
  }

  // One pass over the plan's files: "done", "cancelled", or the tensor whose read failed.
  async attempt(target, plan, note) {
    const out = await target.open(plan);
    this.out = out;
    try {
      let done = 0;
      while (done < plan.size) {
        if (this.cancelled) throw new Cancelled();
        const label = `Writing ${plan.files.length > 1 ? `${plan.files.length} files` : plan.files[0].name}: ` +
                      `${bytes(done)} of ${bytes(plan.size)}`;
        note.textContent = label;
        note.dataset.progress = String(done);
        const {result, buffers} = await this.request("save_chunk", {}, {label, quiet: true});
        if (result.restart) {
          await out.abort();
          return result.failed;
        }
        if (this.cancelled) throw new Cancelled();
        await out.write(result.file, buffers[0]);
        done = result.done;
      }
      await out.close();
      return "done";
    } catch (error) {
      await out.abort();
      await this.request("save_end", {}, {quiet: true}).catch(() => {});
      if (error instanceof Cancelled || error?.name === "AbortError") return "cancelled";
      throw error;
    }
  }
}

// What the note says of a finished save.
export function savedText(saved) {
  const {how, plan} = saved;
  const names = plan.files.length > 1 ? `${plan.files.length} files (${plan.files.map((f) => f.name).join(", ")})` : plan.files[0].name;
  const skipped = plan.skipped.length ? `; skipped ${plan.skipped.map((s) => `${s.name} (${s.why})`).join(", ")}` : "";
  const pruned = plan.dropped ? `; experts dropped: ${Object.entries(plan.dropped).map(([l, e]) => `layer ${l}: ${e.join(", ")}`).join("; ")}` +
    (plan.config_left_out ? " (config.json not written: save into a folder for it)" : "") : "";
  const [verb, path] = HOW[how];
  return `${verb} ${names}: ${plan.tensors} tensors, ${bytes(plan.size)}${path}${skipped}${pruned}`;
}
