"""The page's compact tensor table (web/page_table.py): decoded as web/model.js decodes it, it is
`inspect --json`'s tensor records (less `info`) for every kind of checkpoint, whatever the names."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

import tensorloupe
from tensorloupe.web.page_table import bytes_by_dtype, page_table, records

OUT = Path(__file__).resolve().parents[2] / "fixtures" / "out"


def safetensors_bytes(entries: dict) -> bytes:
    header, offset = {}, 0
    for name, (dtype, shape, nbytes) in entries.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(offset)


def expected(ckpt) -> list[dict]:
    keys = ("name", "dtype", "shape", "numel", "nbytes", "offset", "strides", "problem", "file")
    return [{k: t.to_json().get(k) for k in keys} for t in ckpt.tensors]


def round_trip(ckpt) -> dict:
    table = json.loads(json.dumps(page_table(ckpt), allow_nan=False))   # as the page gets it
    assert records(table, ckpt.files) == expected(ckpt)
    return table


@pytest.mark.parametrize("name", ["views.pt", "dtypes.pt", "legacy.pt", "tiny-moe.gguf",
                                  "every-type.gguf", "demo-moe.safetensors"])
def test_every_format_round_trips(name):
    # torch views carry strides; a ZIP's offsets are null until located; GGUF and the demo share kinds.
    with tensorloupe.open(str(OUT / name)) as ckpt:
        round_trip(ckpt)


def test_shards_give_each_tensor_its_file():
    folder = OUT / "sharded-moe"
    with tensorloupe.open(sorted(str(p) for p in folder.glob("*.safetensors"))) as ckpt:
        assert len(ckpt.files) > 1
        table = round_trip(ckpt)
        assert set(table["file"]) == set(range(len(ckpt.files)))


def test_tensors_of_one_kind_are_sent_once():
    # 40 tensors, two (dtype, shape) pairs: two kinds, and the names as one string.
    entries = {f"layers.{i}.w": ("BF16", [4, 8], 64) for i in range(20)}
    entries.update({f"layers.{i}.b": ("F32", [8], 32) for i in range(20)})
    with tensorloupe.open(safetensors_bytes(entries), name="kinds.safetensors") as ckpt:
        table = round_trip(ckpt)
    assert len(table["kinds"]) == 2 and isinstance(table["names"], str)
    assert bytes_by_dtype(table) == {"BF16": 20 * 64, "F32": 20 * 32}


def test_a_name_with_a_newline_is_sent_as_a_list():
    # A header may name a tensor "a\nb": joined by newlines, the names would split wrongly.
    entries = {"a\nb": ("F32", [2], 8), "c": ("F32", [2], 8), "": ("F16", [1], 2)}
    with tensorloupe.open(safetensors_bytes(entries), name="newline.safetensors") as ckpt:
        table = round_trip(ckpt)
    assert table["names"] == ["a\nb", "c", ""]


def test_unknown_dtypes_keep_their_problem_and_bytes():
    entries = {"odd": ("X9", [3], 5), "odd2": ("X9", [3], 7), "ok": ("U8", [3], 3)}
    with tensorloupe.open(safetensors_bytes(entries), name="odd.safetensors") as ckpt:
        table = round_trip(ckpt)
    assert [r["problem"] is not None for r in records(table, ckpt.files)] == [True, True, False]
    assert bytes_by_dtype(table) == {"X9": 12, "U8": 3}


def test_no_tensors():
    with tensorloupe.open(safetensors_bytes({}), name="empty.safetensors") as ckpt:
        table = round_trip(ckpt)
    assert table["count"] == 0 and table["names"] == []
