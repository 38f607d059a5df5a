// The Tokens tab (a view module, panels.js): the tokenizer a checkpoint carries (GGUF metadata, or
// tokenizer.json / tokenizer_config.json beside a local file): model, pre-tokenizer, size, merges,
// special tokens, chat template, and the vocabulary one page at a time, or the tokens matching a
// search by text or id. The worker decodes only the page asked for (request("tokens", {start,
// count} | {find, count})): the same answer as `tensorloupe tokens FILE --json`. Nothing is asked
// until the tab is first shown. The "Encode / decode" card turns text into token ids and ids
// into text (request("tokens_encode", {text} | {ids}, special)), as `tokens --encode/--decode`;
// the worker builds the encoder on the first use and keeps it with the model.

import {clear, el} from "./dom.js";
import {dropPath, grouped} from "./format.js";

export const id = "tokens";
export const title = "Tokens";
const PAGE = 50;

let panel = null;
let ctx = null;
let generation = 0;     // one per opened model: late replies for an older model are dropped
let wanted = false;     // the model has a tokenizer; loaded once the tab is shown
let loaded = false;
let start = 0;
let codec = null;       // the Encode / decode card: kept across pages of the vocabulary

export function mount(container, context) {
  panel = container;
  ctx = context;
}

export function available(model) {
  return Boolean(model.tokenizer);
}

export function show(model) {
  generation += 1;
  wanted = available(model);
  loaded = false;
  start = 0;
  codec = null;
  clear(panel);
  if (!wanted) return;
  codec = codecCard();
  panel.append(el("p", {class: "muted", id: "tokens-loading", text: "Reading the tokenizer…"}));
  if (!panel.hidden) relayout();   // the tab is showing already: the first page now
}

// Called when the tab becomes visible (or is resized): the first page is asked for then.
export function relayout() {
  if (wanted && !loaded) {
    loaded = true;
    load({start: 0, count: PAGE});
  }
}

async function load(args) {
  const mine = generation;
  try {
    const {result} = await ctx.request("tokens", args, {label: "Reading the vocabulary…"});
    if (mine !== generation) return;
    if (result.start !== undefined) start = result.start;
    render(result);
  } catch (error) {
    if (mine !== generation) return;
    const line = panel.querySelector("#token-problem");
    if (line) {
      line.textContent = error.message;
      line.hidden = false;
    } else {
      clear(panel).append(el("p", {class: "problem", id: "token-problem", text: error.message}));
    }
  }
}

function summaryCard(doc) {
  const facts = [["source", doc.file ? `${doc.source}: ${doc.file.split(", ").map(dropPath).join(", ")}` : doc.source], ["model", doc.model],
                 ["pre-tokenizer", doc.pre], ["vocabulary", doc.size === null ? null : `${grouped(doc.size)} tokens`],
                 ["merges", doc.merges === null || doc.merges === undefined ? null : grouped(doc.merges)]]
    .filter(([, v]) => v !== null && v !== undefined);
  const special = Object.entries(doc.special || {}).map(([label, s]) => el("tr", {dataset: {special: label}},
    el("th", {scope: "row", text: label}),
    el("td", {class: "num", text: String(s.id)}),
    el("td", {}, s.token === null || s.token === undefined
      ? el("span", {class: "muted", text: s.problem || ""}) : el("code", {class: "token", text: s.shown})),
    el("td", {class: "muted", text: s.type || ""})));
  const template = doc.chat_template;
  return el("section", {class: "card", id: "tokenizer"}, el("h3", {text: "Tokenizer"}),
    el("table", {class: "kv"}, el("tbody", {}, facts.map(([k, v]) =>
      el("tr", {dataset: {fact: k}}, el("th", {scope: "row", text: k}), el("td", {text: v}))))),
    special.length ? el("div", {},
      el("h4", {text: "Special tokens"}),
      el("table", {class: "kv compact", id: "special-tokens"}, el("tbody", {}, special))) : null,
    template ? el("details", {id: "chat-template"},
      el("summary", {text: `Chat template (${grouped(template.length)} characters${template.truncated ? ", first part shown" : ""})`}),
      el("pre", {text: template.text})) : el("p", {class: "small muted", text: "No chat template."}));
}

function render(doc) {
  const searching = doc.find !== undefined;
  const rows = searching ? doc.matches : doc.tokens;
  const startInput = el("input", {type: "number", id: "token-start", min: "0", max: String(Math.max(0, doc.size - 1)),
                                  value: String(start), "aria-label": "First token id"});
  startInput.addEventListener("change", () => {
    const n = Number(startInput.value);
    if (Number.isInteger(n) && n >= 0) load({start: Math.min(n, Math.max(0, doc.size - 1)), count: PAGE});
  });
  const find = el("input", {type: "search", id: "token-find", placeholder: "find text or id (Enter)",
                            value: searching ? doc.find : "", "aria-label": "Find tokens"});
  find.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    load(find.value === "" ? {start, count: PAGE} : {find: find.value, count: PAGE});
  });
  const heading = searching
    ? `${grouped(rows.length)} token${rows.length === 1 ? "" : "s"} matching “${doc.find}”`
      + (doc.truncated ? " (the first ones; refine the search for more)" : ` (all ${grouped(doc.scanned)} searched)`)
    : `Tokens ${grouped(doc.start)}–${grouped(doc.start + doc.count - 1)} of ${grouped(doc.size)}`;
  const prev = el("button", {type: "button", class: "button", id: "token-prev", text: "◀ previous",
                             disabled: searching || start === 0,
                             onclick: () => load({start: Math.max(0, start - PAGE), count: PAGE})});
  const next = el("button", {type: "button", class: "button", id: "token-next", text: "next ▶",
                             disabled: searching || start + PAGE >= doc.size,
                             onclick: () => load({start: start + PAGE, count: PAGE})});
  const scored = doc.scores !== false;
  const typed = doc.types !== false;
  clear(panel).append(
    summaryCard(doc),
    codec,
    el("section", {class: "card", id: "vocabulary"},
      el("h3", {text: "Vocabulary"}),
      el("div", {class: "token-controls"}, prev, el("label", {}, "from id ", startInput), next, find),
      el("p", {class: "problem", id: "token-problem", hidden: true}),
      el("h4", {id: "token-heading", dataset: {mode: searching ? "find" : "page"}, text: heading}),
      el("p", {class: "small muted", text: "Shown with invisible characters made visible: a space as ␣, control "
        + "characters as <0x0A>, other invisible code points as <U+200B>."}),
      // A column the vocabulary has no data for (BPE stores no scores) is left out, not shown empty.
      el("table", {class: "grid-table", id: "token-table"},
        el("thead", {}, el("tr", {}, el("th", {class: "num", text: "id"}), el("th", {text: "token"}),
                                typed ? el("th", {text: "type"}) : null,
                                scored ? el("th", {class: "num", text: "score"}) : null)),
        el("tbody", {}, rows.map((t) => el("tr", {dataset: {id: String(t.id)}},
          el("td", {class: "num", text: String(t.id)}),
          el("td", {}, el("code", {class: "token", text: t.shown})),
          typed ? el("td", {text: t.type ?? ""}) : null,
          scored ? el("td", {class: "num", text: t.score === null || t.score === undefined ? "" : String(t.score)}) : null))))));
}

// Encode: the ids (a line to copy) and each token made visible; Decode: the text of ids typed as
// "1, 2, 3". Errors (an id outside the vocabulary, a tokenizer part not implemented) are shown
// in the card, by name.
function codecCard() {
  const text = el("textarea", {id: "encode-text", rows: "3", placeholder: "text to encode",
                               "aria-label": "Text to encode"});
  const special = el("input", {type: "checkbox", id: "encode-special", checked: true});
  const ids = el("input", {type: "text", id: "decode-ids", placeholder: "ids to decode: 1, 2, 3",
                           "aria-label": "Token ids to decode"});
  const problem = el("p", {class: "problem", id: "codec-problem", hidden: true});
  const encoded = el("div", {id: "encoded", hidden: true});
  const decoded = el("div", {id: "decoded", hidden: true});
  const mine = generation;
  async function run(args, label) {
    problem.hidden = true;
    try {
      const {result} = await ctx.request("tokens_encode", {...args, special: special.checked}, {label});
      if (mine !== generation) return null;
      return result;
    } catch (error) {
      if (mine !== generation) return null;
      problem.textContent = error.message;
      problem.hidden = false;
      problem.dataset.seq = String(Number(problem.dataset.seq || 0) + 1);
      return null;
    }
  }
  const encode = el("button", {type: "button", class: "button", id: "encode-button", text: "Encode",
    onclick: async () => {
      const result = await run({text: text.value}, "Encoding…");
      if (!result) return;
      clear(encoded).append(
        el("p", {class: "small muted", id: "encoded-count",
                 text: `${grouped(result.characters)} characters → ${grouped(result.count)} token${result.count === 1 ? "" : "s"}`}),
        el("pre", {id: "encoded-ids", class: "ids", text: result.ids.join(", ")}),
        el("div", {id: "encoded-pieces", class: "pieces"}, result.pieces.map((p, i) =>
          el("code", {class: "token", dataset: {id: String(result.ids[i])}, title: `id ${result.ids[i]}`, text: p}))));
      encoded.hidden = false;
      encoded.dataset.seq = String(Number(encoded.dataset.seq || 0) + 1);
    }});
  const decode = el("button", {type: "button", class: "button", id: "decode-button", text: "Decode",
    onclick: async () => {
      const result = await run({ids: ids.value}, "Decoding…");
      if (!result) return;
      clear(decoded).append(el("pre", {id: "decoded-text", class: "decoded", text: result.text}));
      decoded.hidden = false;
      decoded.dataset.seq = String(Number(decoded.dataset.seq || 0) + 1);
    }});
  text.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) encode.click();
  });
  ids.addEventListener("keydown", (event) => {
    if (event.key === "Enter") decode.click();
  });
  return el("section", {class: "card", id: "codec"}, el("h3", {text: "Encode / decode"}),
    text, el("div", {class: "token-controls"}, encode,
      el("label", {}, special, " special tokens (added around the text: BOS, [CLS] … [SEP]; kept in decoded text)")),
    encoded,
    el("div", {class: "token-controls"}, ids, decode),
    decoded, problem);
}
