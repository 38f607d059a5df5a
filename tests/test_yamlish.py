"""The YAML subset NeMo configs use (formats/yamlish.py): known answers inline (stdlib only, so
this module runs in Pyodide too); tests/test_nemo.py compares a whole config with PyYAML."""

import pytest

from tensorloupe.formats import yamlish
from tensorloupe.formats.yamlish import YamlError


def test_mappings_sequences_and_scalars():
    text = """---
# a comment
name: Conformer   # trailing comment
rate: 16000
on: true
off: false
nothing: null
tilde: ~
lr: 1.0e-03
small: 1e-6
neg: -2
quoted: 'it''s # not a comment'
double: "tab\\there \\u00e9"
model:
  layers:
  - {name: conv, k: 3}
  - name: attn
    heads: 4
  -
    name: ff
  dims: [4, [5, 6], "x, y"]
  empty:
list_at_key_indent:
- 1
- 2
"""
    assert yamlish.loads(text) == {
        "name": "Conformer", "rate": 16000, "on": True, "off": False, "nothing": None,
        "tilde": None, "lr": 1.0e-03, "small": 1e-6, "neg": -2,
        "quoted": "it's # not a comment", "double": "tab\there é",
        "model": {"layers": [{"name": "conv", "k": 3}, {"name": "attn", "heads": 4},
                             {"name": "ff"}],
                  "dims": [4, [5, 6], "x, y"], "empty": None},
        "list_at_key_indent": [1, 2]}


@pytest.mark.parametrize("text, message", [
    ("a: !!python/object/apply:os.system [ls]", "a YAML tag"),
    ("a: &x 1\nb: *x", "anchors and aliases"),
    ("a: *x", "anchors and aliases"),
    ("a: |\n  text", "block scalars"),
    ("a: 1\n---\nb: 2", "several YAML documents"),
    ("a: 1\na: 2", "appears twice"),
    ("a:\n\tb: 1", "indentation with a tab"),
    ("a: 'open", "does not end"),
    ("a: [1, 2", "does not end"),
    ("a: 1\n  b: 2", "unexpected indentation"),
])
def test_what_is_refused_by_name(text, message):
    with pytest.raises(YamlError, match=message):
        yamlish.loads(text)


def test_depth_is_bounded():
    deep = "".join(f"{'  ' * i}k{i}:\n" for i in range(100)) + "  " * 100 + "v: 1\n"
    with pytest.raises(YamlError, match="nested more than 64 deep"):
        yamlish.loads(deep)
    with pytest.raises(YamlError, match="flow collections nested"):
        yamlish.loads("a: " + "[" * 100 + "]" * 100)
