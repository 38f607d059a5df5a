"""`tensorloupe inspect|stats|values|moe|health|diff|demo`: the library on the command line.

Exit codes: 0 ok, 2 bad arguments (including an unknown tensor name), 3 the file cannot be read
or is invalid (the message goes to stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys

from . import open as open_checkpoint
from . import report
from .errors import TensorloupeError, UsageError
from .health import DEFAULT_BUDGET, DEFAULT_CONFIRM_BYTES, health, health_cost
from .health import text as health_text
from .redundancy import DEFAULT_SAMPLES_PER_MATRIX, DEFAULT_THRESHOLD, analyse
from .sample import DEFAULT_SAMPLES, exact_stats, histogram, sample, values
from .jsonable import bounded, json_number
from .compare import DEFAULT_SAMPLES as COMPARE_SAMPLES, compare

EXIT_OK, EXIT_USAGE, EXIT_INVALID = 0, 2, 3


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except UsageError as e:
        print(f"tensorloupe: {e}", file=sys.stderr)
        return EXIT_USAGE
    except TensorloupeError as e:
        print(f"tensorloupe: {e}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:
        return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorloupe",
                                     description="Look inside model checkpoints without executing them.")
    commands = parser.add_subparsers(dest="command", required=True)
    # Options every command that reads a checkpoint takes (argparse: after the command name).
    reading = argparse.ArgumentParser(add_help=False)
    reading.add_argument("--follow-redirects", action="store_true",
                         help="follow a URL's redirects to another site (same-site ones always are)")

    p = commands.add_parser("inspect", parents=[reading],
                            help="summary, metadata, warnings and the tensor table")
    p.add_argument("files", nargs="+", help="a checkpoint, or all shards of one")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run_inspect)

    p = commands.add_parser("stats", parents=[reading],
                            help="statistics and a histogram of tensors' values")
    p.add_argument("file")
    p.add_argument("tensors", nargs="*", help="tensor names (default: every tensor)")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="values to sample per tensor")
    p.add_argument("--exact", action="store_true", help="read every element instead of sampling")
    p.add_argument("--bins", type=int, default=32)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_stats)

    p = commands.add_parser("values", parents=[reading],
                            help="exact element values in row-major order")
    p.add_argument("file")
    p.add_argument("tensor")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_values)

    p = commands.add_parser("moe", parents=[reading],
                            help="Mixture-of-Experts structure and redundant experts")
    p.add_argument("file")
    p.add_argument("--config", help="the model's config.json, for top-k")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help="similarity at which experts count as near-duplicates (default %(default)s)")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES_PER_MATRIX,
                   help="elements read per matrix of each expert (default %(default)s)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_moe)

    p = commands.add_parser("health", parents=[reading],
                            help="flag broken tensors: NaN, dead, scale outliers, copies, norms")
    p.add_argument("files", nargs="+", help="a checkpoint, or all shards of one")
    p.add_argument("--budget", type=int, default=DEFAULT_BUDGET,
                   help="bytes read per tensor (default %(default)s); tensors that fit are read whole")
    p.add_argument("--exact", action="store_true", help="read every byte of every tensor")
    p.add_argument("--confirm-bytes", type=int, default=DEFAULT_CONFIRM_BYTES,
                   help="the most read of one tensor to confirm a copy or a constant (default %(default)s)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_health)

    p = commands.add_parser("diff", parents=[reading],
                            help="compare two checkpoints tensor by tensor (A is the reference)")
    p.add_argument("a", help="checkpoint A: a file, URL, or a folder of shards")
    p.add_argument("b", help="checkpoint B (any format: GGUF names are matched to HF names)")
    p.add_argument("--exact", action="store_true", help="every element instead of a sample (progress on stderr)")
    p.add_argument("--samples", type=int, default=COMPARE_SAMPLES,
                   help="elements compared per tensor when sampling (default %(default)s)")
    p.add_argument("--tensor", action="append", metavar="NAME", help="only this tensor (A's or B's name; repeatable)")
    p.add_argument("--top", type=int, default=15, help="tensors listed in the ranking (default %(default)s)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_diff)

    p = commands.add_parser("demo", help="write the synthetic demo model (safetensors)")
    p.add_argument("--out", required=True, help="where to write it")
    p.set_defaults(run=run_demo)
    return parser


def _open(files, args):
    return open_checkpoint(files if isinstance(files, list) and len(files) > 1
                           else (files[0] if isinstance(files, list) else files),
                           follow_redirects=getattr(args, "follow_redirects", False))


def _emit(obj) -> None:
    # One write: json.dump to a stream makes a write call per token (seconds for 40k tensors).
    sys.stdout.write(json.dumps(obj, indent=1, allow_nan=False) + "\n")


def run_inspect(args) -> int:
    with _open(args.files, args) as ckpt:
        if args.json:
            _emit(report.inspect_json(ckpt))
        else:
            report.print_inspect(ckpt)
    return EXIT_OK


def run_stats(args) -> int:
    if args.samples < 1 or args.bins < 1:
        raise UsageError("--samples and --bins must be at least 1")
    with _open(args.file, args) as ckpt:
        chosen = [ckpt.tensor(name) for name in args.tensors] or ckpt.tensors
        out = []
        for t in chosen:
            if t.problem:
                out.append({"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "error": t.problem})
                continue
            s = sample(t, args.samples)
            stats = exact_stats(t) if args.exact else s.stats
            entry = {"name": t.name, "dtype": t.dtype, "shape": list(t.shape),
                     "samples": stats.count, "numel": t.numel, "exact": args.exact or s.exhaustive,
                     "stats": stats.to_json(), "histogram": histogram(s.values, args.bins).to_json()}
            out.append(entry)
            if not args.json:
                report.print_stats(entry)
        if args.json:
            _emit(out)
    return EXIT_OK


def run_values(args) -> int:
    with _open(args.file, args) as ckpt:
        t = ckpt.tensor(args.tensor)
        if args.start < 0 or args.count < 0 or (args.start >= t.numel and t.numel):
            raise UsageError(f"--start {args.start} is outside tensor {t.name!r} of {t.numel} elements")
        got = values(t, args.start, args.count)
        if args.json:
            _emit({"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "start": args.start,
                   "values": [json_number(v) for v in got]})
        else:
            report.print_values(t, args.start, got)
    return EXIT_OK


def run_moe(args) -> int:
    config = None
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot read --config {args.config}: {e}") from e
    if not -1.0 <= args.threshold <= 1.0 or args.samples < 1:
        raise UsageError("--threshold must be within [-1, 1] and --samples at least 1")
    with _open(args.file, args) as ckpt:
        analysis = analyse(ckpt, args.threshold, args.samples, config)
        if args.json:
            _emit(bounded(analysis.to_json()))
        else:
            report.print_moe(analysis)
    return EXIT_OK


def run_health(args) -> int:
    if args.budget < 1 or args.confirm_bytes < 0:
        raise UsageError("--budget must be at least 1 and --confirm-bytes at least 0")
    budget = None if args.exact else args.budget
    with _open(args.files, args) as ckpt:
        if not args.json:
            print(health_text.cost_line(health_cost(ckpt, budget, args.confirm_bytes), ckpt.name), flush=True)
        result = health(ckpt, budget, args.confirm_bytes)
        if args.json:
            _emit(result.to_json())
        else:
            print(health_text.render(result))
    return EXIT_OK


def _open_target(target: str, args):
    """A file or URL, or a folder: every checkpoint file in it, opened as one (shards)."""
    import os
    from .detect import EXTENSIONS
    if os.path.isdir(target):
        files = sorted(os.path.join(target, f) for f in os.listdir(target) if f.endswith(EXTENSIONS))
        if not files:
            raise UsageError(f"{target}: no checkpoint files in this folder ({', '.join(EXTENSIONS)})")
        return _open(files, args)
    return _open(target, args)


def run_diff(args) -> int:
    if args.samples < 1 or args.top < 0:
        raise UsageError("--samples must be at least 1 and --top at least 0")

    def progress(done, total):
        print(f"\rcompared {done}/{total} tensors", end="" if done < total else "\n", file=sys.stderr)

    with _open_target(args.a, args) as a, _open_target(args.b, args) as b:
        result = compare(a, b, args.samples, args.exact, args.tensor,
                         progress if args.exact and sys.stderr.isatty() else None)
        if args.json:
            _emit(result.to_json())
        else:
            report.print_diff(result, args.top)
    return EXIT_OK


def run_demo(args) -> int:
    from .synthetic import demo_bytes
    try:
        with open(args.out, "wb") as f:
            f.write(demo_bytes())
    except OSError as e:
        raise UsageError(f"cannot write {args.out}: {e.strerror}") from e
    print(f"wrote {args.out}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
