"""`tensorloupe inspect|stats|values|moe|health|diff|tokens|convert|extract|prune|demo`: the library
on the command line.

Every command that reads a checkpoint takes it the same way (`add_files` / `open_files`, see
opening/targets.py): one file, all shards or split parts of one, a folder, an index json, or URLs.
Options may come anywhere among the positionals (`stats FILE --exact TENSOR`).

Exit codes: 0 ok, 2 bad arguments (including an unknown tensor name, or `tokens` of a checkpoint
that has no tokenizer), 3 the file cannot be read (a missing path, a URL that cannot be fetched)
or is invalid (the message goes to stderr, never a traceback), 4 `inspect --strict` and the pickle
names a dangerous global (the report is printed first), or `convert`/`extract`/`prune` of such a file
without --allow-dangerous-file (nothing is written; what would be left out is said), 5 `health`
or `inspect --strict` of a shard set with parts missing (or tensors its index names that no part holds; said first), 6
`inspect --strict` and torch.load(weights_only=True), torch's default, would refuse the file (or a
part of the set) although nothing in it is dangerous (NumPy arrays in an RNG state, a TorchScript
archive, a class not on torch's allow-list; 4 wins when something is dangerous), 130 interrupted
(Ctrl-C: one line, no traceback; a convert/extract leaves no output file).

Long work (health, stats, diff, convert, extract, values of a big range) shows progress on one
stderr line when stderr is a terminal (progress/; --quiet silences it); stdout never has it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from . import __version__, report
from .architecture import report as arch_report
from .opening import beside, shards
from . import open as open_checkpoint
from .model import Checkpoint
from .source import is_url
from .opening.targets import resolve
from .errors import TensorloupeError, UnreadableError, UsageError
from .healthscan import DEFAULT_BUDGET, DEFAULT_CONFIRM_BYTES, health, health_cost
from .moe.redundancy import DEFAULT_SAMPLES_PER_MATRIX, DEFAULT_THRESHOLD, analyse
from .sampler.repeats import checked_view
from .sampler.layout import costed
from .sampler.sampling import DEFAULT_SAMPLES, exact_summary, histogram, sample, sample_cost, values
from .display import TerminalText, counted
from .jsonable import bounded, json_number
from .architecture.memory import CACHE_TYPES
from .comparison import DEFAULT_SAMPLES as COMPARE_SAMPLES, compare
from .quant.logical import apply as dequantise
from .progress import Meter, Passes, Scaled, every

DTYPE_CHOICES = ("F32", "F16", "BF16")     # writing/encode.py's ENCODERS (not imported by inspect)
EXIT_OK, EXIT_USAGE, EXIT_INVALID, EXIT_DANGEROUS, EXIT_INCOMPLETE, EXIT_REFUSED = 0, 2, 3, 4, 5, 6
EXIT_INTERRUPTED = 130   # 128 + SIGINT, as a shell reports a command Ctrl-C stopped


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # No control character a file carries reaches the terminal, whichever renderer prints it.
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalText(sys.stdout), TerminalText(sys.stderr, returns=True)
    try:
        return _run(args)
    finally:
        sys.stdout, sys.stderr = streams


def _run(args) -> int:
    try:
        return args.run(args)
    except UsageError as e:
        print(f"tensorloupe: {e}", file=sys.stderr)
        return EXIT_INVALID if isinstance(e, UnreadableError) else EXIT_USAGE
    except TensorloupeError as e:
        print(f"tensorloupe: {e}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:   # Ctrl-C: the progress line is cleared already (Meter.__exit__)
        print("tensorloupe: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def progress_line(args, what: str, unit: str = "bytes", read=None):
    """A Meter on stderr for long work (a context that clears its line), or None in its place
    when stderr is not a terminal or --quiet was given."""
    if getattr(args, "quiet", False) or not sys.stderr.isatty():
        return contextlib.nullcontext()
    return Meter(sys.stderr, what, unit, read)


class _Intermixed(argparse.ArgumentParser):
    """A subcommand parser that takes options anywhere among its positionals."""

    _inside = False

    def parse_known_args(self, args=None, namespace=None):
        # parse_known_intermixed_args calls parse_known_args itself: only the outer call switches.
        if self._inside:
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            namespace, extras = self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False
        # Said by the command's parser, with its usage (`inspect x --jsn`), not the top level's:
        # nothing after the command name is the top-level parser's.
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


FILES_HELP = ("the checkpoint: a file, all shards or split GGUF parts of one, a folder holding "
              "one, a model.safetensors.index.json, or URLs of these")


def add_files(p: argparse.ArgumentParser, then: str = "") -> None:
    """The checkpoint argument every reading command shares; `then` names positionals that follow
    the files (tensor names), split off by split_files."""
    p.add_argument("items", nargs="+", metavar="FILE", help=FILES_HELP + (
        f"; then {then}" if then else ""))
    p.usage = f"%(prog)s [options] FILE [FILE ...]{' ' + then if then else ''}"


def add_max_elements(p: argparse.ArgumentParser) -> None:
    def count(text: str) -> int:
        if not text.isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"{text!r} is not a count of at least 1")
        return int(text)
    p.add_argument("--max-elements", type=count, default=None, metavar="N",
                   help="with --exact: decode up to N elements per tensor (default: 16 times what "
                        "its bytes hold; a view that rereads its bytes more is refused first)")


def add_writing(p: argparse.ArgumentParser, verb: str) -> None:
    """The options every command that writes a checkpoint takes."""
    p.add_argument("--dry-run", action="store_true", help="say what would be written; write nothing")
    p.add_argument("--strict", action="store_true", help="write nothing if a tensor cannot be "
                   "written or its bytes fail to read (exit 3; default: skip it, saying why, "
                   "here and in __metadata__)")
    p.add_argument("--allow-dangerous-file", action="store_true",
                   help=f"{verb} a file whose pickle names a dangerous global (it is never run)")


def split_files(items: list[str], keep: int = 0) -> tuple[list[str], list[str]]:
    """Leading items that name files (existing paths or URLs) are the checkpoint, the rest are
    tensor names; at least one file, and at least `keep` names left."""
    n = 0
    while n < len(items) - keep and (is_url(items[n]) or os.path.exists(items[n])):
        n += 1
    n = max(n, 1)
    if len(items) - n < keep:
        raise UsageError("give the checkpoint file(s), then the tensor name")
    return items[:n], items[n:]


def open_files(items, args) -> Checkpoint:
    """Open what the user named as one checkpoint (see opening/targets.py), for any command."""
    target = resolve(items)
    return open_checkpoint(target.files,
                           follow_redirects=target.follows(getattr(args, "follow_redirects", False)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorloupe",
                                     description="Look inside model checkpoints without executing them.",
                                     epilog="exit codes: 0 ok, 2 bad arguments (an unknown tensor, "
                                            "no tokenizer for `tokens`), 3 the file cannot be "
                                            "read (missing, unreachable) or is invalid, 4 (inspect --strict) the pickle "
                                            "names a dangerous global (convert, extract: without "
                                            "--allow-dangerous-file; nothing written), 5 (health, "
                                            "inspect --strict) parts of a shard set are missing, 6 "
                                            "(inspect --strict) torch.load(weights_only=True) "
                                            "would refuse the file, 130 interrupted (Ctrl-C)")
    parser.add_argument("--version", action="version", version=f"tensorloupe {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Intermixed)
    json_help = "machine-readable output (JSON on stdout)"
    # Options every command that reads a checkpoint takes.
    reading = argparse.ArgumentParser(add_help=False)
    reading.add_argument("--follow-redirects", action="store_true",
                         help="follow a URL's redirects to another site (same-site ones always are)")
    reading.add_argument("-q", "--quiet", action="store_true",
                         help="no progress line on stderr (shown only when stderr is a terminal)")

    p = commands.add_parser("inspect", parents=[reading],
                            help="architecture, memory estimate, summary, metadata, "
                            "warnings and the tensor table")
    add_files(p)
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--strict", action="store_true",
                   help="exit with code 4 if the pickle names a dangerous global, 6 if "
                        "torch.load(weights_only=True) would refuse the file (to gate a CI "
                        "job or a download script); the report is printed as usual")
    p.add_argument("--config", help="the model's config.json (default: the one beside the "
                   "checkpoint, if any)")
    p.add_argument("--context", type=int, help="tokens of context for the fits table (default: "
                   "4096, or the model's maximum if smaller)")
    p.add_argument("--cache-type", choices=[c for c, _ in CACHE_TYPES], default="f16",
                   help="KV cache type for the fits table (default %(default)s)")
    p.set_defaults(run=run_inspect)

    p = commands.add_parser("tokens", parents=[reading],
                            help="the tokenizer: vocabulary pages, search, special tokens")
    add_files(p)   # a GGUF file, or a checkpoint with tokenizer.json beside it
    p.add_argument("--find", help="tokens containing this text (or, if a number, that token id)")
    p.add_argument("--start", type=int, default=0, help="first token id of the page (default 0)")
    p.add_argument("--count", type=int, help="tokens per page (default: one page, as the Tokens tab shows)")
    p.add_argument("--encode", metavar="TEXT", help="the token ids of TEXT (and each token shown)")
    p.add_argument("--decode", metavar="IDS", help="the text of token ids (\"1,2,3\")")
    p.add_argument("--no-special", action="store_true", help="--encode: without the tokens the "
                   "tokenizer adds around a text (BOS, [CLS]/[SEP]); --decode: leave special tokens out")
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(run=run_tokens)

    p = commands.add_parser("stats", parents=[reading],
                            help="statistics and a histogram of tensors' values")
    add_files(p, "[TENSOR ...]")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                   help="values to sample per tensor (default %(default)s)")
    p.add_argument("--exact", action="store_true",
                   help="read every element instead of sampling (statistics and histogram)")
    p.add_argument("--bins", type=int, default=32, help="histogram bins (default %(default)s)")
    add_max_elements(p)
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(run=run_stats)

    p = commands.add_parser("values", parents=[reading],
                            help="exact element values in row-major order")
    add_files(p, "TENSOR")
    p.add_argument("--start", type=int, default=0,
                   help="first element, as a row-major index (default %(default)s)")
    p.add_argument("--count", type=int, default=20, help="how many elements (default %(default)s)")
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(run=run_values)

    p = commands.add_parser("moe", parents=[reading],
                            help="Mixture-of-Experts structure and redundant experts")
    add_files(p)
    p.add_argument("--config", help="the model's config.json, for top-k (default: the config.json "
                                    "beside the checkpoint, if any)")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help="similarity at which experts count as near-duplicates, -1..1 "
                        "(default %(default)s)")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES_PER_MATRIX,
                   help="elements read per matrix of each expert (default %(default)s)")
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(run=run_moe)

    p = commands.add_parser("health", parents=[reading],
                            help="flag broken tensors: NaN, dead, scale outliers, copies, norms")
    add_files(p)
    p.add_argument("--budget", type=int, default=DEFAULT_BUDGET,
                   help="bytes read per tensor (default %(default)s); tensors that fit are read whole")
    p.add_argument("--exact", action="store_true", help="read every byte of every tensor")
    p.add_argument("--confirm-bytes", type=int, default=DEFAULT_CONFIRM_BYTES,
                   help="the most read of one tensor to confirm a copy or a constant (default %(default)s)")
    add_max_elements(p)
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(run=run_health)

    p = commands.add_parser("diff", parents=[reading],
                            help="compare two checkpoints tensor by tensor (A is the reference)")
    p.add_argument("a", help="checkpoint A: a file, URL, a folder or an index json")
    p.add_argument("b", help="checkpoint B (any format: GGUF names are matched to HF names)")
    p.add_argument("--exact", action="store_true", help="every element instead of a sample")
    add_max_elements(p)
    p.add_argument("--samples", type=int, default=COMPARE_SAMPLES,
                   help="elements compared per tensor when sampling (default %(default)s)")
    p.add_argument("--tensor", action="append", metavar="NAME", help="only this tensor (A's or B's name; repeatable)")
    p.add_argument("--adapter", metavar="ADAPTER", help="a LoRA adapter (PEFT folder or file, kohya "
                   "file): compare B with A + the adapter's ΔW (a merged model against its base)")
    p.add_argument("--top", type=int, default=15, help="tensors listed in the ranking (default %(default)s)")
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(run=run_diff)

    for name, what in (("convert", "write the checkpoint as safetensors (the pickle is never run)"),
                       ("extract", "write some of its tensors as safetensors (--names, --match)")):
        p = commands.add_parser(name, parents=[reading], help=what)
        add_files(p, "OUT")
        if name == "extract":
            chosen = p.add_mutually_exclusive_group(required=True)
            chosen.add_argument("--names", help="comma-separated tensor names")
            chosen.add_argument("--match", metavar="REGEX", help="tensors whose name this finds")
        p.add_argument("--max-shard-size", metavar="SIZE", help="write a shard set into the folder "
                       "OUT (model-0000K-of-0000N.safetensors + model.safetensors.index.json), "
                       "shards of at most SIZE (5GB, 500MB, a byte count)")
        p.add_argument("--hf-names", action="store_true", help="a GGUF file's tensors under the "
                       "Hugging Face names, Q/K rows un-permuted and stacked experts split, as "
                       "transformers loads them")
        p.add_argument("--dtype", choices=DTYPE_CHOICES, help="write every floating-point tensor "
                       "(dequantised ones too) as its values in this dtype (default: as stored; "
                       "quantised ones as float32)")
        add_writing(p, "convert")
        p.set_defaults(run=run_convert)

    p = commands.add_parser("prune", parents=[reading],
                            help="write the checkpoint without some of its experts (a model folder)")
    add_files(p, "OUT")
    chosen = p.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--drop-experts", metavar="L:E,...",
                        help="the experts to drop, as LAYER:EXPERT pairs (0:4,0:5,1:7)")
    chosen.add_argument("--recommended", action="store_true",
                        help="drop the experts the Experts analysis (`moe`) finds redundant")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help="with --recommended: the similarity that makes two experts copies "
                        "(default %(default)s)")
    p.add_argument("--config", help="the model's config.json (default: the one beside it)")
    p.add_argument("--max-shard-size", metavar="SIZE", help="write the weights as a shard set "
                   "of at most SIZE per file")
    add_writing(p, "prune")
    p.set_defaults(run=run_prune)

    p = commands.add_parser("demo", help="write the synthetic demo model (safetensors)")
    p.add_argument("--out", required=True, help="where to write it")
    p.set_defaults(run=run_demo)
    return parser


def _config(args, files: list) -> beside.Found:
    """The model's config.json (beside.config_for): --config if given (errors are the user's to
    fix), else the one beside the checkpoint's files (a broken one becomes a warning)."""
    found = beside.config_for(files, getattr(args, "config", None))
    if getattr(args, "config", None) and found.problem:
        raise UsageError(f"cannot read --config {args.config}: {found.problem}")
    return found


def _emit(obj, records=None) -> None:
    """`obj` as JSON on stdout; `records` (an iterable of dicts), if given, as its last key
    "tensors", one record a line, made and written a chunk at a time: a million-tensor header
    is never a million dicts at once, and each record goes through the C encoder (json's
    indented encoder is pure Python: 8 s per 100k tensors)."""
    # Few writes: json.dump to a stream makes a write call per token (seconds for 40k tensors).
    text = json.dumps(obj, indent=1, allow_nan=False)
    if records is None:
        sys.stdout.write(text + "\n")
        return
    sys.stdout.write((text[:-1].rstrip() + ",\n" if obj else "{\n") + ' "tensors": [')
    chunk, first = [], True
    for record in records:
        chunk.append(json.dumps(record, allow_nan=False))
        if len(chunk) == RECORDS_PER_WRITE:
            sys.stdout.write(("\n  " if first else ",\n  ") + ",\n  ".join(chunk))
            chunk, first = [], False
    if chunk:
        sys.stdout.write(("\n  " if first else ",\n  ") + ",\n  ".join(chunk))
    sys.stdout.write("\n ]\n}\n")


RECORDS_PER_WRITE = 4096


def run_inspect(args) -> int:
    if args.context is not None and args.context < 1:
        raise UsageError("--context must be at least 1")
    target = resolve(args.items)
    found = _config(args, target.files)
    with open_checkpoint(target.files, follow_redirects=target.follows(args.follow_redirects)) as ckpt:
        if target.hub is not None:   # org/model: said in the header (report.print_inspect)
            ckpt.extras[target.hub.EXTRAS_KEY] = target.hub.to_json()
        if found.problem:
            ckpt.warnings.append(f"{found.where} was not used: {found.problem}")
        dequantise(ckpt, found.data, found.where)   # --config or a URL's (a local one is applied)
        n = len(ckpt.tensors)
        # The output's own passes (the table's widths and lines, the JSON records) are metered
        # only when stdout is not the terminal: a line drawn there would break into what is printed.
        output_passes = 0 if sys.stdout.isatty() else 1 if args.json else 2
        with progress_line(args, f"inspect: {counted(n, 'tensor')}", "%", ckpt.bytes_read) as meter:
            passes = Passes(meter, n, 2 + output_passes)
            block = arch_report.describe(ckpt, found.data, found.where, args.context, args.cache_type,
                                         progress=passes.part(0))
            if meter is not None and not output_passes:
                meter.clear()
            errors = shards.errors(ckpt)
            if args.json:
                ckpt.locate_all()
                doc = report.checkpoint_json(ckpt, tensors=False)
                _emit({**doc, "errors": errors, **bounded(block)},  # a config.json may hold NaN
                      every((t.to_json() for t in ckpt.tensors), passes.part(2) if output_passes else None, n))
            else:
                if errors:   # said before anything else: the numbers below are of part of the model
                    print("Errors: the checkpoint is incomplete")
                    for e in errors:
                        print(f"  ! {e}")
                    print()
                arch_report.print_block(block)
                print()
                report.print_inspect(ckpt, block["architecture"]["parameters"],
                                     passes.part(2) if output_passes else None)
        safety = ckpt.extras.get("safety") or {}
        dangerous = safety.get("dangerous") or []
        if args.strict and dangerous:
            print(f"tensorloupe: {ckpt.name}: --strict: the pickle names {len(dangerous)} dangerous "
                  f"global(s): {', '.join(dangerous)}", file=sys.stderr)
            return EXIT_DANGEROUS
        if args.strict and safety.get("torch_reading"):
            print(f"tensorloupe: {ckpt.name}: --strict: torch.load reads these bytes as another "
                  f"file: {safety['torch_reading']['format']}", file=sys.stderr)
            return EXIT_DANGEROUS
        loads = safety.get("weights_only")
        if args.strict and loads and not loads["loads"]:
            print(f"tensorloupe: {ckpt.name}: --strict: {loads['why']}", file=sys.stderr)
            return EXIT_REFUSED
        if args.strict and errors:
            print(f"tensorloupe: {ckpt.name}: --strict: the checkpoint is incomplete: "
                  f"{errors[0]}", file=sys.stderr)
            return EXIT_INCOMPLETE
    return EXIT_OK


def run_convert(args) -> int:
    from .writing import options, plan, safetensors as writer, text
    if len(args.items) < 2:
        raise UsageError("give the checkpoint file(s), then OUT")
    *items, out = args.items
    size = plan.parse_size(args.max_shard_size) if args.max_shard_size else None
    names = getattr(args, "names", None)
    choice = options.Choice(args.dtype, args.hf_names,
                            [n for n in names.split(",") if n] if names else None,
                            getattr(args, "match", None))
    with open_files(items, args) as opened:
        if _refused(opened, args):
            return EXIT_DANGEROUS
        ckpt, entries, skipped, too_long, extra, _ = options.choose(opened, choice, args.strict)
        where = writer.layout(ckpt, out, entries, size, __version__, extra)
        if not args.dry_run:
            try:
                with progress_line(args, args.command) as meter:
                    writer.write(ckpt, out, entries, size, __version__, meter, extra,
                                 args.strict, skipped)
            except OSError as e:   # where OUT cannot be (a folder, no permission, disk full)
                raise UsageError(f"cannot write {out}: {e.strerror or e}") from None
            where = writer.without(where, skipped)
            entries = [e for _, s in where.files for e in s.entries]
        text.print_plan(where.files, os.path.join(out, plan.INDEX_NAME) if where.index else None,
                        entries, args.dry_run)
        text.print_left_out(text.left_out(ckpt, too_long, skipped), sys.stdout)
    return EXIT_OK


def _refused(ckpt: Checkpoint, args) -> bool:
    """A file whose pickle is dangerous is written only with --allow-dangerous-file: else said
    (with what would be left out) and True."""
    from .writing import text
    safety = ckpt.extras.get("safety") or {}
    dangerous = safety.get("dangerous") or []
    if not (dangerous or safety.get("torch_reading")) or args.allow_dangerous_file:
        return False
    why = (f"the pickle names {len(dangerous):,} dangerous global(s): {', '.join(dangerous)}"
           if dangerous else f"torch.load reads these bytes as another file: "
           f"{safety['torch_reading']['format']}")
    print(f"tensorloupe: {ckpt.name}: {why}; nothing written ({args.command} it anyway, the "
          "pickle unrun, with --allow-dangerous-file)", file=sys.stderr)
    text.print_left_out(text.left_out(ckpt), sys.stderr)
    return True


def run_prune(args) -> int:
    from .writing import folder, options, plan, safetensors as writer, text
    if len(args.items) < 2:
        raise UsageError("give the checkpoint file(s), then the folder OUT")
    *items, out = args.items
    size = plan.parse_size(args.max_shard_size) if args.max_shard_size else None
    target = resolve(items)
    found = _config(args, target.files)
    with open_checkpoint(target.files, follow_redirects=target.follows(args.follow_redirects)) as ckpt:
        if _refused(ckpt, args):
            return EXIT_DANGEROUS
        dequantise(ckpt, found.data, found.where)
        choice = options.Choice(drop=args.drop_experts, recommended=args.recommended,
                                threshold=args.threshold)
        _, entries, skipped, too_long, extra, result = options.choose(ckpt, choice, args.strict,
                                                                      found.data)
        weights = folder.weights_target(out, size)
        where = writer.layout(ckpt, weights, entries, size, __version__, extra)
        if not args.dry_run:
            try:
                with progress_line(args, args.command) as meter:
                    folder.write_model(ckpt, out, entries, result.config, size, __version__, meter,
                                       extra, args.strict, skipped)
            except OSError as e:
                raise UsageError(f"cannot write {out}: {e.strerror or e}") from None
            where = writer.without(where, skipped)
            entries = [e for _, s in where.files for e in s.entries]
        text.print_prune(result.kept, result.dropped, result.config)
        text.print_plan(where.files, os.path.join(out, plan.INDEX_NAME) if where.index else None,
                        entries, args.dry_run)
        text.print_left_out(text.left_out(ckpt, too_long, skipped), sys.stdout)
    return EXIT_OK


# The commands' own modules (tokenizers, health text) are imported by the command: `inspect`
# does not pay for them.
def run_tokens(args) -> int:
    from . import tokens
    from .tokens import text as tokens_text
    from .tokens.vocab import DEFAULT_PAGE
    if args.count is None:
        args.count = DEFAULT_PAGE
    if args.start < 0 or args.count < 0:
        raise UsageError("--start and --count must be >= 0")
    target = resolve(args.items)
    with open_checkpoint(target.files, follow_redirects=target.follows(args.follow_redirects)) as ckpt:
        vocab = tokens.vocabulary(ckpt, target.files)
        if args.encode is not None or args.decode is not None:
            doc = {**vocab.summary(), **tokens.encode_and_decode(vocab, args.encode, args.decode,
                                                                  not args.no_special)}
            if args.json:
                _emit(doc)
            else:
                tokens_text.print_encoding(doc)
            return EXIT_OK
        if args.find is not None:
            out = vocab.search(args.find, args.count or DEFAULT_PAGE)
        else:
            out = vocab.page(args.start, args.count)
        doc = {**vocab.summary(), **out}
        if args.json:
            _emit(doc)
        else:
            tokens_text.print_tokens(doc)
    return EXIT_OK


def run_stats(args) -> int:
    if args.samples < 1 or args.bins < 1:
        raise UsageError("--samples and --bins must be at least 1")
    files, names = split_files(args.items)
    with open_files(files, args) as ckpt:
        chosen = [ckpt.tensor(name) for name in names] or ckpt.tensors
        out = []
        # --exact: two passes over each tensor's bytes (statistics, then the histogram), counted
        # in bytes; a sample: in tensors, with what was read.
        work = sum(2 * t.nbytes for t in chosen if not t.problem)
        with (progress_line(args, "stats --exact") if args.exact else
              progress_line(args, "stats", "tensors", ckpt.bytes_read)) as meter:
            before = 0
            for i, t in enumerate(chosen):
                entry = _stats_entry(args, t, meter, before, work)
                before += 0 if t.problem else 2 * t.nbytes
                out.append(entry)
                if meter is not None and not args.exact:
                    meter(i + 1, len(chosen))
                if not args.json and "error" not in entry:
                    with _above(meter):
                        report.print_stats(entry)
        if args.json:
            _emit(out)
    return EXIT_OK


@contextlib.contextmanager
def _above(meter):
    """Print a result while a progress line is shown: the line is cleared first, and redrawn
    at its next update."""
    if meter is not None:
        meter.clear()
    yield
    sys.stdout.flush()


def _stats_entry(args, t, meter, before: int, work: int) -> dict:
    """One tensor's `stats` record; `meter` (if any) is moved on from `before` by the bytes the
    exact passes cover, of `work` in all."""
    if t.problem:
        return {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "error": t.problem}
    if args.exact:   # every element, the histogram too (a second streamed pass)
        cost = checked_view(t, args.max_elements)[2]   # refused before any read
        scale = t.nbytes / max(1, t.numel)
        passes = tuple(None if meter is None else Scaled(meter, before + k * t.nbytes, scale, work)
                       for k in (0, 1))
        stats, hist = exact_summary(t, args.bins, passes, max_elements=args.max_elements)
        exact = True
    else:
        s = sample(t, args.samples)
        stats, hist, exact = s.stats, histogram(s.values, args.bins), s.exhaustive
    # "extremes": whether min and max are the tensor's, or a sample's (bounds of the tensor's)
    entry = {"name": t.name, "dtype": t.dtype, "shape": list(t.shape),
             "samples": stats.count, "numel": t.numel, "exact": exact,
             "extremes": "exact" if exact else "sampled",
             "stats": stats.to_json(), "histogram": {**hist.to_json(), "exact": exact}}
    if "dequantised from" in t.info:   # a quantised weight's real values (quant/logical.py)
        entry["dequantised_from"] = t.info["dequantised from"]
    if "computed as" in t.info:   # an adapter's ΔW (adapters/)
        entry["computed_as"] = t.info["computed as"]
    if args.exact:
        entry["exact_cost"] = cost.to_json()
    elif costed(t):   # the bytes the sample asks of the file, stated by the plan it reads
        entry["sample_bytes"] = sample_cost(t, args.samples)
    if not t.contiguous:   # a view read in its storage's order (sampler/layout.py)
        entry["strides"] = list(t.element_strides())
    return entry


def run_values(args) -> int:
    files, (name,) = args.items[:-1], args.items[-1:]
    if not files:
        raise UsageError("give the checkpoint file(s), then the tensor name")
    with open_files(files, args) as ckpt:
        t = ckpt.tensor(name)
        if args.count < 0:
            raise UsageError(f"--count {args.count} is negative: give how many elements to show")
        if args.start < 0 or (args.start >= t.numel and t.numel):
            raise UsageError(f"--start {args.start} is outside tensor {t.name!r} of "
                             f"{counted(t.numel, 'element')}")
        got = _values(args, t)
        if args.json:
            _emit({"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "start": args.start,
                   "values": [json_number(v) for v in got]})
        else:
            report.print_values(t, args.start, got)
    return EXIT_OK


VALUES_CHUNK = 1 << 20   # elements read between two progress updates of `values`


def _values(args, t) -> list:
    """`values(t, --start, --count)`, read a chunk at a time under a progress line (a range of
    millions of elements takes seconds)."""
    end = min(args.start + args.count, t.numel)
    if end - args.start <= VALUES_CHUNK:
        return values(t, args.start, args.count)
    got: list = []
    scale = t.nbytes / max(1, t.numel)
    with progress_line(args, "values") as meter:
        for start in range(args.start, end, VALUES_CHUNK):
            got += values(t, start, min(VALUES_CHUNK, end - start))
            if meter is not None:
                meter(int((start - args.start) * scale), int((end - args.start) * scale))
    return got


def run_moe(args) -> int:
    target = resolve(args.items)
    config = _config(args, target.files).data
    if not -1.0 <= args.threshold <= 1.0 or args.samples < 1:
        raise UsageError("--threshold must be within [-1, 1] and --samples at least 1")
    with open_checkpoint(target.files, follow_redirects=target.follows(args.follow_redirects)) as ckpt:
        with progress_line(args, "moe", "experts", ckpt.bytes_read) as meter:
            analysis = analyse(ckpt, args.threshold, args.samples, config, meter)
        if args.json:
            _emit(bounded(analysis.to_json()))
        else:
            from .moe import text as moe_text
            moe_text.print_moe(analysis)
    return EXIT_OK


def run_health(args) -> int:
    if args.budget < 1 or args.confirm_bytes < 0:
        raise UsageError("--budget must be at least 1 and --confirm-bytes at least 0")
    from .healthscan import text as health_text
    budget = None if args.exact else args.budget
    with open_files(args.items, args) as ckpt:
        cost = health_cost(ckpt, budget, args.confirm_bytes, args.max_elements)
        if not args.json:
            print(health_text.cost_line(cost, ckpt.name), flush=True)
        start = ckpt.bytes_read()
        with progress_line(args, "health") as meter:   # in bytes read, of those the scan plans
            result = health(ckpt, budget, args.confirm_bytes, None if meter is None else
                            lambda *_: meter(ckpt.bytes_read() - start, cost.scan_bytes),
                            max_elements=args.max_elements)
        if args.json:
            _emit(result.to_json())
        else:
            print(health_text.render(result))
        if shards.errors(ckpt):
            return EXIT_INCOMPLETE
    return EXIT_OK


def run_diff(args) -> int:
    if args.samples < 1 or args.top < 0:
        raise UsageError("--samples must be at least 1 and --top at least 0")
    with contextlib.ExitStack() as opened:
        a, b = (opened.enter_context(open_files([x], args)) for x in (args.a, args.b))
        applied = None
        if args.adapter:   # A + ΔW: the merged model B should equal it (adapters/merge.py)
            from .adapters.merge import with_adapter
            a, applied = with_adapter(a, opened.enter_context(open_files([args.adapter], args)))
        meter = opened.enter_context(
            progress_line(args, "diff", "tensors", lambda: a.bytes_read() + b.bytes_read()))
        result = compare(a, b, args.samples, args.exact, args.tensor, meter,
                         max_elements=args.max_elements)
        if meter is not None:
            meter.clear()
        if args.json:
            _emit({**result.to_json(), **({"adapter": applied} if applied else {})})
        else:
            from .comparison import text as comparison_text
            if applied:
                from .adapters.text import print_applied
                print_applied(applied)
            comparison_text.print_diff(result, args.top)
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
