// Every panel of the page is a view module built one way, and this module mounts them: the
// Outline in the sidebar, and one tab per entry of TABS. A new tab is one module that follows
// the contract below and one entry in TABS (its button and panel are made here).
//
// A view module exports:
//   id                  its name: the tab button is #tab-<id>, the panel #panel-<id>
//   title               the tab's label
//   mount(container, ctx)
//                       build the panel's DOM inside `container`, once, at page load. ctx is the page:
//                         ctx.request(op, args, options), ctx.cancel(id)   ask the worker (worker-client.js)
//                         ctx.selectTensor(name, {expert, switchTab})      show a tensor everywhere
//                         ctx.palette   {rgba: Uint8Array, levels}: the colormap, once Python is ready
//                                       (always before the first show)
//                         ctx.io        the bytes read so far ({bytes_read, reads, size}) or null
//                         ctx.modelFile()  the open checkpoint's name (a shard set's own name)
//                         ctx.entries() the opened files other than the current one (app.js's list
//                                       entries: {name, paths, remote, ...}), e.g. to compare with
//   show(model)         a checkpoint was opened (model.js: the decoded payload): start over for it
// and may export:
//   available(model)    false hides the tab for this model (Experts: only for MoE checkpoints)
//   select(tensor, {expert})   a tensor was chosen, on any panel (tensor: a model.js record)
//   details(model)      the model's MoE structure and architecture block arrived (model.js
//                       withDetails; show() ran without them): draw what depends on them
//   relayout()          the panel became visible or changed size: redraw what depends on it
//   io(io)              the bytes read so far changed
//   open(entry)         an entry of the page's file list was handed to this tab (Compare: as B,
//                       compared at once; the page's drop of two files)
//
// Views talk to each other only through ctx (selectTensor), never directly.

import * as compare from "./compare.js";
import {$, el} from "./dom.js";
import * as experts from "./experts.js";
import * as health from "./health.js";
import * as outline from "./outline.js";
import * as summary from "./summary.js";
import * as tensor from "./tensor.js";
import * as tokens from "./tokens.js";

export const TABS = [summary, tensor, experts, health, compare, tokens];
const VIEWS = [outline, ...TABS];

let current = TABS[0].id;
let tabListener = null;

export const currentTab = () => current;
// Called after every tab change (the page's address records the tab).
export function onTab(listener) {
  tabListener = listener;
}

export function mountAll(ctx) {
  outline.mount($("outline"), ctx);
  const nav = $("tabs");
  for (const view of TABS) {
    const selected = view.id === current;
    const button = el("button", {type: "button", role: "tab", id: `tab-${view.id}`, dataset: {tab: view.id},
                                 "aria-selected": String(selected), "aria-controls": `panel-${view.id}`,
                                 text: view.title, onclick: () => showTab(view.id)});
    const panel = el("div", {class: "panel", id: `panel-${view.id}`, role: "tabpanel",
                             "aria-labelledby": `tab-${view.id}`, hidden: !selected});
    nav.append(button);
    $("panels").append(panel);
    view.mount(panel, ctx);
    new ResizeObserver(() => { if (current === view.id) view.relayout?.(); }).observe(panel);
  }
}

export function showTab(id) {
  current = id;
  for (const view of TABS) {
    const selected = view.id === id;
    $(`tab-${view.id}`).setAttribute("aria-selected", String(selected));
    $(`panel-${view.id}`).hidden = !selected;
  }
  TABS.find((view) => view.id === id)?.relayout?.();
  tabListener?.(id);
}

export function showModel(model) {
  for (const view of VIEWS) view.show(model);
  showAvailableTabs(model);
  if ($(`tab-${current}`).hidden) showTab(TABS[0].id);
}

export function showDetails(model) {
  for (const view of VIEWS) view.details?.(model);
  showAvailableTabs(model);
}

function showAvailableTabs(model) {
  for (const view of TABS) $(`tab-${view.id}`).hidden = view.available ? !view.available(model) : false;
}

export function selectTensor(record, options) {
  for (const view of VIEWS) view.select?.(record, options);
}

// The page hands a file list entry to the tab `id` (which exports open), and shows that tab.
export async function openInTab(id, entry) {
  showTab(id);
  await TABS.find((view) => view.id === id).open(entry);
}

export function updateIo(io) {
  for (const view of VIEWS) view.io?.(io);
}
