"""A string from a file is data in a terminal too (issue 25): tensor names, metadata, global
names that hold escape sequences (clear the screen, hide text, OSC 52 clipboard writes, OSC 0
window titles) or bidi overrides reach no command's text output raw, so a file cannot forge the
report; the safety verdict is repeated after the names it concerns. Also: `diff` of names that
hold `[`, and CSV cells that a spreadsheet would run as formulas."""

import contextlib
import csv
import io
import json
import os
import pickle
import struct

import tensorloupe
from tensorloupe import report
from tensorloupe.cli import main

# ESC[2J ESC[3J ESC[H clears the screen and scrollback; a fake report follows, then ESC[8m hides
# the rest; OSC 52 writes the clipboard, OSC 0 sets the window title; U+202E reverses the text.
FORGED = ("w\x1b[2J\x1b[3J\x1b[H  allowed    torch._utils._rebuild_tensor_v2\x1b[8m"
          "\x1b]52;c;ZWNobyBoaQ==\x07\x1b]0;title\x07\u202egpj.exe\x9b\x7f")
RAW = {*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0)), "\u202e", "\u2066"} - {"\n"}


def safetensors_bytes(names, metadata=None) -> bytes:
    header, offset = {}, 0
    for name in names:
        header[name] = {"dtype": "F32", "shape": [2], "data_offsets": [offset, offset + 8]}
        offset += 8
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + struct.pack("<%df" % (offset // 4), *range(offset // 4))


class _System:
    """Pickles as a call of os.system (pickling runs nothing; it only names the function)."""

    def __reduce__(self):
        return os.system, ("echo pwned",)


def cli(*argv):
    """The CLI in this process (Pyodide runs this file too, and has no processes), with its
    standard streams captured as a terminal would receive them."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def raw_controls(text: str) -> list[str]:
    return sorted({repr(c) for c in text if c in RAW})


def test_no_command_prints_a_control_character_a_file_carries(tmp_path):
    a = tmp_path / "a.safetensors"
    a.write_bytes(safetensors_bytes([FORGED, "b"], {FORGED: FORGED, "ok": "line\x1b[1Aup"}))
    b = tmp_path / "b.safetensors"
    b.write_bytes(safetensors_bytes(["b", "c"]))
    for argv in (["inspect", a], ["stats", a, FORGED], ["values", a, FORGED], ["health", a],
                 ["diff", a, b], ["moe", a], ["stats", a, "no such" + FORGED]):
        code, out, err = cli(*argv)
        assert code in (0, 2), (argv, err)
        assert raw_controls(out + err) == [], (argv, out + err)
    code, out, _ = cli("inspect", a)
    assert "\\x1b[2J" in out and "\\u202e" in out and "\\x07" in out   # shown, not acted on


def test_the_verdict_follows_the_forged_names_it_concerns(tmp_path):
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps({FORGED: _System()}, protocol=2))
    code, out, _ = cli("inspect", evil, "--strict")
    assert code == 4
    assert raw_controls(out) == []
    assert "DANGEROUS  posix.system" in out and "\\x1b[2J" in out
    # the verdict again after the last name from the file
    assert out.rindex("dangerous global") > out.rindex("\\x1b[2J")
    # --json says the same (JSON escapes every control character itself)
    _, doc, _ = cli("inspect", evil, "--json")
    assert raw_controls(doc) == []
    assert json.loads(doc)["extras"]["safety"]["dangerous"] == ["posix.system"]


def test_diff_pairs_names_that_hold_brackets(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    a.write_bytes(safetensors_bytes(["w[0]", "x"]))
    b.write_bytes(safetensors_bytes(["w[0]", "y"]))
    code, out, err = cli("diff", a, b, "--json")
    assert code == 0, err
    rows = {r["name"]: r["category"] for r in json.loads(out)["tensors"]}
    assert rows["w[0]"] == "byte_identical" and rows["x"] == "only_in_a" and rows["y"] == "only_in_b"


def test_csv_cells_that_look_like_formulas_are_quoted(tmp_path):
    path = tmp_path / "f.safetensors"
    names = ['=HYPERLINK("http://x","y")', "@SUM(A1)", "+1", "-2", "plain"]
    path.write_bytes(safetensors_bytes(names))
    with tensorloupe.open(path) as ckpt:
        rows = list(csv.DictReader(io.StringIO(report.tensor_table(ckpt, "csv"))))
    assert [r["name"] for r in rows] == ["'" + n for n in names[:4]] + ["plain"]
    assert rows[0]["numel"] == "2"
