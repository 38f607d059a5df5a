// A worker job run from a tab's card (Experts' redundancy analysis, Health, Compare), with the
// same UI on each. The tab owns the card, its run button and what the result shows; a JobRun
// owns the rest:
//
//   new JobRun(app, prefix, {unit, what, bytes})
//       app     the page's ctx (panels.js): request and cancel
//       unit    what the job counts ("experts"): "3 of 64 experts · 1.2 MiB read"
//       what(p, count)  the progress text's first part, given `count`, the default "<done> of <total> <unit>"
//       bytes   false: the card records no bytesRead and the Cancelled line names no bytes
//   reset()     start over (another file): bumps `generation`, cancels a running job and forgets
//               it, and makes a fresh `progressRow` and `outcome` for the tab to place in its card
//   generation  compare it after any await: a reply from before a reset is for an older file
//   running     a job is running (a second run is refused)
//   cancel()    cancel the running job, if any (the worker drops it: job_cancel, web/jobs.py)
//   run(op, args, {card, button, finished(result, seconds)})
//       ask the worker for job `op`. Meanwhile `button` is disabled and the progress row shows
//       (#<prefix>-progress, #<prefix>-progress-text, #<prefix>-cancel), and the card's dataset
//       has state "running" and done/total(/bytesRead) of the last progress. Then the outcome
//       (#<prefix>-outcome) is finished()'s line and the state "done"; or "Cancelled after …" and
//       "cancelled"; or the error's message and "failed". Progress and replies from before a reset
//       are ignored.

import {el} from "./dom.js";
import {bytes, grouped} from "./format.js";

export class JobRun {
  constructor(app, prefix, {unit, what, bytes: recordBytes = true}) {
    Object.assign(this, {app, prefix, unit, recordBytes, generation: 0, runId: null});
    this.what = what || ((p, count) => count);
  }

  reset() {
    this.generation += 1;
    this.cancel();
    this.runId = null;
    const p = this.prefix;
    this.progress = el("progress", {id: `${p}-progress`, max: "1", value: "0"});
    this.progressText = el("span", {id: `${p}-progress-text`, class: "small"});
    this.progressRow = el("div", {class: "run-row", id: `${p}-progress-row`, hidden: true}, this.progress, this.progressText,
      el("button", {type: "button", class: "button subtle", id: `${p}-cancel`, text: "Cancel", onclick: () => this.cancel()}));
    this.outcome = el("p", {class: "small muted", id: `${p}-outcome`});
  }

  get running() {
    return Boolean(this.runId);
  }

  cancel() {
    if (this.runId) this.app.cancel(this.runId);
  }

  async run(op, args, {card, button, finished}) {
    if (this.runId) return;
    const mine = this.generation;
    const {progress, progressText, progressRow, outcome} = this;
    const started = performance.now();
    let id = null;
    button.disabled = true;
    progressRow.hidden = false;
    progress.value = 0;
    outcome.textContent = "";
    progressText.textContent = "starting…";
    card.dataset.state = "running";
    try {
      const {result} = await this.app.request(op, args, {
        quiet: true,
        onId: (number) => { this.runId = id = number; },
        onProgress: (p) => {
          if (mine !== this.generation) return;
          progress.value = p.total ? p.done / p.total : 0;
          progressText.textContent = `${this.what(p, `${grouped(p.done)} of ${grouped(p.total)} ${this.unit}`)} · ${bytes(p.bytes_read)} read`;
          Object.assign(card.dataset, {done: String(p.done), total: String(p.total)});
          if (this.recordBytes) card.dataset.bytesRead = String(p.bytes_read);
        },
      });
      if (mine !== this.generation) return;
      outcome.textContent = finished(result, (performance.now() - started) / 1000);
      card.dataset.state = "done";
    } catch (error) {
      if (mine !== this.generation) return;
      const cancelled = error.kind === "Cancelled";
      const p = card.dataset;
      const read = this.recordBytes ? ` (${bytes(p.bytesRead || 0)} read)` : "";
      outcome.textContent = cancelled ? `Cancelled after ${grouped(p.done || 0)} of ${grouped(p.total || 0)} ${this.unit}${read}.`
        : error.message;
      card.dataset.state = cancelled ? "cancelled" : "failed";
    } finally {
      // A reset may have started another run meanwhile: its id is not this one's to forget.
      if (this.runId === id) this.runId = null;
      if (mine === this.generation) {
        button.disabled = false;
        progressRow.hidden = true;
      }
    }
  }
}
