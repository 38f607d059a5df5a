// The Outline (a view module, panels.js, mounted in the sidebar): the filter box and the tree of
// tensor names (tree.js). Choosing a tensor shows it in the Tensor tab; a tensor chosen anywhere
// else is revealed here.

import {el} from "./dom.js";
import {Outline} from "./tree.js";

export const id = "outline";
export const title = "Outline";
let outline = null;

// The view contract (panels.js): the outline lives in the sidebar.
export function mount(container, ctx) {
  const filter = el("input", {type: "search", id: "filter", placeholder: "Filter tensors…  (text or /regex/)",
                              "aria-label": "Filter tensors", autocomplete: "off", spellcheck: "false"});
  const regex = el("input", {type: "checkbox", id: "filter-regex"});
  const tree = el("div", {class: "tree", id: "tree", role: "tree", tabindex: "0", "aria-label": "Tensors"});
  const counter = el("div", {class: "tree-count", id: "tree-count"});
  const order = el("select", {id: "tree-order", "aria-label": "Order of the tensors", title: "Order of the tensors"},
    [["file", "file order"], ["name", "by name"], ["size", "by size"], ["dtype", "by dtype"]]
      .map(([value, text]) => el("option", {value, text})));
  container.append(
    el("div", {class: "filter"}, filter,
      el("label", {class: "regex-toggle", title: "Treat the filter as a regular expression"}, regex, el("span", {text: ".*"})),
      order),
    tree, counter);
  outline = new Outline({container: tree, filter, regex, counter, onSelect: (name) => ctx.selectTensor(name)});
  order.addEventListener("change", () => outline.setOrder(order.value));
  // "/" jumps to the filter (as in many code browsers); Escape empties it and returns to the tree.
  document.addEventListener("keydown", (event) => {
    const typing = event.target.closest("input, select, textarea");
    if (event.key === "/" && !typing) {
      event.preventDefault();
      filter.focus();
    } else if (event.key === "Escape" && event.target === filter) {
      filter.value = "";
      filter.dispatchEvent(new Event("input"));
      tree.focus();
    }
  });
}

export function show(model) {
  outline.setModel(model.tensors);
}

export function select(tensor) {
  outline.reveal(tensor.name);
}
