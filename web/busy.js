// The status in the top bar: Python's boot stages, then "Ready", or the label of any request
// slower than BUSY_DELAY_MS (quick ones never flash), with the busy bar under the top bar.

import {$} from "./dom.js";

const BUSY_DELAY_MS = 200;

const timers = new Map();
const shown = new Map();          // request id -> label, in the order they became slow
let booting = "Starting Python…";
let failed = false;

function render() {
  const status = $("status");
  const labels = [...shown.values()];
  let state = "idle";
  let text = "Ready";
  if (failed) [state, text] = ["failed", "Python failed to start"];
  else if (booting) [state, text] = ["booting", booting];
  else if (labels.length) [state, text] = ["busy", labels[labels.length - 1]];
  status.dataset.state = state;
  $("status-text").textContent = text;
  $("busy-bar").hidden = state === "idle" || state === "failed";
}

export const busy = {
  render,
  start(id, label) {
    timers.set(id, setTimeout(() => {
      timers.delete(id);
      shown.set(id, label);
      render();
    }, BUSY_DELAY_MS));
  },
  stop(id) {
    clearTimeout(timers.get(id));
    timers.delete(id);
    if (shown.delete(id)) render();
  },
  // Boot: a stage's message, then ready, or failed for good.
  stage(message) {
    booting = message;
    render();
  },
  ready() {
    booting = null;
    render();
  },
  failed() {
    booting = null;
    failed = true;
    render();
  },
};
