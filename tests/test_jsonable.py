"""The one bounded renderer: hostile values render within their limits, without str() or repr()."""

import json

from tensorloupe.jsonable import FULL, MESSAGE, PICKLED, PREVIEW, bounded, json_number, quoted


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def test_depth_limit_limits():
    """The page's preview took a depth argument and ignored it; now every limit applies."""
    # Not thousands deep: freeing such a list overflows Pyodide's stack, where this test runs too.
    out = bounded(nested(300), PREVIEW)
    levels = 0
    while isinstance(out, list):
        out, levels = out[0], levels + 1
    assert out == "…" and levels == PREVIEW.depth
    assert len(json.dumps(bounded(nested(300), FULL))) < 1000


def test_huge_integers_are_hex_not_a_crash():
    big = 7 ** 20_000  # str() refuses over 4,300 digits
    assert bounded(big) == hex(big)
    assert bounded({"n": 2 ** 64 - 1}) == {"n": 2 ** 64 - 1}  # uint64 metadata stays a number
    assert quoted(big).startswith('"0x')


def test_cycles_and_shared_references():
    loop = []
    loop.append(loop)
    assert bounded(loop) == ["<cycle>"]
    shared = [1, 2, 3]
    laughs = [shared] * 10
    for _ in range(30):  # 10**30 leaves if expanded: the node budget stops it
        laughs = [laughs] * 10
    assert len(json.dumps(bounded(laughs, PICKLED))) < 100_000


def test_items_and_text_are_cut_with_a_count():
    out = bounded(list(range(100)), PREVIEW)
    assert out[:48] == list(range(48)) and out[48] == "… 52 more (100 items)"
    assert bounded("x" * 5000, PREVIEW) == "x" * 4000 + "… (5,000 characters)"
    cut = bounded({str(i): i for i in range(100)}, PICKLED)
    assert len(cut) == 65 and cut["…"] == "36 more entries"


def test_unknown_objects_are_named_by_type_only():
    class Hostile:
        def __str__(self):
            raise AssertionError("str() was called")
        __repr__ = __str__

    assert bounded({"x": Hostile()}, MESSAGE) == {"x": "<Hostile>"}
    assert bounded({Hostile(): 1}) == {"<Hostile>": 1}


def test_non_finite_floats_and_bytes():
    assert bounded([float("nan"), float("inf"), -float("inf"), 1.5]) == ["nan", "inf", "-inf", 1.5]
    assert json_number(complex(1, float("nan"))) == [1.0, "nan"]
    assert bounded(b"\x00\x01" * 40) == {"bytes": 80, "head": "0001" * 8}
