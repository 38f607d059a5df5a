"""web/tree.js's tree, made lazily (kidsOf groups a node's tensors when first asked), run by
Node on awkward names and compared with a plain reference (every name split on dots, one map
per node, chains merged after): the same tree whatever the names share, repeat or leave empty."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

TREE_JS = Path(__file__).resolve().parents[2] / "web" / "tree.js"

# The tree as nested [label, tensor index, count, bytes, numeric, [kids...]].
DUMP = """
import {buildTree, expandAll} from %s;
const names = JSON.parse(process.argv[1]);
const tensors = names.map((name, i) => ({name, nbytes: i + 1}));
const dump = (n) => [n.label, n.tensor, n.count, n.bytes, n.numeric, n.kids.map(dump)];
process.stdout.write(JSON.stringify(dump(expandAll(buildTree(tensors), tensors))));
"""


def reference(names: list[str]):
    """The tree, the plain way: single-child chains merged (not at the root), numbered kids
    sorted as numbers; a node counts every tensor at or below it (a repeated name twice), and
    a repeated name's node is its last tensor."""
    root = {"label": "", "tensor": -1, "children": {}, "all": list(range(len(names)))}
    for index, name in enumerate(names):
        node = root
        for part in name.split("."):
            node = node["children"].setdefault(part, {"label": part, "tensor": -1, "children": {},
                                                      "all": []})
            node["all"].append(index)
        node["tensor"] = index

    def finish(node, is_root=False):
        while not is_root and node["tensor"] < 0 and len(node["children"]) == 1:
            (only,) = node["children"].values()
            node = {"label": f"{node['label']}.{only['label']}", "tensor": only["tensor"],
                    "children": only["children"], "all": only["all"]}
        # Numbered kids are told and sorted by their own part, before their chains are merged.
        labels = list(node["children"])
        numeric = len(labels) > 1 and all(k.isdigit() and k.isascii() for k in labels)
        if numeric:
            labels.sort(key=int)
        kids = [finish(node["children"][k]) for k in labels]
        return [node["label"], node["tensor"], len(node["all"]), sum(i + 1 for i in node["all"]),
                numeric, kids]
    return finish(root, is_root=True)


def build(names: list[str]):
    script = DUMP % json.dumps(TREE_JS.as_uri())
    out = subprocess.run(["node", "--input-type=module", "-e", script, json.dumps(names)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs node (npm ci)")


def test_awkward_names():
    names = ["model.layers.0.mlp.experts.0.up.weight", "model.layers.0.mlp.experts.0.up.bias",
             "model.layers.0.mlp.experts.1.up.weight", "model.layers.10.a", "model.layers.2.a",
             "model.layers.0.mlp.experts.0.down",      # back to a path left long ago
             "a.b", "a.b.c", "a.b", "a", "a.", "a..b", ".a", "", "", "ab.c", "a.bc", "a.b.cd",
             "x.y.z", "x.y", "x", "é.ü.ø", "é.ü", "😀.a", "😀.b", "😀a.b"]
    assert build(names) == reference(names)


def test_random_names_sharing_prefixes():
    rng = random.Random(11)
    parts = ["a", "b", "ab", "", "0", "1", "10", "2", "é", "😀"]
    names = [".".join(rng.choice(parts) for _ in range(rng.randint(1, 5))) for _ in range(600)]
    names.sort(key=lambda n: rng.random() < 0.3)     # mostly neighbours, some jumps
    assert build(names) == reference(names)
