// Which 2-D view of a tensor the heatmap shows, and the axis picker that chooses it: for 3-D+
// tensors (stacked experts, conv kernels) two axes form the view and the others get an index.
// A view is {shape, plane, index}: plane null means rows = axis 0, cols = all other axes flattened
// (tensorloupe.grid's default), else plane = [row axis, col axis] and index = {axis: i} for the rest.

import {clear, el} from "./dom.js";
import {product} from "./format.js";

// The default view: for 3-D+ a slice of the last two axes longer than 1 (for a stacked expert
// tensor, that expert's matrix; size-1 axes would make a 1-pixel strip of a conv kernel
// 1024x1x512x1), unless they are tiny (conv kernels), then rows x rest.
export function defaultView(shape, expert = null) {
  const ndim = shape.length;
  let plane = null;
  const index = {};
  const long = shape.map((_, axis) => axis).filter((axis) => shape[axis] > 1);
  if (ndim >= 3 && long.length >= 2) {
    const [rows, cols] = long.slice(-2);
    if (expert !== null || shape[rows] * shape[cols] >= 64) {
      plane = [rows, cols];
      for (let axis = 0; axis < ndim; axis++) if (axis !== rows && axis !== cols) index[axis] = 0;
      if (expert !== null && rows !== 0 && cols !== 0) index[0] = Math.min(expert, shape[0] - 1);
    }
  }
  return {shape, plane, index};
}

export function viewShape({shape, plane}) {
  if (plane) return [shape[plane[0]], shape[plane[1]]];
  if (shape.length === 0) return [1, 1];
  if (shape.length === 1) return [1, shape[0]];
  return [shape[0], product(shape.slice(1))];
}

// The tensor index of view cell (row, col), in the tensor's own axes.
export function tensorIndex({shape, plane, index}, row, col) {
  if (plane) {
    const out = shape.map((_, axis) => index[axis] ?? 0);
    out[plane[0]] = row;
    out[plane[1]] = col;
    return out;
  }
  if (shape.length <= 1) return shape.length ? [col] : [];
  const rest = [];
  let c = col;
  for (let axis = shape.length - 1; axis >= 1; axis--) {
    rest.unshift(c % shape[axis]);
    c = Math.floor(c / shape[axis]);
  }
  return [row, ...rest];
}

// Draw the picker for `view` into `box`. `onView()` is called after the plane changed (the view
// shape changes: zoom resets), `onIndex()` after an index moved (same shape: a new slice).
export function renderAxisPicker(box, view, {onView, onIndex}) {
  const {shape, plane, index} = view;
  clear(box);
  box.hidden = shape.length < 3;
  if (shape.length < 3) return;
  const redraw = () => {
    renderAxisPicker(box, view, {onView, onIndex});
    onView();
  };
  const mode = el("select", {id: "axis-mode", "aria-label": "View"},
    el("option", {value: "slice", selected: Boolean(plane), text: "2-D slice"}),
    el("option", {value: "flat", selected: !plane, text: "rows × rest"}));
  mode.addEventListener("change", () => {
    Object.assign(view, defaultView(shape));
    if (mode.value === "flat") Object.assign(view, {plane: null, index: {}});
    else if (!view.plane) {
      const long = shape.map((_, axis) => axis).filter((axis) => shape[axis] > 1);
      const [rows, cols] = long.length >= 2 ? long.slice(-2) : [shape.length - 2, shape.length - 1];
      const index = {};
      for (let axis = 0; axis < shape.length; axis++) if (axis !== rows && axis !== cols) index[axis] = 0;
      Object.assign(view, {plane: [rows, cols], index});
    }
    redraw();
  });
  box.append(mode);
  if (!plane) return;
  const choose = (which) => {
    const rows = Number(box.querySelector("#axis-rows").value);
    let cols = Number(box.querySelector("#axis-cols").value);
    if (rows === cols) cols = which === "rows" ? plane[0] : (rows + 1) % shape.length;
    const kept = {};
    for (let axis = 0; axis < shape.length; axis++) {
      if (axis !== rows && axis !== cols) kept[axis] = index[axis] ?? 0;
    }
    Object.assign(view, {plane: [rows, cols], index: kept});
    redraw();
  };
  const axisSelect = (which, value) => {
    const select = el("select", {id: `axis-${which}`, "aria-label": `${which} axis`},
      shape.map((n, axis) => el("option", {value: String(axis), selected: axis === value, text: `axis ${axis} (${n})`})));
    select.addEventListener("change", () => choose(which));
    return el("label", {class: "axis"}, which, select);
  };
  box.append(axisSelect("rows", plane[0]), axisSelect("cols", plane[1]));
  for (let axis = 0; axis < shape.length; axis++) {
    if (plane.includes(axis) || shape[axis] === 1) continue;   // nothing to slide along
    const value = index[axis] ?? 0;
    const limits = {min: "0", max: String(shape[axis] - 1), value: String(value), "aria-label": `index along axis ${axis}`};
    const range = el("input", {type: "range", id: `axis-index-${axis}`, ...limits});
    const number = el("input", {type: "number", class: "axis-number", ...limits});
    const set = (v) => {
      const i = Math.max(0, Math.min(shape[axis] - 1, Number(v) || 0));
      range.value = number.value = String(i);
      view.index[axis] = i;
      onIndex();
    };
    range.addEventListener("input", () => set(range.value));
    number.addEventListener("change", () => set(number.value));
    box.append(el("label", {class: "axis index"}, `axis ${axis}`, range, number));
  }
}
