// The Summary's "what model is this, and will it fit" cards: the architecture with the source of
// every value, parameters by component (total, active per token for MoE; training state apart),
// the memory estimate with its formulas, and the fits table at a context length the user can
// change (the worker recomputes it from the descriptors: request("architecture", {context,
// cache_type}), no file is read again). The numbers are `tensorloupe inspect --json`'s
// "architecture" and "memory" objects (model.js: the payload carries both), rendered as they come.

import {el} from "./dom.js";
import {bytes, dropPath, grouped} from "./format.js";

const COMPONENT_LABELS = {
  embeddings: "Embeddings", attention: "Attention", mlp: "MLP", experts: "Experts (routed)",
  shared_experts: "Shared experts", router: "Router", norms: "Norms", output_head: "Output head",
  other: "Other",
};
const CACHE_TYPES = ["f16", "q8_0", "q4_0"];

// A field's value as the CLI's text output spells it (arch_report._value).
function valueText(field) {
  const v = field.value;
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (typeof v === "number") return Number.isInteger(v) ? grouped(v) : String(v);
  if (v === null) return "none";
  if (Array.isArray(v)) {
    if (field.key === "sliding_layers") return `${v.length} layers: ${ranges(v)}`;
    if (v.every((n) => Number.isInteger(n))) return `per layer ${Math.min(...v)}-${Math.max(...v)}`;
    return v.join(", ");
  }
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

// [0, 1, 2, 4] -> "0-2, 4"
function ranges(numbers) {
  const out = [];
  for (let i = 0; i < numbers.length; i += 1) {
    let j = i;
    while (j + 1 < numbers.length && numbers[j + 1] === numbers[j] + 1) j += 1;
    out.push(i === j ? String(numbers[i]) : `${numbers[i]}-${numbers[j]}`);
    i = j;
  }
  return out.join(", ");
}

function architectureCard(arch) {
  const sources = arch.sources.length ? `Configs read: ${arch.sources.map(dropPath).join("; ")}. Then the file itself.`
    : "No config found: values from the file itself.";
  const rows = arch.fields.map((f) => el("tr", {dataset: {key: f.key}},
    el("th", {scope: "row", text: f.label}),
    el("td", {class: "arch-value", text: valueText(f)}),
    el("td", {class: "arch-source", text: f.source})));
  return el("section", {class: "card", id: "architecture"},
    el("h3", {text: "Architecture"}),
    el("p", {class: "small muted", id: "architecture-sources", text: sources}),
    rows.length
      ? el("table", {class: "kv arch"},
          el("thead", {}, el("tr", {}, el("th", {text: "field"}), el("th", {text: "value"}), el("th", {text: "source"}))),
          el("tbody", {}, rows))
      : el("p", {text: "Nothing known: no config, no GGUF keys, and no recognisable tensor names."}));
}

function componentRow(label, c, total, data) {
  return el("tr", {dataset: data},
    el("th", {scope: "row", text: label}),
    el("td", {class: "num", text: grouped(c.parameters)}),
    el("td", {class: "num", text: total ? `${((100 * c.parameters) / total).toFixed(1)}%` : ""}),
    el("td", {class: "num", text: `${grouped(c.tensors)} tensors`}),
    el("td", {class: "num", text: bytes(c.bytes)}),
    el("td", {}, c.example ? el("code", {class: "example", text: c.example}) : null));
}

function parametersCard(params) {
  const active = params.active === null ? `active per token unknown: ${params.active_formula}`
    : params.active !== params.total ? `${grouped(params.active)} active per token (${params.active_formula})` : null;
  const training = Object.entries(params.training_state);
  const buffers = params.buffers.tensors ? params.buffers : null;
  const tied = params.tied && params.tied.tensors ? params.tied : null;
  return el("section", {class: "card", id: "parameters-by-component"},
    el("h3", {text: "Parameters by component"}),
    el("p", {class: "params-total"}, el("strong", {id: "parameters-total", text: grouped(params.total)}), " parameters",
      active ? el("span", {id: "parameters-active", dataset: {active: String(params.active)}, text: `; ${active}`}) : null),
    el("table", {class: "kv components"}, el("tbody", {},
      Object.entries(params.by_component).map(([key, c]) =>
        componentRow(COMPONENT_LABELS[key] || key, c, params.total, {component: key})))),
    buffers || tied ? el("p", {class: "small muted"},
      buffers ? `Buffers, not parameters: ${grouped(buffers.parameters)} in ${grouped(buffers.tensors)} tensors (e.g. ${buffers.example}). ` : null,
      tied ? `Tied (a second name of a weight counted already): ${grouped(tied.parameters)} in ${grouped(tied.tensors)} tensors (e.g. ${tied.example}).` : null) : null,
    training.length ? el("div", {id: "training-state"},
      el("h4", {text: "Training state (stored in the file, not counted as parameters)"}),
      el("table", {class: "kv components"}, el("tbody", {},
        training.map(([key, c]) => componentRow(key, c, 0, {training: key}))))) : null);
}

function weightsTable(weights) {
  return el("table", {class: "kv", id: "weights-table"}, el("tbody", {}, weights.map((w) =>
    el("tr", {dataset: {precision: w.precision, bytes: String(w.bytes)}},
      el("th", {scope: "row", text: w.precision === "stored" ? "weights as stored" : `weights at ${w.precision}`}),
      el("td", {class: "num", text: bytes(w.bytes)}),
      el("td", {class: "formula small muted", text: w.formula})))));
}

function kvCache(kv) {
  if (kv.none) return el("p", {id: "kv-none", text: `KV cache: none (${kv.reason}).`});
  if (!kv.available) return el("p", {id: "kv-unknown", text: `KV cache: cannot be estimated: ${kv.reason}.`});
  const types = kv.per_token.map((p) => p.cache_type);
  const at = new Map(kv.at.map((a) => [`${a.context} ${a.cache_type}`, a]));
  return el("div", {id: "kv-cache"},
    el("h4", {text: `KV cache (${kv.kind})`}),
    el("table", {class: "kv", id: "kv-per-token"}, el("tbody", {}, kv.per_token.map((p) =>
      el("tr", {dataset: {cacheType: p.cache_type, bytes: String(p.bytes)}},
        el("th", {scope: "row", text: `per token, ${p.cache_type}`}),
        el("td", {class: "num", text: `${grouped(p.bytes)} B`}),
        el("td", {class: "formula small muted", text: p.formula}))))),
    el("table", {class: "grid-table", id: "kv-table"},
      el("thead", {}, el("tr", {}, el("th", {text: "context"}), types.map((t) => el("th", {class: "num", text: t})))),
      el("tbody", {}, kv.contexts.map((n) => el("tr", {dataset: {context: String(n)}},
        el("th", {scope: "row", text: `${grouped(n)}${n === kv.max_context ? " (model max)" : ""}`}),
        types.map((t) => {
          const cell = at.get(`${n} ${t}`);
          return el("td", {class: "num", title: cell.formula, dataset: {bytes: String(cell.bytes)}, text: bytes(cell.bytes)});
        }))))));
}

function fitsTable(fits) {
  const precisions = fits.rows[0].cells.map((c) => c.precision);
  return el("table", {class: "grid-table", id: "fits-table", dataset: {context: String(fits.context), cacheType: fits.cache_type}},
    el("thead", {}, el("tr", {}, el("th", {text: "memory"}), precisions.map((p) => el("th", {class: "num", text: p}))),
      // what each precision needs: the same in every row (weights + KV cache at this context)
      el("tr", {class: "fits-needs"}, el("th", {scope: "row", text: "needs"}), fits.rows[0].cells.map((c) =>
        el("td", {class: "num", dataset: {precision: c.precision, bytes: String(c.total)}, text: bytes(c.total)})))),
    el("tbody", {}, fits.rows.map((row) => el("tr", {dataset: {gb: String(row.memory_gb)}},
      el("th", {scope: "row", text: `${row.memory_gb} GB`}),
      row.cells.map((c) => el("td", {class: `fit ${c.fits ? "yes" : "no"}`, dataset: {precision: c.precision},
                                     title: `weights + KV cache: ${bytes(c.total)} (${grouped(c.total)} B)`,
                                     text: c.fits ? "fits" : "no"}))))));
}

// The memory card; `recompute(context, cacheType)` resolves to a new "memory" object.
function memoryCard(memory, recompute) {
  const card = el("section", {class: "card", id: "memory"});
  let asked = 0;
  const draw = (mem) => {
    const fits = mem.fits;
    const context = el("input", {type: "number", id: "fits-context", min: "1", step: "1", value: String(fits.context),
                                 "aria-label": "Context length in tokens"});
    const cacheType = el("select", {id: "fits-cache-type", "aria-label": "KV cache type"},
      CACHE_TYPES.map((t) => el("option", {value: t, text: t, selected: t === fits.cache_type})));
    const problem = el("span", {class: "small", id: "fits-problem"});
    const apply = async () => {
      const n = Number(context.value);
      if (!Number.isInteger(n) || n < 1) {
        problem.textContent = " The context is a whole number of tokens, at least 1.";
        return;
      }
      const mine = ++asked;
      try {
        const next = await recompute(n, cacheType.value);
        if (mine === asked) draw(next);
      } catch (error) {
        if (mine === asked) problem.textContent = ` ${error.message}`;
      }
    };
    context.addEventListener("change", apply);
    cacheType.addEventListener("change", apply);
    card.replaceChildren(
      el("h3", {text: "Memory: will it fit?"}),
      weightsTable(mem.weights),
      kvCache(mem.kv_cache),
      el("h4", {text: "Fits: weights + KV cache"}),
      el("div", {class: "fits-controls"},
        el("label", {}, "context ", context, " tokens"),
        el("label", {}, "KV cache ", cacheType),
        el("span", {id: "fits-kv", dataset: {bytes: String(fits.kv_bytes)},
                    text: fits.kv_included ? `KV cache at this context: ${bytes(fits.kv_bytes)}` : "KV cache unknown: weights only"}),
        problem),
      fitsTable(fits),
      el("p", {class: "small muted", text: mem.note}));
  };
  draw(memory);
  return card;
}

// The cards for `model` (model.js): a note while its details are still on their way, nothing
// when it has no architecture block. `request` is ctx.request (worker-client.js).
export function architectureCards(model, request) {
  if (!model.details) {
    return [el("section", {class: "card", id: "architecture-pending"},
      el("p", {class: "muted", text: "Working out the architecture and the memory it needs…"}))];
  }
  if (!model.architecture || !model.memory) return [];
  const recompute = async (context, cacheType) => {
    const {result} = await request("architecture", {context, cache_type: cacheType}, {label: "Estimating…"});
    return result.memory;
  };
  return [architectureCard(model.architecture), parametersCard(model.architecture.parameters),
          memoryCard(model.memory, recompute)];
}
