// DOM helpers shared by every module of the page: the one `$`, element building, dotted names that
// wrap, and the fact tiles of the Summary and Experts panels.

export const $ = (id) => document.getElementById(id);

// el("div", {class: "x", text: "hi", dataset: {k: "v"}, onclick: f, title: "t"}, child, ...)
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A dotted name that may wrap after its dots (and nowhere else) in a narrow column or caption.
export function breakable(name) {
  const parts = name.split(".");
  return parts.flatMap((part, i) => (i < parts.length - 1 ? [`${part}.`, el("wbr")] : [part]));
}

export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
  return node;
}

// One fact tile: a label, a value, an optional detail line (tests find it by data-key).
export function fact(key, label, value, detail) {
  return el("div", {class: "fact", dataset: {key}},
    el("div", {class: "fact-label", text: label}),
    el("div", {class: "fact-value", text: value}),
    detail ? el("div", {class: "fact-detail", text: detail}) : null);
}

// Offer `blob` as a file download named `name` (made in the page: nothing leaves the tab).
export function download(blob, name) {
  const a = el("a", {href: URL.createObjectURL(blob), download: name});
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
}
