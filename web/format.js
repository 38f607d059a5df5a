// Number and size formatting shared by the page's modules. JSON from the worker carries NaN and
// infinities as strings (tensorloupe.jsonable.json_number).

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

// A size a person reads, with the exact count where the unit rounds: "48.0 KiB (49,152 bytes)".
export function bytesExact(n) {
  return Number(n) < 1024 ? bytes(n) : `${bytes(n)} (${grouped(n)} bytes)`;
}

export function grouped(n) {
  return Number(n).toLocaleString("en-US");
}

export function shapeText(shape) {
  return shape.length ? `${shape.join(" × ")}` : "scalar";
}

export function product(list) {
  return list.reduce((a, b) => a * b, 1);
}

// A path as the user gave it: without the worker's mount directory (worker.mjs mount: /mnt/<n>/).
export function dropPath(path) {
  return String(path).replace(/^\/mnt\/\d+\//, "");
}
