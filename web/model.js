// The Summary's "What model is this, and will it fit" block: the architecture with the source of
// every value, parameters by component (training state apart), the memory estimate with its
// formulas, and the fits table at a context length the user can change (the worker recomputes
// it: request("architecture", {context, cache_type})). The numbers are the CLI's
// `tensorloupe inspect --json` "architecture" and "memory" objects, rendered as they come.

import {bytes, clear, el, grouped} from "./util.js";

const COMPONENT_LABELS = {
  embeddings: "Embeddings", attention: "Attention", mlp: "MLP", experts: "Experts (routed)",
  shared_experts: "Shared experts", router: "Router", norms: "Norms", output_head: "Output head",
  other: "Other",
};

function valueText(field) {
  const v = field.value;
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (typeof v === "number") return Number.isInteger(v) ? grouped(v) : String(v);
  if (v === null) return "none";
  if (Array.isArray(v)) {
    return field.key === "sliding_layers" ? `${v.length} layers: ${ranges(v)}` : v.join(", ");
  }
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

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
  const sources = arch.sources.length ? `Values from ${arch.sources.join("; ")}, then the file itself.`
    : "No config found: values from the file itself.";
  const rows = arch.fields.map((f) => el("tr", {dataset: {key: f.key}},
    el("th", {scope: "row", text: f.label}),
    el("td", {class: "arch-value", text: valueText(f)}),
    el("td", {class: "arch-source", text: f.source})));
  return el("section", {class: "card", id: "architecture"},
    el("h3", {text: "Architecture"}),
    el("p", {class: "note", text: sources}),
    rows.length ? el("table", {class: "kv arch"}, el("tbody", {}, rows))
      : el("p", {text: "Nothing known: no config, no GGUF keys, no recognisable tensor names."}));
}

function parametersCard(params) {
  const total = params.total || 1;
  const rows = Object.entries(params.by_component).map(([key, c]) => el("tr", {dataset: {component: key}},
    el("th", {scope: "row", text: COMPONENT_LABELS[key] || key}),
    el("td", {class: "num", text: grouped(c.parameters)}),
    el("td", {class: "num", text: `${(c.parameters / total * 100).toFixed(1)}%`}),
    el("td", {class: "num", text: `${grouped(c.tensors)} tensors`})));
  const training = Object.entries(params.training_state).map(([key, c]) => el("tr", {dataset: {training: key}},
    el("th", {scope: "row", text: key}), el("td", {class: "num", text: grouped(c.parameters)}),
    el("td", {}, el("code", {text: c.example}))));
  const active = params.active === null ? `active per token unknown: ${params.active_formula}`
    : params.active !== params.total ? `${grouped(params.active)} active per token (${params.active_formula})` : null;
  return el("section", {class: "card", id: "parameters-by-component"},
    el("h3", {text: "Parameters by component"}),
    el("p", {}, el("strong", {id: "parameters-total", text: grouped(params.total)}), " parameters",
      active ? el("span", {id: "parameters-active", text: `, ${active}`}) : null),
    el("table", {class: "kv"}, el("tbody", {}, rows)),
    params.buffers.tensors ? el("p", {class: "note", text: `Buffers (not parameters): ${grouped(params.buffers.parameters)} in ${params.buffers.tensors} tensors, e.g. ${params.buffers.example}`}) : null,
    training.length ? el("div", {id: "training-state"},
      el("h4", {text: "Training state (in the file, not counted as parameters)"}),
      el("table", {class: "kv"}, el("tbody", {}, training))) : null);
}

function memoryTables(mem) {
  const weights = el("table", {class: "kv", id: "weights-table"}, el("tbody", {}, mem.weights.map((w) =>
    el("tr", {dataset: {precision: w.precision}}, el("th", {scope: "row", text: `weights ${w.precision}`}),
      el("td", {class: "num", text: bytes(w.bytes)}), el("td", {class: "formula", text: w.formula})))));
  const kv = mem.kv_cache;
  let cache;
  if (!kv.available) {
    cache = el("p", {id: "kv-unknown", text: `KV cache: cannot be estimated: ${kv.reason}.`});
  } else {
    const types = kv.per_token.map((p) => p.cache_type);
    const cell = (n, t) => kv.at.find((a) => a.context === n && a.cache_type === t);
    cache = el("div", {id: "kv-cache"},
      el("h4", {text: `KV cache (${kv.kind})`}),
      el("table", {class: "kv"}, el("tbody", {}, kv.per_token.map((p) =>
        el("tr", {dataset: {cacheType: p.cache_type}}, el("th", {scope: "row", text: `per token, ${p.cache_type}`}),
          el("td", {class: "num", text: `${grouped(p.bytes)} B`}), el("td", {class: "formula", text: p.formula}))))),
      el("table", {class: "grid-table", id: "kv-table"},
        el("thead", {}, el("tr", {}, el("th", {text: "context"}), types.map((t) => el("th", {class: "num", text: t})))),
        el("tbody", {}, kv.contexts.map((n) => el("tr", {dataset: {context: String(n)}},
          el("th", {scope: "row", text: `${grouped(n)}${n === kv.max_context ? " (model max)" : ""}`}),
          types.map((t) => el("td", {class: "num", title: cell(n, t).formula, text: bytes(cell(n, t).bytes)})))))));
  }
  return [weights, cache];
}

function fitsTable(fits) {
  const precisions = fits.rows[0].cells.map((c) => c.precision);
  return el("table", {class: "grid-table", id: "fits-table", dataset: {context: String(fits.context), cacheType: fits.cache_type}},
    el("thead", {}, el("tr", {}, el("th", {text: "memory"}), precisions.map((p) => el("th", {class: "num", text: p})))),
    el("tbody", {}, fits.rows.map((row) => el("tr", {dataset: {gb: String(row.memory_gb)}},
      el("th", {scope: "row", text: `${row.memory_gb} GB`}),
      row.cells.map((c) => el("td", {class: `fit ${c.fits ? "yes" : "no"}`, dataset: {precision: c.precision},
                                     title: `${bytes(c.total)} (${grouped(c.total)} B)`, text: c.fits ? "yes" : "no"}))))));
}

// `request` is the page's worker call; it re-renders the memory card at another context.
export function renderModel(container, model, request) {
  clear(container);
  if (!model) return;
  const memory = el("section", {class: "card", id: "memory"});
  const drawMemory = (mem) => {
    const fits = mem.fits;
    const context = el("input", {type: "number", id: "fits-context", min: "1", step: "1", value: String(fits.context),
                                 "aria-label": "Context length in tokens"});
    const cacheType = el("select", {id: "fits-cache-type", "aria-label": "KV cache type"},
      ["f16", "q8_0", "q4_0"].map((t) => el("option", {value: t, text: t, selected: t === fits.cache_type})));
    const apply = async () => {
      const n = Number(context.value);
      if (!Number.isInteger(n) || n < 1) { context.setCustomValidity("a whole number of tokens"); context.reportValidity(); return; }
      context.setCustomValidity("");
      const {result} = await request("architecture", {context: n, cache_type: cacheType.value}, {label: "Estimating…", quiet: true});
      drawMemory(result.memory);
    };
    context.addEventListener("change", apply);
    cacheType.addEventListener("change", apply);
    clear(memory).append(el("h3", {text: "Memory: will it fit?"}), ...memoryTables(mem),
      el("h4", {text: "Fits: weights + KV cache"}),
      el("div", {class: "fits-controls"},
        el("label", {}, "context ", context, " tokens"), el("label", {}, " KV cache ", cacheType),
        el("span", {id: "fits-kv", text: fits.kv_included ? ` KV cache at this context: ${bytes(fits.kv_bytes)}` : " KV cache unknown: weights only"})),
      fitsTable(fits), el("p", {class: "note", text: mem.note}));
  };
  drawMemory(model.memory);
  container.append(architectureCard(model.architecture), parametersCard(model.architecture.parameters), memory);
}
