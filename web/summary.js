// The Summary tab: file facts (and the bytes read so far), warnings, the pickle safety report,
// what model it is and whether it fits (architecture.js), parameters by dtype, model card,
// metadata, format extras. A view module (panels.js).

import {architectureCards} from "./architecture.js";
import {pipelineCard} from "./pipeline.js";
import {clear, download, el, fact} from "./dom.js";
import {bytes, count, grouped} from "./format.js";
import {saveForm, showExperts} from "./saveform.js";

export const id = "summary";
export const title = "Summary";
let panel = null;
let ctx = null;

export function mount(container, context) {
  panel = container;
  ctx = context;
  panel.append(el("p", {class: "muted boot-note", text: "Python is starting in the background…"}));
}

export function show(model) {
  render(panel, model, ctx.io);
}

// The architecture cards replace the note that stood in for them.
export function details(model) {
  document.getElementById("architecture-pending")?.replaceWith(...architectureCards(model, ctx.request));
  modelParameters(model.architecture?.parameters);
  showExperts(model);
}

// When the file stores more values than the model has parameters (buffers, training state, a tied
// view counted once: architecture/components.py), the header says so, as `inspect` does.
function modelParameters(params) {
  const stored = document.querySelector("#panel-summary .fact[data-key=parameters]");
  if (!stored || !params || params.total === Number(stored.dataset.values)) return;
  stored.querySelector(".fact-label").textContent = "values stored";
  stored.after(fact("model_parameters", "parameters", count(params.total), grouped(params.total)));
}

export function io(io) {
  const value = document.getElementById("io-value");
  if (!value || !io) return;
  value.textContent = bytes(io.bytes_read);
  document.getElementById("io-detail").textContent = ioDetail(io);
  document.getElementById("io").dataset.bytesRead = String(io.bytes_read);
  document.getElementById("io").dataset.batches = String(io.batches || 0);
  document.getElementById("io").dataset.prefetches = String(io.prefetches || 0);
}

const VERDICT_LABEL = {dangerous: "dangerous", inert: "inert", allowed: "allowed"};

function section(title, ...body) {
  return el("section", {class: "card"}, el("h3", {text: title}), ...body);
}

// A metadata value: JSON text inside a string (a config) is shown pretty-printed and folded.
function valueNode(value) {
  if (typeof value === "string") {
    const trimmed = value.trim();
    if ((trimmed.startsWith("{") || trimmed.startsWith("[")) && trimmed.length > 2) {
      try {
        const pretty = JSON.stringify(JSON.parse(trimmed), null, 2);
        return el("details", {}, el("summary", {text: `${trimmed.slice(0, 80)}${trimmed.length > 80 ? "…" : ""}`}),
                  el("pre", {text: pretty}));
      } catch { /* not JSON: shown as text below */ }
    }
    return value.length > 300
      ? el("details", {}, el("summary", {text: `${value.slice(0, 120)}…`}), el("pre", {text: value}))
      : el("span", {text: value});
  }
  if (value !== null && typeof value === "object") {
    const text = JSON.stringify(value, null, 2);
    return text.length > 120
      ? el("details", {}, el("summary", {text: `${text.replace(/\s+/g, " ").slice(0, 100)}…`}), el("pre", {text}))
      : el("code", {text: JSON.stringify(value)});
  }
  return el("span", {text: String(value)});
}

function table(rows, {keyClass = "key"} = {}) {
  return el("table", {class: "kv"}, el("tbody", {}, rows.map(([k, v]) =>
    el("tr", {}, el("th", {class: keyClass, scope: "row", text: k}), el("td", {}, valueNode(v))))));
}

// Quantised weights (quant/logical.py): which schemes, said by which file, and how many weights
// are shown as their real values (dequantised) or left as stored (packed, with the reason).
function quantisationCard(q) {
  const packed = q.packed || 0;
  return el("section", {class: "card", id: "quantisation", dataset: {dequantised: String(q.dequantised)}},
    el("h3", {text: "Quantised weights"}),
    el("p", {text: `${grouped(q.dequantised)} weight${q.dequantised === 1 ? " is" : "s are"} shown as `
      + `their real values, dequantised exactly from ${(q.schemes || []).join("; ") || q.method} `
      + `(the scheme from ${q.source}).`}),
    packed ? el("p", {class: "note", text: `${grouped(packed)} left as stored (packed, not dequantised).`}) : null);
}

// A LoRA adapter (adapters/): what it is and what it changes, as `inspect` says it
// (adapters/text.py): each adapted weight is listed as its ΔW = scale · B · A.
function adapterCard(a) {
  const kind = a.kind;   // adapters/pairs.py kind_of: the layout in words
  const card = el("section", {class: "card", id: "adapter", dataset: {delta: String(a.delta), layout: a.layout}},
    el("h3", {text: "Adapter"}));
  if (a.problem) {
    card.append(el("p", {text: `${kind} (from ${a.source}).`}), el("p", {class: "note", text: a.problem}));
    return card;
  }
  const list = (values) => (values || []).map((v) => (Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(6))))).join(", ");
  const pattern = (p) => Object.entries(p || {}).map(([k, v]) => `${k}: ${v}`).join(", ");
  const targets = Array.isArray(a.targets) ? a.targets.join(", ") : a.targets;
  const rows = [["adapter", `${kind} (from ${a.source})`], ["base model", a.base_model],
    ["rank", list(a.ranks)], ["alpha", list(a.alphas)],
    ["scale", `${list(a.scales)} (${a.rslora ? "alpha/√r: rsLoRA" : "alpha/r"})`], ["targets", targets],
    ["rank pattern", pattern(a.rank_pattern)], ["alpha pattern", pattern(a.alpha_pattern)],
    ["modules saved", (a.modules_to_save || []).join(", ")],
    ["DoRA", a.dora ? "yes: ΔW shown is the LoRA part only; the merged weight is also rescaled per output row by the magnitude vector" : ""],
    ["parameters", `${grouped(a.parameters)} stored in the adapter; ${grouped(a.delta)} weight${a.delta === 1 ? "" : "s"} shown as ΔW (${grouped(a.delta_values)} values)`],
    ["lora_bias", a.biases ? `${grouped(a.biases)} bias${a.biases === 1 ? "" : "es"} shown as Δb = scale · lora_B.bias` : ""]];
  card.append(el("table", {class: "kv"}, el("tbody", {}, rows.filter(([, v]) => v).map(([k, v]) =>
    el("tr", {dataset: {key: k}}, el("th", {class: "key", scope: "row", text: k}), el("td", {text: String(v)}))))));
  return card;
}

function safetyReport(safety) {
  // verdicts: allowed (rebuilt as data), inert (known not to run code), dangerous (runs code, or
  // not allow-listed and so may run code); each row says why
  const globals = safety.globals || [];
  const dangerous = globals.filter((g) => g.verdict === "dangerous");
  const notes = safety.notes || [];
  const calls = safety.calls || [];
  // bytes that are two files (formats/pytorch/loadpath.py): torch.load takes another path
  const twoFiles = safety.torch_reading
    ? `These bytes are two files: torch.load reads them as ${safety.torch_reading.format}, not as what is shown here. `
    : "";
  // a TorchScript archive (formats/pytorch/torchscript.py): one verdict for its classes, folded
  const script = safety.torchscript;
  const folded = new Set(script ? script.classes : []);
  const verdict = script
    ? `${twoFiles}A TorchScript archive: ${script.headline}. torch.jit.load compiles and runs that code; tensorloupe never does.`
    : twoFiles + (dangerous.length
    ? `${dangerous.length} dangerous global${dangerous.length > 1 ? "s" : ""}: loading this file with torch.load (weights_only=False) would run code (or may: names outside the allow-list are imported and called). tensorloupe never executes it.`
    : notes.length
      ? "The file's layout is deceptive: see the notes below."
      : globals.some((g) => g.verdict === "inert")
        ? "Only allow-listed or inert globals: nothing in the pickle asks to run code."
        : "Only allow-listed globals: nothing in the pickle asks to run code.");
  const rows = globals.filter((g) => !folded.has(g.name)).map((g) => el("tr", {class: `verdict-${g.verdict}`, dataset: {global: g.name}},
    el("td", {}, el("code", {text: g.name})),
    el("td", {}, el("span", {class: `badge ${g.verdict}`, text: VERDICT_LABEL[g.verdict] || g.verdict})),
    el("td", {class: "reason", text: g.reason || ""}),
    el("td", {class: "num", text: grouped(g.count ?? 1)})));
  const opcodes = safety.opcodes && Object.keys(safety.opcodes).length
    ? el("details", {class: "opcodes"}, el("summary", {text: "Pickle opcodes"}),
         el("pre", {text: Object.entries(safety.opcodes).map(([k, v]) => `${k} ${v}`).join("\n")}))
    : null;
  // what torch.load(weights_only=True) does with the file (the CLI's line, report.py weights_only_line)
  const loads = safety.weights_only;
  const refused = loads && !loads.loads;
  const torchLine = loads
    ? el("p", {class: `weights-only ${loads.loads ? "loads" : "refuses"}`, dataset: {loads: String(loads.loads)}},
        el("span", {text: (loads.member ? `torch.load(weights_only=True) of its ${loads.member}: `
                                        : "torch.load(weights_only=True), torch's default since 2.6: ") +
          (loads.loads ? "loads it" : "refuses it" +
            ((loads.refused || []).length ? ` (globals: ${loads.refused.join(", ")})` : ""))}),
        refused ? el("span", {class: "why", text: ` ${loads.why}`}) : null)
    : null;
  return el("section", {class: `card safety ${dangerous.length ? "danger" : notes.length || refused ? "caution" : "safe"}`,
                        id: "safety", dataset: {dangerous: String(dangerous.length),
                                                torchReading: safety.torch_reading ? safety.torch_reading.path : ""}},
    el("h3", {text: "Pickle safety report"}),
    el("p", {class: "verdict", text: verdict}),
    script ? el("details", {class: "torchscript", id: "torchscript", dataset: {classes: String(script.classes.length), codeFiles: String(script.code_files)}},
      el("summary", {text: `${grouped(script.classes.length)} TorchScript classes, ${grouped(script.code_files)} code files (listed, never run)`}),
      el("p", {class: "mono classes", text: script.classes.join(", ")}),
      el("ul", {class: "code-files"}, script.code.map((f) => el("li", {dataset: {name: f.name}},
        el("code", {text: f.name}), el("span", {class: "muted", text: ` ${bytes(f.size)}`}))))) : null,
    script ? null : torchLine,
    notes.length ? el("ul", {class: "safety-notes"}, notes.map((n) => el("li", {text: n}))) : null,
    globals.length ? el("table", {class: "globals"},
      el("thead", {}, el("tr", {}, el("th", {text: "global"}), el("th", {text: "verdict"}),
                             el("th", {text: "why"}), el("th", {class: "num", text: "uses"}))),
      el("tbody", {}, rows)) : null,
    calls.length ? el("div", {class: "safety-calls"},
      el("h4", {text: "Calls the pickle asks for (never made)"}),
      el("ul", {}, calls.map((c) => el("li", {},
        el("code", {text: `${c.global}(${(c.args || []).map((a) => JSON.stringify(a)).join(", ")}${c.kwargs ? ", **" + JSON.stringify(c.kwargs) : ""})`}))))) : null,
    opcodes);
}

const LARGEST = 10;

// The tensors that hold the most bytes, each a link to the Tensor tab.
function largestTensors(summary) {
  const largest = [...summary.tensors].sort((a, b) => b.nbytes - a.nbytes).slice(0, LARGEST);
  return el("section", {class: "card", id: "largest"},
    el("h3", {text: `Largest tensors (${largest.length} of ${grouped(summary.tensors.length)})`}),
    el("table", {class: "kv compact largest"}, el("tbody", {}, largest.map((t) =>
      el("tr", {dataset: {name: t.name}},
        el("th", {}, el("button", {type: "button", class: "link mono", text: t.name,
                                  onclick: () => ctx.selectTensor(t.name)})),
        el("td", {class: "mono", text: `${t.dtype} ${t.shape.join("×") || "scalar"}`}),
        el("td", {class: "num", text: bytes(t.nbytes)}))))));
}

// The tensor table as a file (tensorloupe.report.tensor_table: the CLI's records), downloaded.
function exportTable(summary) {
  const save = async (format) => {
    const {result} = await ctx.request("export_table", {format}, {label: "Writing the table…"});
    download(new Blob([result.text], {type: format === "csv" ? "text/csv" : "application/json"}), result.file);
  };
  const {controls, note} = saveForm(summary, ctx.request);
  return el("section", {class: "card", id: "export-table"},
    el("h3", {text: "Export"}),
    controls,
    el("div", {class: "button-row"},
      el("button", {type: "button", class: "button", id: "export-csv", text: "Tensor table as CSV", onclick: () => save("csv")}),
      el("button", {type: "button", class: "button", id: "export-json", text: "Tensor table as JSON", onclick: () => save("json")})),
    note);
}

// `summary`: the model (model.js), whose fields are `tensorloupe inspect --json`'s.
function render(container, summary, io) {
  clear(container);
  const byDtype = Object.entries(summary.parameters_by_dtype);
  const top = Math.max(1, ...byDtype.map((d) => d[1]));
  const parameters = fact("parameters", "parameters", count(summary.parameters), grouped(summary.parameters));
  parameters.dataset.values = String(summary.parameters);   // modelParameters compares with it
  container.append(
    el("div", {class: "summary-head"},
      el("h2", {class: "file-name", text: summary.file}),
      el("div", {class: "facts"},
        fact("format", "format", summary.extras.torchscript ? `TorchScript (a ${summary.format} archive)` : summary.format),
        fact("size", "size", bytes(summary.size), `${grouped(summary.size)} bytes`),
        fact("tensor_count", "tensors", grouped(summary.tensor_count)),
        parameters,
        el("div", {class: "fact", id: "io", dataset: {key: "io"}},
          el("div", {class: "fact-label", text: "read so far"}),
          el("div", {class: "fact-value", id: "io-value", text: io ? bytes(io.bytes_read) : "—"}),
          el("div", {class: "fact-detail", id: "io-detail", text: io ? ioDetail(io) : ""})))),
  );
  if (summary.warnings.length) {
    container.append(el("section", {class: "card warnings", id: "warnings"}, el("h3", {text: `Warnings (${summary.warnings.length})`}),
      el("ul", {}, summary.warnings.map((w) => el("li", {text: w})))));
  }
  const extras = {...summary.extras};
  if (extras.safety) {
    container.append(safetyReport(extras.safety));
    delete extras.safety;
  }
  delete extras.torchscript;      // shown in the safety report (its headline, classes, code files)
  if (extras.training) {
    container.append(trainingCard(extras.training));
    delete extras.training;
  }
  if (extras.pipeline) {           // a diffusers folder's components (web/pipeline.js)
    container.append(pipelineCard(extras.pipeline));
    delete extras.pipeline;
  }
  if (extras.quantisation) {
    container.append(quantisationCard(extras.quantisation));
    delete extras.quantisation;
  }
  if (extras.adapter) {
    container.append(adapterCard(extras.adapter));
    delete extras.adapter;
  }
  container.append(...architectureCards(summary, ctx.request));
  container.append(section("Parameters by dtype", el("table", {class: "dtypes"},
    el("thead", {}, el("tr", {}, el("th", {text: "dtype"}), el("th", {class: "num", text: "parameters"}),
      el("th", {class: "num", text: "share"}), el("th", {class: "num", text: "bytes"}), el("th", {text: ""}))),
    el("tbody", {}, byDtype.map(([dtype, n]) => {
      const size = summary.bytes_by_dtype[dtype] ?? 0;
      const bar = el("div", {class: "bar"});
      bar.style.width = `${(100 * n) / top}%`;
      return el("tr", {dataset: {dtype}},
        el("td", {}, el("span", {class: `dtype dtype-${dtype.toLowerCase()}`, text: dtype})),
        el("td", {class: "num", text: grouped(n)}),
        el("td", {class: "num", text: `${summary.parameters ? ((100 * n) / summary.parameters).toFixed(1) : "0"}%`}),
        el("td", {class: "num", text: bytes(size)}),
        el("td", {class: "bar-cell"}, bar));
    })))));
  container.append(largestTensors(summary), exportTable(summary));
  if (extras.model_card && Object.keys(extras.model_card).length) {
    container.append(section("Model card", table(Object.entries(extras.model_card))));
    delete extras.model_card;
  }
  const metadata = Object.entries(summary.metadata || {});
  if (metadata.length) {
    const heading = summary.format === "safetensors" ? "Metadata (__metadata__)" : "Metadata";
    container.append(el("section", {class: "card", id: "metadata"}, el("h3", {text: `${heading} · ${metadata.length}`}), table(metadata)));
  }
  const rest = Object.entries(extras).filter(([, v]) => v !== null && v !== undefined && !(typeof v === "object" && !Object.keys(v).length));
  if (rest.length) container.append(section("Format details", table(rest)));
}

// A training run's state beside the model (tensorloupe.opening.training: extras["training"]),
// one row per file, as `tensorloupe inspect` prints it: none of it counts as parameters.
function trainingCard(training) {
  const values = (c) => `${grouped(c.values)} values (${bytes(c.bytes)})`;
  const num = (v) => (typeof v === "number" && !Number.isInteger(v) ? String(Number(v.toPrecision(6))) : String(v));
  const line = (summary) => {
    if (summary.groups) {
      const moments = Object.entries(summary.moments).map(([k, c]) => `${k} ${values(c)}`).join(", ");
      return `${summary.group_count} parameter groups, ${grouped(summary.params)} parameters (${grouped(summary.params_with_state)} with state); ${moments || "no moments"}`;
    }
    if (summary.generators) return `generators: ${summary.generators.join(", ")}`;
    if (summary.fields) return `${summary.class} (${summary.field_count} fields)`;
    if (summary.log_history) {
      const facts = ["global_step", "max_steps", "epoch"].filter((k) => k in summary).map((k) => `${k} ${summary[k]}`);
      const losses = summary.log_history.filter((e) => "loss" in e);
      if (losses.length) facts.push(`loss ${num(losses[0].loss)} (step ${losses[0].step}) → ${num(losses.at(-1).loss)} (step ${losses.at(-1).step})`);
      return facts.join(", ");
    }
    const state = Object.entries(summary.state || {});
    return state.length ? state.map(([k, v]) => `${k} ${JSON.stringify(v)}`).join(", ")
      : `${summary.stored.tensors} tensors, ${values(summary.stored)}`;
  };
  const details = (summary) => {
    if (summary.groups) {
      return summary.groups.map((g, i) => `group ${i}: ${grouped(g.params)} parameters, step ${g.step}; ` +
        Object.entries(g.moments).map(([k, c]) => `${k} ${c.tensors} tensors ${values(c)}`).join(", ") + "; " +
        ["lr", "initial_lr", "weight_decay", "betas", "eps"].filter((k) => k in g.hyperparameters)
          .map((k) => `${k} ${JSON.stringify(g.hyperparameters[k])}`).join(", "));
    }
    if (summary.fields) return [Object.entries(summary.fields).map(([k, v]) => `${k} ${JSON.stringify(v)}`).join(", ")];
    if (summary.log_history) return summary.log_history.map((e) => Object.entries(e).map(([k, v]) => `${k} ${num(v)}`).join(", "));
    return [];
  };
  const rows = training.parts.map((p) => {
    const dangerous = p.safety ? (p.safety.dangerous || []) : [];
    const safety = !p.safety ? "" : dangerous.length
      ? `${dangerous.length} dangerous` : `${(p.safety.globals || []).length} globals, none dangerous`;
    const more = p.summary ? details(p.summary) : [];
    const loads = p.safety && p.safety.weights_only;
    return el("tr", {dataset: {file: p.file, kind: p.kind, dangerous: String(dangerous.length),
                               ...(loads ? {loads: String(loads.loads)} : {})},
                     class: dangerous.length ? "verdict-dangerous" : ""},
      el("td", {text: p.kind}),
      el("td", {}, el("code", {text: p.file})),
      el("td", {text: p.format || "?"}),
      el("td", {class: "num", text: bytes(p.size)}),
      el("td", {class: "training-summary"},
        el("span", {text: p.error ? `cannot be read: ${p.error}` : line(p.summary)}),
        more.length ? el("ul", {class: "training-details"}, more.map((m) => el("li", {text: m}))) : null),
      el("td", {class: "training-safety"}, p.safety
        ? el("span", {class: `badge ${dangerous.length ? "dangerous" : "allowed"}`, text: safety}) : null,
        dangerous.length ? el("ul", {class: "training-dangerous"}, dangerous.map((g) => el("li", {}, el("code", {text: g})))) : null,
        loads ? el("div", {class: "training-weights-only", title: loads.why,
                           text: `torch.load(weights_only=True): ${loads.loads ? "loads it" : "refuses it"}`}) : null));
  });
  return el("section", {class: "card", id: "training", dataset: {kind: training.kind}},
    el("h3", {text: `Training state · ${training.kind}`}),
    el("p", {class: "muted", text: `${training.parts.length} files beside the model; none of their values is counted as a parameter.`}),
    el("table", {class: "training"},
      el("thead", {}, el("tr", {}, ...["part", "file", "format", "size", "what it holds", "pickle safety"]
        .map((h) => el("th", {text: h})))),
      el("tbody", {}, rows)));
}

function ioDetail(io) {
  const share = io.size ? (100 * io.bytes_read) / io.size : 0;
  return `${grouped(io.reads)} reads · ${share < 0.01 && share > 0 ? "<0.01" : share.toFixed(share < 1 ? 2 : 1)}% of the file`;
}
