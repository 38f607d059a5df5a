// One analysed MoE layer in detail: the experts x experts similarity matrix (click a cell: the two
// experts side by side, pair.js), its near-duplicate clusters, the recommendation lines exactly
// as tensorloupe.moe.redundancy words them, and the bar chart of the experts' scores.

import {PairView} from "./pair.js";
import {drawColorbar} from "./canvas.js";
import {clear, el} from "./dom.js";
import {bytes, fmt} from "./format.js";
import {clusterColour, drawScores, drawSimilarity, scoreIndex, similarityCell} from "./moecharts.js";

export const braces = (cluster) => `{${cluster.join(", ")}}`;

export function swatch(k) {
  const s = el("span", {class: "swatch"});
  s.style.background = clusterColour(k);
  return s;
}

export class LayerView {
  constructor(app) {
    this.app = app;            // the page's ctx (panels.js)
    this.pair = new PairView(app);
    this.shown = null;         // {layer, clustered, refs}: the measured layer, its clusters now, its weights
    this.pixels = new Map();   // layer prefix -> the similarity matrix's RGBA pixels (from Python)
    this.generation = 0;
    const d = this.dom = {
      facts: el("span", {class: "muted small", id: "moe-layer-facts"}),
      sim: el("canvas", {id: "moe-similarity", tabindex: "0",
                         "aria-label": "Similarity of every pair of experts: click a cell (or arrows and Enter) to compare the two"}),
      bar: el("canvas", {class: "colorbar", id: "moe-sim-colorbar"}),
      simReadout: el("div", {class: "readout mono small", id: "moe-sim-readout"}),
      clusters: el("ul", {class: "clusters", id: "moe-clusters"}),
      recs: el("ul", {class: "recs", id: "moe-recs"}),
      scores: el("canvas", {id: "moe-scores", "aria-label": "Score of every expert"}),
      scoresNote: el("p", {class: "small muted", id: "moe-scores-note"}),
      scoreReadout: el("div", {class: "readout mono small", id: "moe-score-readout"}),
    };
    d.view = el("div", {class: "layer-view"},
      el("div", {class: "sim-box"},
        el("div", {class: "toolbar-title", text: "Similarity of experts"}),
        d.sim,
        el("div", {class: "colorbar-row"}, el("span", {class: "mono small", text: "−1"}), d.bar,
          el("span", {class: "mono small", text: "+1"}), el("span", {class: "muted small", text: "cosine of weight signatures"})),
        d.simReadout),
      el("div", {class: "layer-side"},
        el("div", {class: "toolbar-title", text: "Near-duplicate clusters"}), d.clusters,
        el("div", {class: "toolbar-title", text: "Recommendation"}), d.recs,
        el("div", {class: "toolbar-title", text: "Scores (AIMER-style)"}), d.scores, d.scoreReadout, d.scoresNote));
    d.sim.addEventListener("pointermove", (e) => this.simHover(similarityCell(d.sim, e)));
    d.sim.addEventListener("pointerleave", () => this.simHover(null));
    d.sim.addEventListener("click", (e) => {
      const cell = similarityCell(d.sim, e);
      if (cell) this.openPair(...cell);
    });
    d.sim.addEventListener("keydown", (e) => this.key(e));
    d.scores.addEventListener("pointermove", (e) => this.scoreHover(scoreIndex(d.scores, e)));
    d.scores.addEventListener("pointerleave", () => this.scoreHover(null));
  }

  // The facts line (goes into the layer header), the view, the pair view.
  elements() {
    return [this.dom.facts, this.dom.view, this.pair.element()];
  }

  setPalette(palette, levels) {
    drawColorbar(this.dom.bar, palette, levels);
    this.pair.setPalette(palette, levels);
  }

  // A new analysis (or a new file): cached pixels are stale.
  reset() {
    this.generation += 1;
    this.pixels.clear();
    this.shown = null;
    this.pair.close();
  }

  // Show `layer` (from the analysis) with `clustered` ({clusters, recommendations} at the current
  // threshold); `refs`: expert -> leaf -> {tensor, expert} from the MoE structure.
  show(layer, clustered, refs) {
    if (this.shown?.layer !== layer) {
      this.pair.close();
      this.selected = this.cursor = null;
    }
    this.shown = {layer, clustered, refs};
    this.simHover(null);
    this.scoreHover(null);
    this.draw();
  }

  async draw() {
    if (!this.shown) return;
    const d = this.dom;
    const {layer, clustered: {clusters, recommendations: recs}} = this.shown;
    d.facts.textContent = `${layer.prefix} · ${layer.experts.length} experts · signatures of ${layer.matrices.join(", ")} · ${bytes(layer.bytes_read)} read`;
    clear(d.clusters).append(...(clusters.length
      ? clusters.map((c, k) => el("li", {dataset: {cluster: c.join(",")}}, swatch(k), braces(c)))
      : [el("li", {class: "muted", text: "none at this threshold"})]));
    clear(d.recs).append(...(recs.length
      ? recs.map((r) => el("li", {dataset: {drop: String(r.drop), keep: String(r.keep)}, text: r.text}))
      : [el("li", {class: "muted", text: "no expert is redundant at this threshold"})]));
    const cluster = new Map();
    clusters.forEach((c, k) => c.forEach((e) => cluster.set(e, k)));
    drawScores(d.scores, {experts: layer.experts, cluster, dropped: new Set(recs.map((r) => r.drop)),
                          width: Math.max(260, d.scores.parentElement.clientWidth || 480)});
    Object.assign(d.scores.dataset, {layer: layer.prefix, scores: JSON.stringify(layer.experts.map((e) => e.score))});
    d.scoresNote.textContent = "mean |w| / rms(w) over each expert's sampled weights (scale-free). Colours: near-duplicate clusters, "
      + `faded: recommended to drop, grey: in no cluster. The axis starts at ${fmt(Number(d.scores.dataset.axisFrom), 3)}.`;
    const pixels = await this.similarityPixels(layer.prefix);
    if (!pixels || this.shown?.layer !== layer) return;
    drawSimilarity(d.sim, {pixels, values: layer.similarity, experts: layer.experts.map((e) => e.expert),
                           clusters: this.shown.clustered.clusters, selected: this.selected});
    Object.assign(d.sim.dataset, {layer: layer.prefix, values: JSON.stringify(layer.similarity),
                                  seq: String(Number(d.sim.dataset.seq || 0) + 1)});
  }

  async similarityPixels(prefix) {
    if (!this.pixels.has(prefix)) {
      const generation = this.generation;
      try {
        const {buffers} = await this.app.request("moe_similarity", {layer: prefix}, {quiet: true});
        if (generation !== this.generation) return null;
        this.pixels.set(prefix, buffers[0]);
      } catch (error) {
        if (generation === this.generation) this.dom.simReadout.textContent = error.message;
        return null;
      }
    }
    return this.pixels.get(prefix);
  }

  simHover(cell) {
    const out = this.dom.simReadout;
    if (!cell || !this.shown) {
      out.textContent = "Point at a cell to read it · click to compare the two experts";
      return;
    }
    const {layer, clustered} = this.shown;
    const [i, j] = cell;
    const [a, b] = [layer.experts[i].expert, layer.experts[j].expert];
    const together = a !== b && clustered.clusters.find((c) => c.includes(a) && c.includes(b));
    out.textContent = `expert ${a} × expert ${b}: cosine ${layer.similarity[i][j]}${together ? ` · cluster ${braces(together)}` : ""}`;
    Object.assign(out.dataset, {i: String(i), j: String(j), value: String(layer.similarity[i][j])});
  }

  // Arrow keys move a cursor over the cells (its value in the readout), Enter opens the pair.
  key(event) {
    if (!this.shown) return;
    const n = this.shown.layer.experts.length;
    const [i, j] = this.cursor || [0, 0];
    const moves = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]};
    if (moves[event.key]) {
      const [di, dj] = moves[event.key];
      this.cursor = [Math.max(0, Math.min(n - 1, i + di)), Math.max(0, Math.min(n - 1, j + dj))];
      this.simHover(this.cursor);
    } else if (event.key === "Enter" || event.key === " ") {
      this.openPair(i, j);
    } else {
      return;
    }
    event.preventDefault();
  }

  scoreHover(k) {
    const out = this.dom.scoreReadout;
    if (k === null || !this.shown) {
      out.textContent = "Point at a bar to read the expert's score";
      return;
    }
    const e = this.shown.layer.experts[k];
    const drop = this.shown.clustered.recommendations.some((r) => r.drop === e.expert);
    out.textContent = `expert ${e.expert}: score ${e.score} · rms ${fmt(e.rms)} · ‖W‖ ≈ ${fmt(e.norm)}${drop ? " · recommended to drop" : ""}`;
  }

  // Row i and column j of the matrix: those two experts side by side.
  openPair(i, j) {
    const {layer, refs} = this.shown;
    this.selected = [i, j];
    this.draw();
    this.pair.show({layer, experts: [layer.experts[i].expert, layer.experts[j].expert],
                    similarity: layer.similarity[i][j], refs});
  }
}
