// The Experts tab's map of the MoE structure (tensorloupe.moe.detect): facts, then one row per
// MoE layer with a cell per expert (click: its first weight in the Tensor tab), its router and
// shared experts. The redundancy analysis marks the cells it would drop (experts.js).

import {clear, el, fact} from "./dom.js";
import {grouped} from "./format.js";

// Layers x experts: one cell per expert (click to view its first weight), the router per layer.
export function renderMoE(container, moe, {onTensor}) {
  clear(container);
  if (!moe || !moe.detected) {
    container.append(el("p", {class: "muted", text: moe ? moe.reason : "No MoE structure."}));
    return;
  }
  const n = moe.expert_count;
  container.append(el("div", {class: "facts"},
    fact("moe_layers", "MoE layers", grouped(moe.layers.length)),
    fact("expert_count", "experts per layer", grouped(n)),
    fact("top_k", "top-k (per token)", moe.top_k ?? "not in metadata", moe.top_k_source || ""),
    fact("stacked", "expert weights", moe.layers.some((l) => l.stacked) ? "stacked" : "separate", moe.layers.some((l) => l.stacked) ? "experts along axis 0 of one tensor" : "one tensor per expert weight")));
  const head = el("tr", {}, el("th", {text: "layer"}),
    ...Array.from({length: n}, (_, e) => el("th", {class: "expert-col", text: String(e)})),
    el("th", {text: "router"}), el("th", {text: "shared"}));
  const body = moe.layers.map((layer) => el("tr", {dataset: {layer: layer.prefix}},
    el("th", {scope: "row", title: layer.prefix, text: layer.index ?? layer.prefix}),
    ...Array.from({length: n}, (_, e) => {
      const weights = layer.experts[String(e)];
      if (!weights) return el("td", {class: "expert missing"});
      const leaves = Object.keys(weights);
      const ref = weights[leaves[0]];
      return el("td", {class: "expert"}, el("button", {
        class: "expert-cell", title: `${layer.prefix} · expert ${e}\n${leaves.join(", ")}`,
        "aria-label": `layer ${layer.index ?? layer.prefix} expert ${e}`,
        dataset: {expert: String(e)},
        onclick: () => onTensor(ref.tensor, ref.expert),
      }));
    }),
    el("td", {class: "router"}, layer.router.length
      ? layer.router.map((name) => el("button", {class: "link", title: name, text: name.split(".").slice(-2).join("."), onclick: () => onTensor(name, null)}))
      : el("span", {class: "muted", text: "—"})),
    el("td", {class: "num", text: layer.shared.length ? String(layer.shared.length) : "—"})));
  container.append(el("div", {class: "moe-scroll"}, el("table", {class: "moe-grid", id: "moe-grid"}, el("thead", {}, head), el("tbody", {}, body))));
  container.append(el("p", {class: "muted small", text: "Click an expert to open its first weight; for stacked expert tensors the heatmap shows that expert's slice."}));
}
