// A diffusers pipeline folder's components (tensorloupe.opening.pipeline: extras["pipeline"]),
// one row per component as `tensorloupe inspect` prints them: library and class from
// model_index.json, the tensors and parameters of its weights, and its config.json's fields.
import {el} from "./dom.js";
import {bytes, grouped} from "./format.js";

export function pipelineCard(pipeline) {
  const rows = pipeline.components.map((c) => el("tr", {dataset: {component: c.name}},
    el("td", {}, el("code", {text: c.name})),
    el("td", {text: [c.library, c.class].filter(Boolean).join(".")}),
    el("td", {class: "num", text: c.tensors === undefined ? "" : grouped(c.tensors)}),
    el("td", {class: "num", text: c.parameters === undefined ? "no weights" : grouped(c.parameters)}),
    el("td", {text: c.tensors === undefined ? "" : `${bytes(c.bytes)} · ${c.format} · ${c.files.join(", ")}`}),
    el("td", {class: "pipeline-config", text: Object.entries(c.config || {})
      .filter(([k]) => k !== "_class_name").map(([k, v]) => `${k} ${JSON.stringify(v)}`).join(", ")})));
  return el("section", {class: "card", id: "pipeline", dataset: {class: pipeline.class || ""}},
    el("h3", {text: `Pipeline · ${pipeline.class || "diffusers"}`}),
    el("p", {class: "muted", text: `${pipeline.components.length} components in model_index.json; tensors are named <component>/<tensor>.`}),
    el("table", {class: "pipeline"},
      el("thead", {}, el("tr", {}, ...["component", "class", "tensors", "parameters", "weights", "config"]
        .map((h) => el("th", {text: h})))),
      el("tbody", {}, rows)));
}
