"""A known-answer report of what tensorloupe reads from a set of files, run twice: in CPython and
in Pyodide (under Node). The two JSON reports must be identical, number for number: that is the
proof that the pure-Python library behaves the same in the browser as on the command line.

Standard library and tensorloupe only (this file runs inside Pyodide).
"""

from __future__ import annotations

import hashlib
import json
import sys

import tensorloupe
import random

from tensorloupe.architecture import report as arch_report
from tensorloupe import colormap, moe, report, synthetic, tokens
from tensorloupe.moe import gram, redundancy
from tensorloupe.errors import TensorloupeError
from tensorloupe.jsonable import bounded, json_number
from tensorloupe.web import handlers, page_table

SMALL_SAMPLES = 4096          # every tensor: a small sample (quantized decoding is slow-ish)
FULL_SAMPLES_TENSORS = 3      # the first few tensors of a file: the default sample, as the CLI
EXACT_LIMIT = 200_000         # exact statistics for tensors up to this many elements


def numbers(values) -> list:
    return [json_number(v) for v in values]


def tensor_report(t) -> dict:
    out = {"descriptor": t.to_json()}
    if t.problem:
        return out
    try:
        small = tensorloupe.sample(t, SMALL_SAMPLES)
        out["sample_small"] = small.to_json()
        out["histogram"] = tensorloupe.histogram(small.values, 32).to_json()
        g = tensorloupe.grid(t, 17, 23)
        out["grid"] = g.to_json()
        out["grid_rgba_sha256"] = hashlib.sha256(colormap.rgba(g.floats(), g.amax)).hexdigest()
        out["values_head"] = numbers(tensorloupe.values(t, 0, 48))
        out["values_middle"] = numbers(tensorloupe.values(t, t.numel // 2, 16))
        if t.numel <= EXACT_LIMIT:
            out["exact"] = tensorloupe.exact_stats(t).to_json()
    except TensorloupeError as e:
        out["error"] = [type(e).__name__, str(e)]
    return out


def file_report(path: str) -> dict:
    try:
        ckpt = tensorloupe.open(path)
    except TensorloupeError as e:
        return {"error": [type(e).__name__, str(e)]}
    with ckpt:
        out = {"inspect": bounded(report.inspect_json(ckpt)), "moe": moe.detect(ckpt).to_json()}
        out["opened_with"] = {"bytes_read": ckpt.bytes_read(), "reads": ckpt.reads()}
        out["architecture"] = bounded(arch_report.describe(ckpt))
        if ckpt.format == "gguf" and tokens.TOKENS in ckpt.metadata:
            vocab = tokens.vocabulary(ckpt)
            out["tokens"] = {**vocab.summary(), **vocab.page(0, 300), "search": vocab.search("a", 20)}
        tensors = {}
        for i, t in enumerate(ckpt.tensors):
            entry = tensor_report(t)
            if i < FULL_SAMPLES_TENSORS and not t.problem and "error" not in entry:
                entry["sample_default"] = tensorloupe.sample(t).to_json()
            tensors[t.name] = entry
        out["tensors"] = tensors
        out["total"] = {"bytes_read": ckpt.bytes_read(), "reads": ckpt.reads()}
    return out


def web_report(path: str) -> dict:
    """The worker's handlers on the same file: the envelopes the page receives."""
    session = handlers.Session()
    handlers.session = session
    opened = json.loads(handlers.dispatch("open", json.dumps({"path": path}))[0])
    out = {"open": opened}
    named = page_table.records(opened["result"]["tensors"], opened["result"]["files"]) if opened["ok"] else []
    if named:
        first = next((t["name"] for t in named if not t["problem"]), None)
        if first:
            out["tensor"] = json.loads(handlers.dispatch("tensor", json.dumps({"name": first}))[0])
            text, buffers = handlers.dispatch("heatmap", json.dumps({"name": first, "rows": 64, "cols": 64}))
            out["heatmap"] = json.loads(text)
            out["heatmap_buffers"] = [hashlib.sha256(b).hexdigest() for b in buffers]
    return out


def gram_vectors() -> list[list[float]]:
    """40 vectors (3 blocks of rows) made without libm (random bits, exact divisions): noise at
    scales from 1e-300 to 1e300, a copy, a negation, a spike among tiny values, zeros, short ones."""
    rng = random.Random(7)
    vectors = []
    for i in range(36):
        scale = 10.0 ** (i * 17 % 601 - 300) if i % 3 == 0 else 2.0 ** (i % 9 - 4)
        vectors.append([(rng.getrandbits(32) - (1 << 31)) / (1 << 31) * scale for _ in range(3000)])
    vectors += [list(vectors[4]), [-x for x in vectors[5]], [1e6] + [x * 1e-9 for x in vectors[6][1:]],
                [0.0] * 3000]
    vectors[7] = vectors[7][:1234]
    return vectors


def build(paths: list[str]) -> dict:
    demo = synthetic.demo_bytes()
    out = {"python": "parity-v1", "demo_sha256": hashlib.sha256(demo).hexdigest(),
           "palette_sha256": hashlib.sha256(colormap.palette_rgba()).hexdigest(), "files": {}}
    # Expert similarities: integer arithmetic, so bit for bit the same (gram.py).
    analysis = redundancy.analyse(tensorloupe.open(demo)).to_json()
    del analysis["moe"]
    out["redundancy"] = analysis
    out["gram"] = gram.cosine_matrix(gram_vectors())
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        out["files"][name] = {"library": file_report(path), "web": web_report(path)}
    return out


def main(argv: list[str]) -> None:
    """parity.py OUT.json FILE...: write the report (used under Node, where stdout is noisy)."""
    result = build(argv[1:])
    with open(argv[0], "w") as f:
        json.dump(result, f, sort_keys=True, allow_nan=False)


if __name__ == "__main__":
    main(sys.argv[1:])
