// The outline's tree: tensor names split on dots into a collapsible tree (numbered layers sorted and
// grouped), filtered by substring or regex, drawn as a virtual list so 100k tensors scroll
// smoothly, and driven by the keyboard like a file tree (arrows, Home/End, Enter).

import {clear, el} from "./dom.js";
import {bytes, shapeText} from "./format.js";

const ROW_HEIGHT = 26;
const OVERSCAN = 12;
const NUMERIC = /^\d+$/;
const DOT = 46;   // "."

// `children` is made for the first child: most nodes are leaves, and a Map for each of 100k
// of them was most of the time spent building the tree (in the garbage collector).
function newNode(label, parent) {
  return {label, parent, children: null, kids: null, tensor: -1, count: 0, bytes: 0, id: 0,
          depth: 0, numeric: false, matches: 0};
}
const NO_KIDS = [];

// Build the tree of dotted names; single-child chains are merged ("model.embed_tokens.weight"
// is one row, not three), numbered children sort as numbers (layers 2 before 10).
export function buildTree(tensors) {
  const root = newNode("", null);
  // Neighbours share most of their path (model.layers.7.mlp.experts.12.…): the nodes of the
  // previous name are reused for the parts it shares with this one, found by comparing
  // characters, and only the rest is split and looked up (163 shards' 39,120 names: a part or
  // two each instead of eight, and far less garbage).
  const path = [root];        // path[i + 1]: the node of the previous name's part i
  const ends = [];            // ends[i]: where the previous name's part i ends (a dot, or its end)
  let previous = null;
  tensors.forEach((t, index) => {
    const name = t.name;
    let common = 0;
    if (previous !== null) {
      const most = Math.min(name.length, previous.length);
      while (common < most && name.charCodeAt(common) === previous.charCodeAt(common)) common++;
    }
    // A part is shared if it ends within the common characters where this name has a boundary too.
    let same = 0;
    while (same < ends.length && ends[same] <= common
           && (ends[same] === name.length || name.charCodeAt(ends[same]) === DOT)) same++;
    path.length = same + 1;
    ends.length = same;
    let node = path[same];
    let at = same ? ends[same - 1] + 1 : 0;
    if (at <= name.length) {
      for (const part of (same ? name.slice(at) : name).split(".")) {
        let child = node.children?.get(part);
        if (!child) {
          child = newNode(part, node);
          (node.children ??= new Map()).set(part, child);
        }
        node = child;
        at += part.length;
        path.push(node);
        ends.push(at);
        at += 1;
      }
    }
    node.tensor = index;
    previous = name;
  });
  let nextId = 0;
  const finish = (node, depth) => {
    while (node.parent && node.tensor < 0 && node.children?.size === 1) {
      const [only] = node.children.values();
      node.label = `${node.label}.${only.label}`;
      node.children = only.children;
      node.tensor = only.tensor;
      for (const child of node.children?.values() ?? NO_KIDS) child.parent = node;
    }
    node.id = nextId++;
    node.depth = depth;
    node.kids = node.children ? [...node.children.values()] : NO_KIDS;
    node.numeric = node.kids.length > 1 && node.kids.every((k) => NUMERIC.test(k.label));
    if (node.numeric) node.kids.sort((a, b) => Number(a.label) - Number(b.label));
    node.count = node.tensor >= 0 ? 1 : 0;
    node.bytes = node.tensor >= 0 ? tensors[node.tensor].nbytes : 0;
    for (const kid of node.kids) {
      finish(kid, depth + 1);
      node.count += kid.count;
      node.bytes += kid.bytes;
    }
  };
  finish(root, -1);
  return root;
}

// Orders of the outline: the file's own, or by name, size (largest first) or dtype, at every
// level of the tree (numbered layers stay in number order when sorted by name).
const ORDERS = {
  name: (a, b) => a.label.localeCompare(b.label, "en", {numeric: true}),
  size: (a, b) => b.bytes - a.bytes || ORDERS.name(a, b),
  dtype: (a, b) => a.dtype.localeCompare(b.dtype) || ORDERS.name(a, b),
};

export function sortTree(node, order, tensors) {
  const leafDtype = (n) => (n.tensor >= 0 ? tensors[n.tensor].dtype : n.kids.length ? leafDtype(n.kids[0]) : "");
  for (const kid of node.kids) sortTree(kid, order, tensors);
  for (const kid of node.kids) kid.dtype = leafDtype(kid);
  node.kids.sort(ORDERS[order]);
}

export class Outline {
  constructor({container, filter, regex, counter, onSelect}) {
    this.container = container;
    this.filterInput = filter;
    this.regexToggle = regex;
    this.counter = counter;
    this.onSelect = onSelect;
    this.tensors = [];
    this.root = newNode("", null);
    this.expanded = new Set();
    this.rows = [];
    this.focus = 0;
    this.selected = -1;
    this.matcher = null;
    this.spacer = el("div", {class: "tree-spacer"});
    container.append(this.spacer);
    container.addEventListener("scroll", () => this.paint());
    container.addEventListener("keydown", (event) => this.key(event));
    container.addEventListener("click", (event) => this.click(event));
    new ResizeObserver(() => this.paint()).observe(container);
    filter.addEventListener("input", () => this.refilter());
    regex.addEventListener("change", () => this.refilter());
  }

  setOrder(order) {
    this.order = order;
    if (this.tensors.length) this.setModel(this.tensors, {keep: true});
  }

  setModel(tensors, {keep = false} = {}) {
    const selected = keep && this.selected >= 0 ? this.tensors[this.selected]?.name : null;
    this.tensors = tensors;
    this.root = buildTree(tensors);
    if (this.order && this.order !== "file") sortTree(this.root, this.order, tensors);
    this.expanded = new Set([this.root.id]);
    for (const kid of this.root.kids) if (kid.kids.length) this.expanded.add(kid.id);
    this.selected = -1;
    this.focus = 0;
    this.container.scrollTop = 0;
    this.refilter();
    if (selected) this.reveal(selected);
  }

  refilter() {
    const text = this.filterInput.value.trim();
    this.matcher = null;
    this.invalid = null;
    this.filterInput.classList.remove("invalid");
    this.filterInput.removeAttribute("aria-invalid");
    if (text) {
      const slashed = /^\/(.+)\/([a-z]*)$/.exec(text);
      if (slashed || this.regexToggle.checked) {
        try {
          const re = slashed ? new RegExp(slashed[1], slashed[2].includes("i") ? "i" : "")
                             : new RegExp(text, "i");
          this.matcher = (name) => re.test(name);
        } catch (error) {
          this.filterInput.classList.add("invalid");
          this.filterInput.setAttribute("aria-invalid", "true");
          this.matcher = () => false;
          this.invalid = `invalid regex: ${error.message.replace(/^Invalid regular expression: /, "")}`;
        }
      } else {
        const needle = text.toLowerCase();
        this.matcher = (name) => name.toLowerCase().includes(needle);
      }
    }
    const mark = (node) => {
      node.matches = node.tensor >= 0 && (!this.matcher || this.matcher(this.tensors[node.tensor].name)) ? 1 : 0;
      for (const kid of node.kids) node.matches += mark(kid);
      return node.matches;
    };
    const total = mark(this.root);
    this.counter.classList.toggle("error-text", Boolean(this.invalid));
    this.counter.textContent = this.invalid ? this.invalid : this.matcher
      ? `${total.toLocaleString("en-US")} of ${this.tensors.length.toLocaleString("en-US")} tensors match`
      : `${this.tensors.length.toLocaleString("en-US")} tensors`;
    this.flatten();
  }

  isOpen(node) {
    return this.matcher ? true : this.expanded.has(node.id);
  }

  flatten() {
    const rows = [];
    const walk = (node) => {
      for (const kid of node.kids) {
        if (this.matcher && !kid.matches) continue;
        rows.push(kid);
        if (kid.kids.length && this.isOpen(kid)) walk(kid);
      }
    };
    walk(this.root);
    const focused = this.rows[this.focus];
    this.rows = rows;
    const again = focused ? rows.indexOf(focused) : -1;
    this.focus = again >= 0 ? again : Math.min(this.focus, Math.max(0, rows.length - 1));
    this.spacer.style.height = `${rows.length * ROW_HEIGHT}px`;
    this.paint();
  }

  paint() {
    const top = this.container.scrollTop;
    const height = this.container.clientHeight || 600;
    const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(this.rows.length, Math.ceil((top + height) / ROW_HEIGHT) + OVERSCAN);
    clear(this.spacer);
    for (let i = first; i < last; i++) this.spacer.append(this.row(this.rows[i], i));
    const active = this.rows[this.focus];
    if (active) this.container.setAttribute("aria-activedescendant", `node-${active.id}`);
    if (!this.rows.length) {
      this.spacer.append(el("div", {class: "tree-empty", text: this.matcher ? "No tensor matches the filter." : "No tensors."}));
    }
  }

  row(node, index) {
    const group = node.kids.length > 0;
    const open = group && this.isOpen(node);
    const tensor = node.tensor >= 0 ? this.tensors[node.tensor] : null;
    const classes = ["tree-row", group ? "group" : "leaf"];
    if (index === this.focus) classes.push("focused");
    if (node.tensor >= 0 && node.tensor === this.selected) classes.push("selected");
    if (tensor && tensor.problem) classes.push("problem");
    const row = el("div", {
      class: classes.join(" "), role: "treeitem", id: `node-${node.id}`,
      "aria-level": node.depth + 1, "aria-expanded": group ? String(open) : null,
      "aria-selected": node.tensor >= 0 && node.tensor === this.selected ? "true" : "false",
      dataset: {index: String(index), ...(tensor ? {name: tensor.name} : {group: this.path(node)})},
      title: tensor ? tensor.name : this.path(node),
    });
    row.style.top = `${index * ROW_HEIGHT}px`;
    row.style.paddingLeft = `${6 + node.depth * 14}px`;
    row.append(el("span", {class: "caret", "aria-hidden": "true", text: group ? (open ? "▾" : "▸") : ""}));
    row.append(el("span", {class: "label", text: node.label}));
    if (group) {
      const first = node.kids[0].label;
      const last = node.kids[node.kids.length - 1].label;
      if (node.numeric) row.append(el("span", {class: "range", text: `${first}–${last}`}));
      row.append(el("span", {class: "meta", text: `${node.count.toLocaleString("en-US")} · ${bytes(node.bytes)}`}));
    }
    if (tensor) {
      row.append(el("span", {class: `dtype dtype-${tensor.dtype.toLowerCase()}`, text: tensor.dtype}));
      row.append(el("span", {class: "meta", text: `${shapeText(tensor.shape)} · ${bytes(tensor.nbytes)}`}));
    }
    return row;
  }

  path(node) {
    const parts = [];
    for (let n = node; n && n.parent; n = n.parent) parts.unshift(n.label);
    return parts.join(".");
  }

  setFocus(index, {scroll = true} = {}) {
    if (!this.rows.length) return;
    this.focus = Math.max(0, Math.min(this.rows.length - 1, index));
    if (scroll) this.scrollTo(this.focus);
    this.paint();
  }

  scrollTo(index) {
    const top = index * ROW_HEIGHT;
    const view = this.container.clientHeight;
    if (top < this.container.scrollTop) this.container.scrollTop = top;
    else if (top + ROW_HEIGHT > this.container.scrollTop + view) this.container.scrollTop = top + ROW_HEIGHT - view;
  }

  toggle(node, open = !this.expanded.has(node.id)) {
    if (this.matcher) return;
    if (open) this.expanded.add(node.id);
    else this.expanded.delete(node.id);
    this.flatten();
  }

  activate(node) {
    if (node.tensor >= 0) this.onSelect(this.tensors[node.tensor].name);
    else this.toggle(node);
  }

  click(event) {
    const row = event.target.closest(".tree-row");
    if (!row) return;
    const index = Number(row.dataset.index);
    const node = this.rows[index];
    this.focus = index;
    if (node.kids.length && (event.target.classList.contains("caret") || node.tensor < 0)) this.toggle(node);
    else this.activate(node);
    this.container.focus({preventScroll: true});
    this.paint();
  }

  key(event) {
    const node = this.rows[this.focus];
    if (!node) return;
    const page = Math.max(1, Math.floor(this.container.clientHeight / ROW_HEIGHT) - 1);
    const moves = {
      ArrowDown: () => this.setFocus(this.focus + 1),
      ArrowUp: () => this.setFocus(this.focus - 1),
      PageDown: () => this.setFocus(this.focus + page),
      PageUp: () => this.setFocus(this.focus - page),
      Home: () => this.setFocus(0),
      End: () => this.setFocus(this.rows.length - 1),
      ArrowRight: () => {
        if (node.kids.length && !this.isOpen(node)) this.toggle(node, true);
        else if (node.kids.length) this.setFocus(this.focus + 1);
      },
      ArrowLeft: () => {
        if (node.kids.length && this.isOpen(node) && !this.matcher) this.toggle(node, false);
        else if (node.parent && node.parent.parent) this.setFocus(this.rows.indexOf(node.parent));
      },
      Enter: () => this.activate(node),
      " ": () => this.activate(node),
    };
    const move = moves[event.key];
    if (move) {
      event.preventDefault();
      move();
    }
  }

  // Show `name` as the selection: expand its ancestors and scroll it into view.
  reveal(name) {
    const index = this.tensors.findIndex((t) => t.name === name);
    this.selected = index;
    if (index < 0) return this.paint();
    let node = this.findNode(this.root, index);
    for (let n = node && node.parent; n; n = n.parent) this.expanded.add(n.id);
    if (this.matcher && !this.matcher(name)) {
      this.filterInput.value = "";
      this.refilter();
    } else {
      this.flatten();
    }
    const row = this.rows.indexOf(node);
    if (row >= 0) this.setFocus(row);
  }

  findNode(node, index) {
    if (node.tensor === index) return node;
    for (const kid of node.kids) {
      const found = this.findNode(kid, index);
      if (found) return found;
    }
    return null;
  }
}
