"""Progress of long work on one terminal line: what is done of how much, the rate, the time left.

The work never prints: the loops that read (sampler, health, comparison, writing) take a
`progress(done, total)` callback, and the CLI hands them a `Meter`, which draws on stderr only
when stderr is a terminal (cli.py decides), redraws at most RATE times a second with a carriage
return, says nothing during the first DELAY seconds (a quick command stays silent), and clears
its line when the work ends or is interrupted: stdout never sees a byte of it.

Work is counted in bytes where the caller knows them (`unit="bytes"`), else in items (tensors);
`read` (a callable giving bytes read so far) adds what was read and its rate to an item count.
"""

from __future__ import annotations

import os
import time
from typing import Callable

RATE = 10        # redraws per second, at most
DELAY = 0.5      # seconds before the first draw


class Meter:
    """`meter(done, total)`: a progress callback that draws one redrawn line on `stream`."""

    def __init__(self, stream, what: str, unit: str = "bytes",
                 read: Callable[[], int] | None = None, clock: Callable[[], float] = time.monotonic,
                 delay: float = DELAY):
        self.stream, self.what, self.unit, self.read = stream, what, unit, read
        self.clock = clock
        self.start = clock()
        self.delay = delay
        self.drawn = 0.0      # when the line was last drawn (0: not shown)
        self.width = 0        # characters on the line now
        self.read_start = read() if read is not None else 0

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if now - self.start < self.delay or now - self.drawn < 1 / RATE:
            return
        self.drawn = now
        self._draw(self.line(done, total, now - self.start))

    def line(self, done: int, total: int, spent: float) -> str:
        done = min(done, total)
        if self.unit == "bytes":
            amount = f"{megabytes(done)} of {megabytes(total)} MB, {megabytes(done / spent)} MB/s"
        elif self.unit == "%":   # passes over the same items (Passes): a share of the work
            amount = f"{done / total:.0%}" if total else "0%"
        else:
            amount = f"{done:,} of {total:,} {self.unit}"
            if self.read is not None:
                got = self.read() - self.read_start
                amount += f", {megabytes(got)} MB read, {megabytes(got / spent)} MB/s"
        if 0 < done < total:
            amount += f", {left(spent * (total - done) / done)} left"
        return f"{self.what}: {amount}"

    def _draw(self, text: str) -> None:
        columns = self._columns() - 1
        text = text[:columns]
        pad = " " * max(0, self.width - len(text))
        # width first: a Ctrl-C between these statements still finds the line to clear
        self.width = max(self.width, len(text))
        self.stream.write("\r" + text + pad)
        self.stream.flush()
        self.width = len(text)

    def _columns(self) -> int:
        """The width of the terminal the line is drawn on: $COLUMNS, else stderr's own (stdout
        may be a file); 80 where neither says (a pseudo-terminal of size 0, a StringIO)."""
        if os.environ.get("COLUMNS", "").isdigit() and int(os.environ["COLUMNS"]) > 1:
            return int(os.environ["COLUMNS"])
        try:
            return os.get_terminal_size(self.stream.fileno()).columns or 80
        except (AttributeError, OSError, ValueError):
            return 80

    def clear(self) -> None:
        """Take the line away (the work ended, or was interrupted): the cursor is where it was."""
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

    def __enter__(self) -> "Meter":
        return self

    def __exit__(self, *exc) -> None:
        self.clear()


class Passes:
    """Progress over `passes` passes through the same `n` items (inspect: the MoE scan, the
    component count, the table), on one meter of unit "%": `part(k)` is the callback of pass k,
    whose item i is k * n + i of passes * n. None where there is no meter (nothing is drawn)."""

    def __init__(self, meter: Callable[[int, int], object] | None, n: int, passes: int):
        self.meter, self.n, self.passes = meter, n, passes

    def part(self, k: int) -> Callable[[int, int], None] | None:
        if self.meter is None:
            return None
        before, total = k * self.n, self.passes * self.n
        return lambda done, _n: self.meter(before + done, total)


def every(items, progress: Callable[[int, int], object] | None, n: int, step: int = 4096):
    """`items` (n of them), calling progress(i, n) before every step-th: a loop's progress at
    the cost of a counter."""
    if progress is None:
        yield from items
        return
    for i, item in enumerate(items):
        if not i % step:
            progress(i, n)
        yield item


class Scaled:
    """A progress callback for one piece of a larger job: `piece(done, total)` in the piece's own
    units reaches `meter` as `before + done * scale` of the job's `total`."""

    def __init__(self, meter: Callable[[int, int], object], before: int, scale: float, total: int):
        self.meter, self.before, self.scale, self.total = meter, before, scale, total

    def __call__(self, done: int, total: int) -> None:
        self.meter(self.before + int(done * self.scale), self.total)


def megabytes(n: float) -> str:
    return f"{n / 1e6:,.1f}"


def left(seconds: float) -> str:
    """About how long: `8 s`, `3 min 20 s`, `2 h 5 min`."""
    s = int(seconds + 0.5)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"
