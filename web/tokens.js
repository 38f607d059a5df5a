// The Tokens tab (GGUF): the tokenizer's summary (model, pre-tokenizer, size, merges, special
// tokens, chat template) and its vocabulary one page at a time, or the tokens matching a search.
// The worker decodes only the page asked for (request("tokens", {start, count} | {find})): the
// same answer as `tensorloupe tokens FILE --json`.

import {clear, el, grouped} from "./util.js";

const PAGE = 50;

export class TokenView {
  constructor(container, request) {
    this.container = container;
    this.request = request;
    this.start = 0;
    this.loaded = false;
  }

  reset() {
    this.start = 0;
    this.loaded = false;
    clear(this.container);
  }

  async show() {
    if (!this.loaded) await this.load({start: 0, count: PAGE});
  }

  async load(args) {
    const {result} = await this.request("tokens", args, {label: "Reading the vocabulary…"});
    this.loaded = true;
    if (result.start !== undefined) this.start = result.start;
    this.render(result);
  }

  render(doc) {
    clear(this.container);
    const special = Object.entries(doc.special).map(([label, s]) => el("tr", {dataset: {special: label}},
      el("th", {scope: "row", text: label}), el("td", {class: "num", text: String(s.id)}),
      el("td", {}, el("code", {text: s.shown ?? s.problem ?? ""}))));
    const facts = [["model", doc.model], ["pre-tokenizer", doc.pre], ["vocabulary", doc.size === null ? null : grouped(doc.size)],
                   ["merges", doc.merges === null ? null : grouped(doc.merges)]].filter(([, v]) => v !== null && v !== undefined);
    const startInput = el("input", {type: "number", id: "token-start", min: "0", value: String(this.start), "aria-label": "First token id"});
    startInput.addEventListener("change", () => this.load({start: Math.max(0, Number(startInput.value) | 0), count: PAGE}));
    const find = el("input", {type: "search", id: "token-find", placeholder: "find text or id", value: doc.find ?? ""});
    find.addEventListener("keydown", (e) => {
      if (e.key !== "Enter") return;
      if (find.value === "") this.load({start: this.start, count: PAGE});
      else this.load({find: find.value, count: PAGE});
    });
    const rows = doc.tokens ?? doc.matches;
    const heading = doc.find !== undefined
      ? `${rows.length} tokens matching “${doc.find}”${doc.truncated ? " (more not shown)" : ` (all ${grouped(doc.scanned)} searched)`}`
      : `Tokens ${grouped(doc.start)}–${grouped(doc.start + doc.count - 1)} of ${grouped(doc.size)}`;
    const prev = el("button", {type: "button", id: "token-prev", text: "◀ previous", disabled: doc.find !== undefined || this.start === 0,
                               onclick: () => this.load({start: Math.max(0, this.start - PAGE), count: PAGE})});
    const next = el("button", {type: "button", id: "token-next", text: "next ▶",
                               disabled: doc.find !== undefined || this.start + PAGE >= doc.size,
                               onclick: () => this.load({start: this.start + PAGE, count: PAGE})});
    this.container.append(
      el("section", {class: "card", id: "tokenizer"}, el("h3", {text: `Tokenizer (${doc.source})`}),
        el("table", {class: "kv"}, el("tbody", {}, facts.map(([k, v]) => el("tr", {}, el("th", {scope: "row", text: k}), el("td", {text: v}))))),
        special.length ? el("table", {class: "kv", id: "special-tokens"}, el("tbody", {}, special)) : null,
        doc.chat_template ? el("details", {id: "chat-template"},
          el("summary", {text: `Chat template (${grouped(doc.chat_template.length)} characters${doc.chat_template.truncated ? ", truncated" : ""})`}),
          el("pre", {text: doc.chat_template.text})) : null),
      el("section", {class: "card", id: "vocabulary"},
        el("div", {class: "token-controls"}, prev, el("label", {}, " from id ", startInput, " "), next, " ", find),
        el("h3", {id: "token-heading", text: heading}),
        el("table", {class: "grid-table", id: "token-table"},
          el("thead", {}, el("tr", {}, ["id", "token", "type", "score"].map((h) => el("th", {text: h})))),
          el("tbody", {}, rows.map((t) => el("tr", {dataset: {id: String(t.id)}},
            el("td", {class: "num", text: String(t.id)}), el("td", {}, el("code", {class: "token", text: t.shown})),
            el("td", {text: t.type ?? ""}), el("td", {class: "num", text: t.score === null ? "" : String(t.score)})))))));
  }
}
