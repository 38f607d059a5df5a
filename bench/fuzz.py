"""Fuzz tensorloupe's readers with format-aware mutations, in one worker process under limits.

    python bench/fuzz.py --format safetensors --seconds 3600 [--inputs 1000000]
    python bench/fuzz.py --format all --inputs 2000          # a short pass over every format
    python bench/fuzz.py --format gguf --replay 12345 --save /tmp/in   # write one input back out

Formats: safetensors, gguf, split (split GGUF pairs and safetensors shards with an index),
pytorch-zip, pytorch-legacy (legacy pickles and tars), onnx, numpy, dduf, llamafile (bench/fuzz_containers.py), hdf5, keras, nemo (bench/fuzz_hdf5.py).
Seeds and formats: bench/fuzz_inputs.py,
mutators: bench/fuzz_mutators.py. Torch seeds
are the small files fixtures/make.py writes to fixtures/out/ (or --seeds-dir).

Each input goes through what the CLI does with a file: open (detect or shards), the JSON and text
reports, a small sample with its histogram and a few values of the first tensors, a page of a lazy GGUF array. Any
exception but a TensorloupeError is a finding, reported by class and place (the innermost
tensorloupe file:line); so is MemoryError under the address-space limit (RLIMIT_AS: what the
worker maps with the input plus --as-limit-mb), an input
during which the worker's peak RSS, less the input's own bytes (the peak is reset once the input
has arrived), passed --rss-limit-mb (the worker is then restarted, so each such finding is one
input), and a hang: an input that has used more than --timeout seconds of the worker's CPU time,
or is still running after --wall-timeout seconds (the parent kills the worker, records the input
and starts a new worker on the next one). CPU time, not wall time, because the reader's work is
what is limited: on a loaded machine (2 cores, other jobs) an input of 0.3 s of CPU can take
10 s of wall time, which said nothing about the reader.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import io
import json
import multiprocessing
import os
import re
import resource
import sys
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "pylib"))
sys.path.insert(0, str(HERE.parent / "fixtures"))   # the polyglot seeds (polyglot_files.py)

from fuzz_inputs import FORMATS, Corpus  # noqa: E402

PROGRESS_EVERY = 200
# What may not reach a terminal raw (issue 25): C0 controls but newline, DEL, C1, bidi overrides
# and isolates, and the line/paragraph separators.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                         "\u2066-\u2069\u2028\u2029\ud800-\udfff]")
PACKAGE = os.sep + "tensorloupe" + os.sep


def exercise(files: list[tuple[str, bytes]]) -> None:
    """What `tensorloupe inspect` and the page do with a file, on in-memory bytes."""
    from tensorloupe.opening import detect, shards
    from tensorloupe import report
    from tensorloupe.sampler.sampling import sample, values
    from tensorloupe.formats.gguf import reader as gguf
    from tensorloupe.source.base import MemorySource

    sources = [MemorySource(data, name) for name, data in files]
    ckpt = detect.read(sources[0]) if len(sources) == 1 else shards.open_all(sources)
    json.dumps(report.inspect_json(ckpt))
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        report.print_inspect(ckpt)
    raw = RAW_CONTROL.search(text.getvalue())
    if raw:     # a string from the file reached the terminal unescaped (display.escaped missed it)
        raise AssertionError(f"raw control character {raw.group()!r} in the text report")
    for t in [t for t in ckpt.tensors if t.problem is None][:3]:
        sample(t, 64).histogram()          # the stats line and histogram the page shows first
        values(t, 0, 4)
    for key in list(ckpt.extras.get("gguf_arrays", {}))[:1]:
        record = ckpt.extras["gguf_arrays"][key]
        if record["kind"] == "array":
            gguf.read_array(ckpt, key, 1000, 5)
        else:
            gguf.read_string(ckpt, key, 0, 16)


def place(exc: BaseException) -> str:
    """The innermost frame in tensorloupe (else the innermost frame) as file:line."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if PACKAGE in f.filename] or frames
    if not ours:
        return "?"
    f = ours[-1]
    short = f.filename.split(PACKAGE, 1)[-1] if PACKAGE in f.filename else os.path.basename(f.filename)
    return f"{short}:{f.lineno}"


def peak_rss_kb() -> int:
    """The process's peak RSS since the last reset_peak(): VmHWM on Linux. (ru_maxrss would do
    but for exec: a worker spawned by a 300 MB parent such as pytest starts with its peak.)"""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def statm_bytes() -> tuple[int, int]:
    """(mapped, resident) bytes of this process, from /proc/self/statm."""
    with open("/proc/self/statm", "rb") as f:
        size, resident = f.read().split()[:2]
    page = os.sysconf("SC_PAGE_SIZE")
    return int(size) * page, int(resident) * page


def current_rss_kb() -> int:
    return statm_bytes()[1] >> 10


def _malloc_trim():
    try:
        import ctypes
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def collect_garbage(trim=_malloc_trim()) -> None:
    """Free what earlier inputs left as garbage before the next input's peak is measured: cyclic
    garbage (a failed read's error holds its traceback, whose frames hold the error and the
    input's bytes: freed at the next collection, which CPython times by object counts, not bytes;
    a 180 MB input lingered into the next one's peak), and the C heap's free pages (glibc's
    malloc_trim: freed but still resident). Memory an earlier input still holds stays resident
    and is counted."""
    gc.collect()
    if trim is not None:
        trim(0)


def limit_address_space(headroom: int, hard: int) -> None:
    """RLIMIT_AS at what the worker maps now (the input included) plus `headroom`: a reader that
    allocates without bound gets a MemoryError (a finding) after `headroom` bytes, whatever the
    input's own size. Only the soft limit is set, so that it can be lifted to receive the next
    input (a pipe's message is read whole, then unpickled: two copies of a 500 MB input)."""
    soft = statm_bytes()[0] + headroom
    resource.setrlimit(resource.RLIMIT_AS, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (proc(5), clear_refs)
    except OSError:
        pass


def feed(corpus: Corpus, run_seed: int, start: int, stop: int, inbox) -> None:
    """The parent's thread that makes inputs start.. and sends them to one worker, until the worker
    is gone. Inputs are made here, not in the worker: making a 180 MB input (a pickle opcode
    repeated 9M times, re-tarred) takes a few copies of it and leaves the maker's heap grown, which
    the worker would then carry into the next inputs' RSS."""
    try:
        for index in range(start, stop):
            inbox.send(corpus.input(run_seed, index))
    except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
        pass  # the worker ended (done, restarted after a finding, or killed)
    except Exception as e:    # a mutator's own bug: the run stops and says so, never waits on
        FEED_FAILURES.append((index, traceback.format_exc(limit=-3)))
        inbox.close()


FEED_FAILURES: list = []


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()   # the name in (...) may hold spaces
    utime, stime = int(fields[11]), int(fields[12])     # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def worker(start, stop, deadline, limits, conn, inbox, current, started, started_cpu) -> None:
    as_bytes, rss_kb = limits
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    sys.setrecursionlimit(3000)
    from tensorloupe.errors import TensorloupeError
    pending = inbox.recv() if start < stop else None
    limit_address_space(as_bytes, hard)
    with contextlib.suppress(Exception):
        exercise(pending)  # warm the imports; this input is run again below
    reset_peak()
    index = start
    last_sent = start
    opened = worst = 0  # worst: the highest per-input peak so far, which progress reports
    while index < stop and time.monotonic() < deadline:
        if pending is None:
            resource.setrlimit(resource.RLIMIT_AS, (hard, hard))  # receiving takes two copies
            pending = inbox.recv()
        files, pending = pending, None
        # The peak from here on is the reader's: the input's own bytes are held by this loop, as
        # a file would be on disk, which is not the reader's doing. What the reader copies or
        # builds from them counts, and so does what earlier inputs left in the heap.
        held_kb = sum(len(data) for _, data in files) >> 10
        if current_rss_kb() - held_kb > 64 << 10:
            collect_garbage()
        limit_address_space(as_bytes, hard)
        reset_peak()
        current.value = index
        started_cpu.value = time.process_time()
        started.value = time.monotonic()
        try:
            exercise(files)
            opened += 1
        except TensorloupeError:
            pass
        except MemoryError as e:
            conn.send(("finding", index, "MemoryError", place(e), "over the address-space limit"))
        except RecursionError as e:
            conn.send(("finding", index, "RecursionError", place(e), str(e)[:200]))
        except Exception as e:  # noqa: BLE001 - the point: every non-library exception is a finding
            conn.send(("finding", index, type(e).__name__, place(e), str(e)[:200]))
        started.value = 0.0
        index += 1
        peak = peak_rss_kb() - held_kb
        worst = max(worst, peak)
        if peak > rss_kb:
            conn.send(("rss", index - 1, peak))
            break  # a fresh worker starts with a fresh peak
        if index - last_sent >= PROGRESS_EVERY:
            conn.send(("progress", index, worst, opened))
            last_sent, opened = index, 0
    conn.send(("progress", index, worst, opened))
    conn.send(("done", index, 0))


def run(fmt: str, seconds: float, inputs: int, run_seed: int, timeout: float, rss_mb: int,
        as_mb: int, seeds_dir: Path, save: Path | None, log=print, start: int = 0,
        wall_timeout: float = 60.0) -> dict:
    ctx = multiprocessing.get_context("spawn")
    corpus = Corpus(fmt, seeds_dir)
    begin = time.monotonic()
    deadline = begin + seconds
    index, stop = start, inputs
    findings: dict[tuple, list] = collections.defaultdict(list)
    hangs: list[int] = []
    peak_kb = 0
    restarts = opened = 0
    last_log = begin
    while index < stop and time.monotonic() < deadline:
        parent, child = ctx.Pipe(duplex=False)
        inbox_out, inbox_in = ctx.Pipe(duplex=False)
        current, started = ctx.Value("q", index, lock=False), ctx.Value("d", 0.0, lock=False)
        started_cpu = ctx.Value("d", 0.0, lock=False)
        proc = ctx.Process(target=worker, args=(index, stop, deadline, (as_mb << 20, rss_mb << 10),
                                                child, inbox_out, current, started, started_cpu))
        proc.start()
        child.close()
        inbox_out.close()  # the worker holds the reading end: when it exits, the feeder's send fails
        feeder = threading.Thread(target=feed, args=(corpus, run_seed, index, stop, inbox_in), daemon=True)
        feeder.start()
        done = hung = False
        while not done:
            if parent.poll(0.2):
                try:
                    kind, at, *rest = parent.recv()
                except EOFError:
                    break
                if kind == "finding":
                    findings[(rest[0], rest[1])].append((at, rest[2]))
                elif kind == "rss":
                    findings[("RSS", f"over {rss_mb} MB")].append((at, f"peak {rest[0] >> 10} MB"))
                    peak_kb = max(peak_kb, rest[0])
                    index = at + 1
                elif kind == "progress":
                    index, peak_kb = at, max(peak_kb, rest[0])
                    opened += rest[1]
                elif kind == "done":
                    index, done = at, True
            elif not proc.is_alive():
                break
            if FEED_FAILURES:
                at, trace = FEED_FAILURES.pop()
                proc.kill()
                raise RuntimeError(f"the {fmt} mutator failed making input {at}:\n{trace}")
            t0, cpu0 = started.value, started_cpu.value
            if t0 and (time.monotonic() - t0 > wall_timeout
                       or _cpu_or_zero(proc.pid) - cpu0 > timeout) and started.value == t0:
                hangs.append(current.value)
                hung = True
                proc.kill()
                index = current.value + 1
                break
            if time.monotonic() - last_log > 60:
                last_log = time.monotonic()
                log(f"  {fmt}: {index:,} inputs, {time.monotonic() - begin:.0f} s, "
                    f"{sum(map(len, findings.values()))} findings, {len(hangs)} hangs, "
                    f"peak {peak_kb >> 10} MB")
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join()
        feeder.join()
        inbox_in.close()
        if not done and not hung and proc.exitcode != 0:
            # The worker died without a word (killed by the kernel?): count the input it was on.
            findings[("crash", f"exit code {proc.exitcode}")].append((current.value, ""))
            index = current.value + 1
        restarts += 1
    elapsed = time.monotonic() - begin
    result = {"format": fmt, "inputs": index - start, "seconds": round(elapsed, 1),
              "rate": round((index - start) / elapsed, 1) if elapsed else 0.0,
              "non_library": sum(len(v) for k, v in findings.items() if k[0] not in ("RSS",)),
              "opened": opened, "hangs": len(hangs),
              "over_rss": len(findings.get(("RSS", f"over {rss_mb} MB"), ())),
              "peak_rss_mb": peak_kb >> 10, "workers": restarts,
              "findings": {f"{cls} at {where}": {"count": len(v), "first": v[0][0], "message": v[0][1]}
                           for (cls, where), v in sorted(findings.items(), key=lambda kv: -len(kv[1]))},
              "hang_inputs": hangs[:20]}
    if save is not None:
        wanted = [v[0][0] for v in findings.values()] + hangs[:20]
        for at in wanted:
            write_input(corpus, run_seed, at, save / fmt)
    return result


def _cpu_or_zero(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except (OSError, IndexError, ValueError):   # the worker just exited
        return 0.0


def write_input(corpus: Corpus, run_seed: int, index: int, folder: Path) -> list[Path]:
    folder = folder / str(index)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, data in corpus.input(run_seed, index):
        (folder / name).write_bytes(data)
        out.append(folder / name)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--format", default="all", help=f"one of {', '.join(FORMATS)}, or all")
    p.add_argument("--seconds", type=float, default=60.0, help="time budget per format")
    p.add_argument("--inputs", type=int, default=10**9, help="stop after this many inputs per format")
    p.add_argument("--start", type=int, default=0, help="the first input's number (to re-run a stretch)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds of the worker's CPU time one input may take")
    p.add_argument("--wall-timeout", type=float, default=60.0,
                   help="seconds of wall time one input may take (a stall that uses no CPU)")
    p.add_argument("--rss-limit-mb", type=int, default=200)
    p.add_argument("--as-limit-mb", type=int, default=1024, help="address space a reader may add to what the worker maps with its input (RLIMIT_AS)")
    p.add_argument("--seeds-dir", type=Path, default=HERE.parent / "fixtures" / "out")
    p.add_argument("--save", type=Path, help="write each finding's first input under this folder")
    p.add_argument("--replay", type=int, help="write input number REPLAY to --save and exit")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    formats = FORMATS if args.format == "all" else (args.format,)
    if args.replay is not None:
        for fmt in formats:
            for path in write_input(Corpus(fmt, args.seeds_dir), args.seed, args.replay,
                                    args.save or Path(".")):
                print(path)
        return 0
    results = []
    for fmt in formats:
        r = run(fmt, args.seconds, args.start + args.inputs, args.seed, args.timeout, args.rss_limit_mb,
                args.as_limit_mb, args.seeds_dir, args.save, log=lambda s: print(s, flush=True),
                start=args.start, wall_timeout=args.wall_timeout)
        results.append(r)
        if not args.json:
            print(f"{fmt}: {r['inputs']:,} inputs in {r['seconds']} s ({r['rate']}/s), "
                  f"{r['opened']:,} opened, {r['non_library']} non-library exceptions, {r['hangs']} hangs, "
                  f"peak RSS {r['peak_rss_mb']} MB", flush=True)
            for what, f in r["findings"].items():
                print(f"    {f['count']:>6}  {what}  (first: input {f['first']}: {f['message'][:120]})")
            if r["hang_inputs"]:
                print(f"    hangs at inputs {r['hang_inputs']}")
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print(f"\n{'format':<16}{'inputs':>10}{'time s':>9}{'rate/s':>9}{'non-lib':>9}{'hangs':>7}"
              f"{'>RSS':>6}{'peak MB':>9}")
        for r in results:
            print(f"{r['format']:<16}{r['inputs']:>10,}{r['seconds']:>9}{r['rate']:>9}"
                  f"{r['non_library']:>9}{r['hangs']:>7}{r['over_rss']:>6}{r['peak_rss_mb']:>9}")
    return 1 if any(r["non_library"] or r["hangs"] or r["over_rss"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
