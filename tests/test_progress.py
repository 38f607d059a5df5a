"""Progress of long work on stderr, and Ctrl-C (issue 27).

The CLI runs in a subprocess whose stderr is a pseudo-terminal (so isatty is true, as for a
user at a terminal) and whose stdout is a file: the progress line must appear on the terminal,
be redrawn with carriage returns at most ~10 times a second and be cleared at the end, while
stdout gets not a byte more than with stderr on a pipe. SIGINT is sent once the first progress
line has been read from the terminal (state, not time): exit 130, one line, no traceback, and an
interrupted convert leaves neither its output nor its temporary file.
"""

import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

from tensorloupe.progress import Meter, left

PYLIB = str(Path(__file__).resolve().parent.parent / "pylib")
COLS = 4096


def q8_gguf(path: Path, rows: int, byte: int = 0) -> Path:
    """A Q8_0 GGUF of one rows x 4096 tensor, every byte `byte`, written by gguf-py: decoding it is
    pure-Python work proportional to its size, so the run lasts long enough, deterministically."""
    w = GGUFWriter(str(path), "llama")
    w.add_tensor("w", np.full((rows, COLS // 32 * 34), byte, np.uint8), raw_dtype=Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("progress")
    return {"medium": q8_gguf(out / "medium.gguf", 1024),    # 4M elements: a few seconds
            "large": q8_gguf(out / "large.gguf", 8192),      # 32M: interrupted long before the end
            "other": q8_gguf(out / "other.gguf", 8192, 1)}   # other bytes: a diff decodes them


class Run:
    """The CLI in a subprocess: stderr on a pseudo-terminal (or a pipe), stdout to a file."""

    def __init__(self, tmp_path: Path, *argv, tty: bool = True):
        self.out_path = tmp_path / f"stdout-{time.monotonic_ns()}"
        self.stdout = open(self.out_path, "wb")
        env = {**os.environ, "PYTHONPATH": PYLIB, "COLUMNS": "200"}
        if tty:
            self.master, slave = pty.openpty()
            err = slave
        else:
            self.master, err = None, subprocess.PIPE
        self.proc = subprocess.Popen([sys.executable, "-m", "tensorloupe.cli", *map(str, argv)],
                                     stdin=subprocess.DEVNULL, stdout=self.stdout, stderr=err, env=env)
        if tty:
            os.close(slave)
        self.err = b""

    def read_until(self, pattern: bytes, timeout: float = 120) -> None:
        """Read the terminal until `pattern` has appeared (or the process ended)."""
        deadline = time.monotonic() + timeout
        while pattern not in self.err and time.monotonic() < deadline:
            if not self._read(deadline - time.monotonic()):
                break

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], max(0.0, timeout))
        if not ready:
            return False
        try:
            chunk = os.read(self.master, 65536)
        except OSError:   # EIO: the other end is closed, the process is gone
            return False
        self.err += chunk
        return bool(chunk)

    def finish(self, timeout: float = 120) -> tuple[int, bytes, bytes]:
        if self.master is None:
            _, self.err = self.proc.communicate(timeout=timeout)
        else:
            while self._read(timeout):
                pass
            os.close(self.master)
        code = self.proc.wait(timeout)
        self.stdout.close()
        return code, self.out_path.read_bytes(), self.err


def test_the_meter_draws_bytes_rate_and_time_left_at_most_ten_times_a_second():
    now = [0.0]
    stream = io.StringIO()
    meter = Meter(stream, "stats --exact", clock=lambda: now[0])
    meter(1, 100)                        # within the first half second: nothing
    assert stream.getvalue() == ""
    for step in range(1, 41):            # 40 updates, 1/16 s apart: at most 10 draws a second
        now[0] = 0.5 + step / 16
        meter(step * 2_000_000, 100_000_000)
    lines = stream.getvalue().split("\r")[1:]
    assert len(lines) == 20
    assert lines[-1].rstrip() == "stats --exact: 78.0 of 100.0 MB, 26.6 MB/s, 1 s left"
    meter.clear()
    assert stream.getvalue().endswith("\r" + " " * len(lines[-1].rstrip()) + "\r")


def test_items_are_counted_with_what_was_read_and_times_are_said_in_minutes_and_hours():
    stream = io.StringIO()
    read = iter([1000, 3_001_000])
    meter = Meter(stream, "diff", "tensors", read=lambda: next(read), clock=lambda: 2.0, delay=0)
    meter.start = 0.0
    meter(3, 10)
    assert stream.getvalue() == "\rdiff: 3 of 10 tensors, 3.0 MB read, 1.5 MB/s, 5 s left"
    assert (left(200), left(7500)) == ("3 min 20 s", "2 h 5 min")


def test_stats_exact_shows_progress_on_a_terminal_and_clears_it(files, tmp_path):
    run = Run(tmp_path, "stats", "--exact", files["medium"], "w", "--json")
    code, out, err = run.finish()
    assert code == 0
    lines = re.findall(rb"\rstats --exact: ([\d.,]+) of ([\d.,]+) MB, [\d.,]+ MB/s", err)
    assert lines and {total for _, total in lines} == {b"8.9"}   # two passes over 4.46 MB
    assert err.endswith(b"\r") and b"\n" not in err              # the line is cleared at the end
    # stdout is the same bytes as with stderr on a pipe, where no progress is drawn at all
    piped = Run(tmp_path, "stats", "--exact", files["medium"], "w", "--json", tty=False)
    code2, out2, err2 = piped.finish()
    assert (code2, err2) == (0, b"") and out2 == out and b"\r" not in out


def test_quiet_silences_progress_on_a_terminal(files, tmp_path):
    code, out, err = Run(tmp_path, "stats", "--exact", files["medium"], "w", "--quiet").finish()
    assert (code, err) == (0, b"") and out.startswith(b"w  Q8_0  1024\xc3\x974096")


def test_ctrl_c_during_stats_exits_130_with_one_line(files, tmp_path):
    run = Run(tmp_path, "stats", "--exact", files["large"], "w")
    run.read_until(b"MB/s")
    assert b"MB/s" in run.err, run.err
    run.proc.send_signal(signal.SIGINT)
    code, out, err = run.finish()
    assert code == 130
    tail = err.replace(b"\r\n", b"\n").rsplit(b"\r", 1)[-1]  # after the cleared progress line
    assert tail.strip() == b"tensorloupe: interrupted" and b"Traceback" not in err
    assert out == b""


@pytest.mark.parametrize("command", ["convert", "extract"])
def test_ctrl_c_during_convert_leaves_no_file(files, tmp_path, command):
    target = tmp_path / "out" / "large.safetensors"
    target.parent.mkdir()
    run = Run(tmp_path, command, files["large"], target, *(["--names", "w"] if command == "extract" else []))
    run.read_until(b"MB/s")
    assert run.err.startswith(b"\r" + command.encode() + b": "), run.err
    run.proc.send_signal(signal.SIGINT)
    code, _, err = run.finish()
    assert code == 130 and b"Traceback" not in err and err.rstrip().endswith(b"tensorloupe: interrupted")
    assert list(target.parent.iterdir()) == []                # neither OUT nor OUT.tmp-XXXX


@pytest.mark.parametrize("argv, label", [
    (("health", "--exact", "{large}", "--json"), b"health: "),
    (("diff", "--exact", "{large}", "{other}", "--json"), b"diff: "),
    (("values", "{large}", "w", "--count", "33554432", "--json"), b"values: "),
    (("stats", "{large}", "--json"), None),   # a sample of one tensor: quick, no line at all
])
def test_every_long_command_shows_progress_and_stops_on_ctrl_c(files, tmp_path, argv, label):
    run = Run(tmp_path, *[a.format(**files) for a in argv])
    if label is None:
        code, out, err = run.finish()
        assert (code, err) == (0, b"") and json.loads(out)
        return
    run.read_until(b"MB/s")
    assert run.err.startswith(b"\r" + label) and b" MB" in run.err, run.err
    run.proc.send_signal(signal.SIGINT)
    code, out, err = run.finish()
    assert code == 130 and b"Traceback" not in err, err
    assert err.replace(b"\r\n", b"\n").rsplit(b"\r", 1)[-1] == b"tensorloupe: interrupted\n"
    assert b"\r" not in out     # stdout never has a progress line (an interrupted JSON is cut short)


def many_tensors(path: Path, n: int) -> Path:
    """A safetensors header of n one-element tensors named as an MoE's experts are (120,000: ~4 s
    of inspect, most of it the passes over the names)."""
    header = {f"model.layers.{i // 1000}.mlp.experts.{i % 1000}.down_proj.weight":
              {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in range(n)}
    head = json.dumps(header).encode()
    path.write_bytes(len(head).to_bytes(8, "little") + head + bytes(4 * n))
    return path


def test_inspect_of_a_large_header_shows_its_passes_and_stops_on_ctrl_c(tmp_path):
    path = many_tensors(tmp_path / "many.safetensors", 120_000)
    run = Run(tmp_path, "inspect", path)
    code, out, err = run.finish()
    assert code == 0
    shares = [int(s) for s in re.findall(rb"\rinspect: 120,000 tensors: (\d+)%, ", err)]
    assert len(shares) >= 3 and shares == sorted(shares) and shares[-1] <= 100, err
    assert err.endswith(b"\r") and b"\n" not in err            # the line is cleared at the end
    piped = Run(tmp_path, "inspect", path, tty=False)           # stdout: not a byte more
    code2, out2, err2 = piped.finish()
    assert (code2, err2) == (0, b"") and out2 == out and b"120,000" in out
    run = Run(tmp_path, "inspect", path, "--json")
    run.read_until(b"%, ")
    run.proc.send_signal(signal.SIGINT)
    code, _, err = run.finish()
    assert code == 130 and b"Traceback" not in err, err
    assert err.replace(b"\r\n", b"\n").rsplit(b"\r", 1)[-1] == b"tensorloupe: interrupted\n"


def test_passes_put_each_pass_after_the_ones_before_it_on_one_meter():
    from tensorloupe.progress import Passes, every
    calls = []
    passes = Passes(lambda done, total: calls.append((done, total)), 10, 4)
    for k in range(4):
        assert list(every(range(10), passes.part(k), 10, step=5)) == list(range(10))
    assert calls == [(0, 40), (5, 40), (10, 40), (15, 40), (20, 40), (25, 40), (30, 40), (35, 40)]
    assert Passes(None, 10, 2).part(1) is None and list(every("ab", None, 2)) == ["a", "b"]
    stream = io.StringIO()
    meter = Meter(stream, "inspect: 10 tensors", "%", clock=lambda: 2.0, delay=0)
    meter.start = 0.0
    meter(25, 40)
    assert stream.getvalue() == "\rinspect: 10 tensors: 62%, 1 s left"
