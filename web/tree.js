// The outline's tree: tensor names split on dots into a collapsible tree (numbered layers sorted and
// grouped), filtered by substring or regex, drawn as a virtual list so 100k tensors scroll
// smoothly, and driven by the keyboard like a file tree (arrows, Home/End, Enter).

import {clear, el} from "./dom.js";
import {bytes, shapeText} from "./format.js";

const ROW_HEIGHT = 26;
const OVERSCAN = 12;
const NUMERIC = /^\d+$/;
const DOT = 46;   // "."

// The tree is made as it is looked at: a node keeps the tensors below it (`members`) until its
// kids are first asked for (kidsOf), and only then groups them by their next part. Drawing the
// first screen of 163 shards' 39,120 tensors groups them down to the layers (a few passes over
// the names); the 13,040 experts and their tensors are made when a layer is opened. Building
// the whole tree first took ~0.1 s of the page's thread, mostly making nodes nobody had seen.
let nextId = 0;
function newNode(label, key, parent, at) {
  return {label, key, parent, at, members: null, kids: null, tensor: -1, count: 0, bytes: 0,
          id: nextId++, depth: parent ? parent.depth + 1 : -1, numeric: false, matches: 0, dtype: ""};
}
const NO_KIDS = [];

// Does `name` have the part `part` at `at` (followed by a dot or its end)?
function partAt(name, part, at) {
  const end = at + part.length;
  return name.startsWith(part, at) && (end === name.length || name.charCodeAt(end) === DOT);
}

function partOf(name, at) {
  const dot = name.indexOf(".", at);
  return name.slice(at, dot < 0 ? name.length : dot);
}

// The tree of dotted names, made lazily (kidsOf): single-child chains are merged
// ("model.embed_tokens.weight" is one row, not three), numbered kids sort as numbers (layers 2
// before 10). A node's count and bytes are those of every tensor at or below it.
export function buildTree(tensors) {
  const root = newNode("", "", null, 0);
  root.members = tensors.map((_, i) => i);
  root.count = tensors.length;
  for (const t of tensors) root.bytes += t.nbytes;
  return root;
}

// A node's kids, made on first use from its members: grouped by the part after the node's own
// (`at` is where it starts in each member's name: the same for all of them).
export function kidsOf(node, tensors) {
  if (node.kids !== null) return node.kids;
  const members = node.members;
  node.members = null;
  if (!members || !members.length) return (node.kids = NO_KIDS);
  const groups = new Map();
  let last = null;
  for (const index of members) {
    const name = tensors[index].name;
    // Neighbours mostly share the part: compared in place, not cut out and looked up.
    let kid = last !== null && partAt(name, last.key, node.at) ? last : null;
    if (kid === null) {
      const key = partOf(name, node.at);
      kid = groups.get(key);
      if (!kid) groups.set(key, kid = newNode(key, key, node, node.at + key.length + 1));
    }
    kid.count += 1;
    kid.bytes += tensors[index].nbytes;
    if (kid.at > name.length) kid.tensor = index;     // the name ends with this part
    else (kid.members ??= []).push(index);
    last = kid;
  }
  const kids = [...groups.values()];
  for (const kid of kids) merge(kid, tensors);
  node.numeric = kids.length > 1 && kids.every((k) => NUMERIC.test(k.key));
  if (node.numeric) kids.sort((a, b) => Number(a.key) - Number(b.key));
  return (node.kids = kids);
}

// A node that is no tensor and whose members all go on with the same part is one row with it.
function merge(node, tensors) {
  while (node.tensor < 0 && node.members) {
    const members = node.members;
    const part = partOf(tensors[members[0]].name, node.at);
    if (!members.every((i) => partAt(tensors[i].name, part, node.at))) return;
    node.label = `${node.label}.${part}`;
    node.at += part.length + 1;
    const below = members.filter((i) => tensors[i].name.length >= node.at);
    if (below.length < members.length) node.tensor = members.findLast((i) => tensors[i].name.length < node.at);
    node.members = below.length ? below : null;
  }
}

// Every node made (to sort or filter the whole tree).
export function expandAll(node, tensors) {
  for (const kid of kidsOf(node, tensors)) expandAll(kid, tensors);
  return node;
}

// Orders of the outline: the file's own, or by name, size (largest first) or dtype, at every
// level of the tree (numbered layers stay in number order when sorted by name).
const ORDERS = {
  name: (a, b) => a.label.localeCompare(b.label, "en", {numeric: true}),
  size: (a, b) => b.bytes - a.bytes || ORDERS.name(a, b),
  dtype: (a, b) => a.dtype.localeCompare(b.dtype) || ORDERS.name(a, b),
};

export function sortTree(node, order, tensors) {
  const kids = kidsOf(node, tensors);
  const leafDtype = (n) => (n.tensor >= 0 ? tensors[n.tensor].dtype : n.kids.length ? leafDtype(n.kids[0]) : "");
  for (const kid of kids) sortTree(kid, order, tensors);
  for (const kid of kids) kid.dtype = leafDtype(kid);
  kids.sort(ORDERS[order]);
}

// A group row (whether or not its kids are made yet).
function isGroup(node) {
  return node.kids !== null ? node.kids.length > 0 : node.members !== null && node.members.length > 0;
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
    for (const kid of kidsOf(this.root, tensors)) if (isGroup(kid)) this.expanded.add(kid.id);
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
    // Matches are counted (and the whole tree made) only for a filter: without one, all match.
    const mark = (node) => {
      node.matches = node.tensor >= 0 && this.matcher(this.tensors[node.tensor].name) ? 1 : 0;
      for (const kid of kidsOf(node, this.tensors)) node.matches += mark(kid);
      return node.matches;
    };
    const total = this.matcher ? mark(this.root) : this.tensors.length;
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
      for (const kid of kidsOf(node, this.tensors)) {
        if (this.matcher && !kid.matches) continue;
        rows.push(kid);
        if (isGroup(kid) && this.isOpen(kid)) walk(kid);
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
    const group = isGroup(node);
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
      const kids = kidsOf(node, this.tensors);      // a drawn group: its range is shown
      const first = kids[0].label;
      const last = kids[kids.length - 1].label;
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
    if (isGroup(node) && (event.target.classList.contains("caret") || node.tensor < 0)) this.toggle(node);
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
        if (isGroup(node) && !this.isOpen(node)) this.toggle(node, true);
        else if (isGroup(node)) this.setFocus(this.focus + 1);
      },
      ArrowLeft: () => {
        if (isGroup(node) && this.isOpen(node) && !this.matcher) this.toggle(node, false);
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

  // The node of tensor `index`: down the tree along its name, making only that path.
  findNode(node, index) {
    const name = this.tensors[index].name;
    while (node.tensor !== index) {
      const at = node.at;
      node = kidsOf(node, this.tensors).find((kid) => partAt(name, kid.label, at));
      if (!node) return null;
    }
    return node;
  }
}
