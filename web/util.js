// Small helpers shared by the page's modules: DOM building and number formatting.

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

export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
  return node;
}

// JSON carries NaN and infinities as strings (see tensorloupe.stats.json_number).
export function num(value) {
  if (value === "nan") return NaN;
  if (value === "inf") return Infinity;
  if (value === "-inf") return -Infinity;
  if (Array.isArray(value)) return Math.hypot(num(value[0]), num(value[1]));
  return Number(value);
}

// A compact, readable number: 6 significant digits, exponent form only when it helps.
export function fmt(value, digits = 6) {
  const v = num(value);
  if (Number.isNaN(v)) return "NaN";
  if (!Number.isFinite(v)) return v > 0 ? "+Inf" : "−Inf";
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1e15) return v.toLocaleString("en-US");
  if (a >= 1e-4 && a < 1e6) return stripZeros(v.toPrecision(digits));
  return v.toExponential(digits - 1).replace(/\.?0+e/, "e");
}

function stripZeros(text) {
  return text.includes(".") && !text.includes("e") ? text.replace(/\.?0+$/, "") : text;
}

// The exact stored value: the shortest text that reads back as the same double.
export function exact(value) {
  const v = num(value);
  if (Number.isNaN(v)) return "NaN";
  if (!Number.isFinite(v)) return v > 0 ? "+Inf" : "−Inf";
  return String(v);
}

export function percent(fraction) {
  const v = num(fraction) * 100;
  if (v === 0) return "0%";
  if (v < 0.01) return "<0.01%";
  return `${stripZeros(v.toPrecision(3))}%`;
}

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
export function bytes(n) {
  let v = Number(n);
  let unit = 0;
  while (v >= 1024 && unit < BYTE_UNITS.length - 1) {
    v /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${v} B` : `${v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0)} ${BYTE_UNITS[unit]}`;
}

export function count(n) {
  const v = Number(n);
  for (const [unit, scale] of [["T", 1e12], ["B", 1e9], ["M", 1e6], ["K", 1e3]]) {
    if (v >= scale) return `${stripZeros((v / scale).toPrecision(3))}${unit}`;
  }
  return String(v);
}

export function grouped(n) {
  return Number(n).toLocaleString("en-US");
}

export function shapeText(shape) {
  return shape.length ? `${shape.join(" × ")}` : "scalar";
}
