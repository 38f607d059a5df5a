"""The checkpoint's own renderings, human-readable and JSON, shared by the CLI and the web worker.

Each analysis prints its own text (architecture/report.py, moe/text.py, comparison/text.py,
healthscan/text.py, tokens/text.py); number formats are in display.py.
"""

from __future__ import annotations

import json

from .display import counted, csv_cell, escaped, exact_count, human_bytes, human_count, short
from .model import Checkpoint, Tensor
from .jsonable import FULL, Limits, bounded, json_number
from .progress import Passes, every

BAR = "█▉▊▋▌▍▎▏"


# How formats/pytorch/safety.py renders a tensor, and the main state_dict subtree, in metadata.
TENSOR_REF_KEYS = ({"tensor", "dtype", "shape"}, {"tensors", "tree"})
_GONE = object()


def shown_metadata(ckpt: Checkpoint, limits: Limits = FULL) -> dict:
    """The metadata a person reads: for a torch checkpoint, its non-tensor entries only (the
    tensors are in the table). JSON output keeps the whole rendered object."""
    shown = bounded(ckpt.metadata, limits)
    if ckpt.format.startswith("pytorch") or ckpt.format == "nemo":   # nemo: a torch checkpoint inside
        shown = _without_tensors(shown)
        shown = {} if shown is _GONE else shown
    return shown


def _without_tensors(value):
    """`value` minus tensor references, and minus containers that held nothing but them."""
    if isinstance(value, dict):
        if set(value) in TENSOR_REF_KEYS:
            return _GONE
        kept = {k: v for k, v in ((k, _without_tensors(v)) for k, v in value.items()) if v is not _GONE}
        return _GONE if value and not kept else kept
    if isinstance(value, list):
        kept = [v for v in map(_without_tensors, value) if v is not _GONE]
        return _GONE if value and not kept else kept
    return value


def checkpoint_json(ckpt: Checkpoint, limits: Limits = FULL, tensors: bool = True) -> dict:
    """The one JSON shape of a checkpoint: `inspect --json` prints it, the page's model payload
    is built on it (web/handlers.py, which sends the tensors in a table of its own: `tensors`
    False leaves the records out). Never reads: an offset not known yet is null (see
    Checkpoint.locate_all). `limits` bound metadata and extras (the page previews them)."""
    by_dtype = ckpt.parameters_by_dtype()   # their sum is parameter_count: one walk, not two
    out = {"file": ckpt.name, "files": ckpt.files, "format": ckpt.format, "size": ckpt.size,
           "tensor_count": len(ckpt.tensors), "parameters": sum(by_dtype.values()),
           "parameters_by_dtype": by_dtype, "metadata": bounded(ckpt.metadata, limits),
           "warnings": [str(w) for w in ckpt.warnings], "extras": bounded(ckpt.extras, limits)}
    if tensors:
        out["tensors"] = [t.to_json() for t in ckpt.tensors]
    return out


TABLE_COLUMNS = ("name", "dtype", "shape", "numel", "nbytes", "offset", "file")


def tensor_table(ckpt: Checkpoint, fmt: str) -> str:
    """The tensor table as CSV (shape as 4x3x2) or JSON (inspect --json's tensor records)."""
    import csv
    import io
    import json
    ckpt.locate_all()
    records = [t.to_json() for t in ckpt.tensors]
    if fmt == "json":
        return json.dumps(records, indent=1, allow_nan=False)
    if fmt != "csv":
        raise ValueError(f"unknown table format {fmt!r}")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TABLE_COLUMNS)
    for r in records:
        writer.writerow([("x".join(map(str, r["shape"])) if key == "shape" else csv_cell(r.get(key)))
                         for key in TABLE_COLUMNS])
    return out.getvalue()


def inspect_json(ckpt: Checkpoint) -> dict:
    ckpt.locate_all()
    return checkpoint_json(ckpt)


def print_inspect(ckpt: Checkpoint, parameters: dict | None = None, progress=None) -> None:
    """`parameters`: the architecture block's count (architecture/components.py), which says
    how many of the values stored are model parameters; `progress(done, total)`: the table's
    two passes over the tensors (its widths, then its lines), as 2 * n tensors."""
    ckpt.locate_all()
    # a dtype is a name from the file where the reader does not know it (a storage class)
    by_dtype = ", ".join(f"{escaped(d)} {human_count(n)}" for d, n in ckpt.parameters_by_dtype().items())
    files = ckpt.files
    print(escaped(ckpt.name) + (f"  ({counted(len(files), 'file')})" if len(files) > 1 else ""))
    hub = ckpt.extras.get("hub_cache")
    if hub:
        print(f"  from        the Hugging Face cache: {escaped(hub['repo'])}@{escaped(hub['revision'])}, "
              f"commit {hub['commit'][:12]}, {escaped(hub['folder'])}")
    remote = ckpt.extras.get("hub_remote")
    if remote:
        print(f"  from        the Hub by HTTP Range (not in the Hugging Face cache): "
              f"{escaped(remote['repo'])}@{escaped(remote['revision'])}, {escaped(remote['endpoint'])}")
    container = ckpt.extras.get("container")   # a format inside another (a llamafile's GGUF)
    script = ckpt.extras.get("torchscript")   # formats/pytorch/torchscript.py
    print(f"  format      {ckpt.format if not script else script['format'] + ' (a ' + ckpt.format + ' archive)'}" + (f" (in a {container['format']}: member "
                                            f"{escaped(container['member'])} at byte "
                                            f"{container['offset']:,})" if container else ""))
    print(f"  size        {human_bytes(ckpt.size)} ({ckpt.size:,} bytes)"
          + (f" in {counted(len(files), 'file')}" if len(files) > 1 else ""))
    print(f"  tensors     {exact_count(len(ckpt.tensors))}")
    print_counts(ckpt, by_dtype, parameters)
    quantised = ckpt.extras.get("quantisation")
    if quantised and (quantised["dequantised"] or quantised["packed"]):
        print(f"  quantised   {escaped('; '.join(quantised['schemes']) or quantised['method'])} "
              f"(from {escaped(quantised['source'])}): {quantised['dequantised']:,} weights shown "
              f"dequantised to float32, sizes as stored"
              + (f"; {quantised['packed']:,} left packed" if quantised["packed"] else ""))
    if ckpt.extras.get("adapter"):   # a LoRA adapter (adapters/): what it changes
        from .adapters.text import print_adapter
        print_adapter(ckpt.extras["adapter"])
    card = ckpt.extras.get("model_card")
    if card:
        print("\nModel card")
        for label, value in card.items():
            print(f"  {label:<22} {short(value)}")
    metadata = shown_metadata(ckpt)
    if metadata:
        print("\nMetadata")
        for key, value in metadata.items():
            print(f"  {escaped(str(key))}: {short(value)}")
    if ckpt.extras.get("pipeline"):
        print_pipeline(ckpt.extras["pipeline"])
    safety = ckpt.extras.get("safety")
    if safety:
        print_safety(safety)
    if ckpt.extras.get("training"):
        print_training(ckpt.extras["training"])
    objects = (ckpt.extras.get("dcp") or {}).get("objects")
    if objects:   # a DCP folder's items that are not tensors (formats/pytorch/distcp.py)
        print("\nObjects (DCP items that are not tensors)")
        for fqn, item in objects.items():
            shown = f"cannot be read: {item['problem']}" if "problem" in item else short(item["value"])
            print(f"  {escaped(fqn)}: {escaped(shown)}")
    if ckpt.warnings:
        print("\nWarnings")
        for w in ckpt.warnings:
            print(f"  ! {escaped(w)}")
    print("\nTensors")
    # A dequantised weight's (or an adapter's ΔW's) stored parts are listed under it, indented.
    quantised = "quantisation" in ckpt.extras or "adapter" in ckpt.extras

    def listed(progress):
        for t in every(ckpt.tensors, progress, len(ckpt.tensors)):
            yield t, ""
            if quantised:
                yield from ((p, "  ↳ ") for p in t.parts)

    several = len(files) > 1   # offsets are within each tensor's own file: say which

    def rows(progress):   # made twice (widths, then lines) rather than held: a header may list 1M tensors
        for t, indent in listed(progress):
            row = (indent + escaped(t.name), escaped(t.dtype) + _computed(t),
                   "×".join(map(str, t.shape)) or "scalar", human_bytes(t.stored_nbytes),
                   _bits(t), str(t.known_file_offset))
            row += (_strides(t),) if strided else ()
            yield row + (escaped(t.file or "?"),) if several else row

    strided = any(not t.contiguous for t in ckpt.tensors)   # a column only where a view has them
    header = (("name", "dtype", "shape", "size", "bits", "offset") + (("strides",) if strided else ())
              + (("file",) if several else ()))
    widths = [len(h) for h in header]
    passes = Passes(progress, len(ckpt.tensors), 2)
    for r in rows(passes.part(0)):
        widths = [max(w, len(c)) for w, c in zip(widths, r)]
    print("  " + "  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows(passes.part(1)):
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)))
    if safety and safety.get("torchscript"):   # the verdict again, after every name it concerns
        print(f"\nSafety: {safety['torchscript']['headline']}. Do not torch.jit.load it unless you trust "
              "its code.")
    elif safety and safety.get("dangerous"):
        print(f"\nSafety: this file names {len(safety['dangerous'])} dangerous global(s); see the "
              "pickle safety report above. Do not torch.load it with weights_only=False.")


def _computed(t: Tensor) -> str:
    """What a tensor computed from its parts is: a dequantised weight, or an adapter's ΔW."""
    if not t.parts:
        return ""
    return " (ΔW)" if "computed as" in t.info else " (dequantised)"


def _strides(t: Tensor) -> str:
    """A view's element strides where they are not row-major ('1,512'), else nothing."""
    return "" if t.contiguous else ",".join(map(str, t.element_strides()))


def _bits(t: Tensor) -> str:
    info = t.dtype_info
    return "?" if info is None else f"{info.bits:g}"


def weights_only_line(loads: dict) -> str:
    """What torch.load(weights_only=True) does with the file, in one line (the page says the same,
    web/summary.js)."""
    head = "torch.load(weights_only=True), torch's default since 2.6: "
    if loads.get("member"):   # an archive whose member torch loads (a .nemo's model_weights.ckpt)
        head = f"torch.load(weights_only=True) of its {escaped(loads['member'])}: "
    if loads["loads"]:
        return head + "loads it"
    refused = loads.get("refused") or []
    return head + "refuses it" + (f" (globals: {', '.join(refused)})" if refused else "")


def print_safety(safety: dict) -> None:
    print("\nPickle safety report (nothing was executed)")
    for note in safety.get("notes", []):
        print(f"  NOTE: {escaped(note)}")
    script = safety.get("torchscript")
    if script:
        print_torchscript(script)
    loads = safety.get("weights_only")
    if loads is not None and script:   # its refused globals are the classes above
        print("  torch.load(weights_only=True), torch's default since 2.6: refuses it (a TorchScript "
              "archive: only torch.jit.load, which runs its code, opens it)")
    elif loads is not None:
        print(f"  {escaped(weights_only_line(loads))}")
        if not loads["loads"]:
            print(f"    {escaped(loads['why'])}")
    folded = set(script["classes"]) if script else set()   # said once, by the headline
    def shown(name: str) -> bool:
        return name not in folded
    for g in [g for g in safety.get("globals", []) if shown(g["name"])]:
        mark = "DANGEROUS" if g["verdict"] == "dangerous" else g["verdict"]
        reason = f"  ({g['reason']})" if g.get("reason") else ""
        if g["verdict"] == "dangerous" and g.get("files"):   # a set's report: which file names it
            reason += f"  in {', '.join(g['files'])}"
        print(f"  {mark:<10} {escaped(g['name'])}  ×{g.get('count', 1):,}{escaped(reason)}")
    for call in [c for c in safety.get("calls", []) if shown(c["global"])]:
        args = ", ".join(json.dumps(a, ensure_ascii=False) for a in call.get("args", []))
        kwargs = f", **{json.dumps(call['kwargs'], ensure_ascii=False)}" if call.get("kwargs") else ""
        print(f"  call never made: {escaped(call['global'])}({escaped(args)}{escaped(kwargs)})")
    dangerous = [n for n in safety.get("dangerous", []) if shown(n)]
    if dangerous:
        print(f"  This file names {len(dangerous):,} dangerous global(s): "
              f"{escaped(', '.join(dangerous))}. torch.load(weights_only=False) would run them "
              "(names outside the allow-list: may run them).")


def print_torchscript(script: dict) -> None:
    """A TorchScript archive's one verdict, its classes on one line, its code files listed."""
    print(f"  DANGEROUS  {escaped(script['headline'])}")
    print(f"    classes ({len(script['classes']):,}): {escaped(short(', '.join(script['classes']), 400))}")
    print(f"    code files (listed, never run; {script['code_files']:,}):")
    for f in script["code"]:
        print(f"      {escaped(f['name'])}  {human_bytes(f['size'])}")
    if script["code_files"] > len(script["code"]):
        print(f"      … and {script['code_files'] - len(script['code']):,} more")
    for note in script.get("notes", []):
        print(f"    NOTE: {escaped(note)}")


def print_pipeline(pipeline: dict) -> None:
    """A diffusers folder's components (opening/pipeline.py's extras["pipeline"]), each with
    what its config.json says of its architecture."""
    print(f"\nPipeline  {escaped(str(pipeline.get('class')))}")
    for c in pipeline["components"]:
        what = ".".join(escaped(str(x)) for x in (c.get("library"), c.get("class")) if x)
        held = (f"{exact_count(c['tensors'])} tensors, {exact_count(c['parameters'])} parameters "
                f"({human_bytes(c['bytes'])}, {c['format']})" if c.get("tensors") is not None
                else "no weights")
        print(f"  {escaped(c['name']):<16} {what:<40} {held}")
        if c.get("config"):
            print("    " + short(", ".join(f"{escaped(str(k))}={escaped(str(v))}" for k, v in c["config"].items()
                                          if k != "_class_name"), 110))
def print_counts(ckpt: Checkpoint, by_dtype: str, parameters: dict | None) -> None:
    """The header's count: "parameters" when every value stored is one; else the values
    stored, then the model's parameters with what is kept apart (buffers, training state, a
    tied view counted once)."""
    stored = ckpt.parameter_count
    if parameters is None or parameters["total"] == stored:
        print(f"  parameters  {exact_count(stored)} ({by_dtype})")
        return
    apart = [(label, c["parameters"]) for label, c in
             [("buffers", parameters["buffers"]), ("tied views", parameters["tied"]),
              *parameters["training_state"].items()] if c["parameters"]]
    print(f"  values      {exact_count(stored)} stored ({by_dtype})")
    print(f"  parameters  {exact_count(parameters['total'])} (the model's weights"
          + (f"; apart: {', '.join(f'{escaped(k)} {exact_count(n)}' for k, n in apart)}"
             if apart else "") + ")")


def print_training(training: dict) -> None:
    """A training run's state beside the model (opening/training.py's extras["training"])."""
    parts = training["parts"]
    print(f"\nTraining state: {training['kind']} ({counted(len(parts), 'file')} beside the model; none of "
          "their values is counted as a parameter)")
    width = max(len(p["kind"]) for p in parts)
    for p in parts:
        head = f"  {p['kind']:<{width}}  {escaped(p['file'])}  {p.get('format') or '?'}  " \
               f"{human_bytes(p['size'])}"
        if "error" in p:
            print(f"{head}  cannot be read: {escaped(p['error'])}")
            continue
        summary = p["summary"]
        print(f"{head}  {escaped(_training_line(p['kind'], summary))}")
        for line in _training_details(p["kind"], summary):
            print(f"    {escaped(line)}")
        safety = p.get("safety")
        if safety is not None:
            dangerous = safety.get("dangerous") or []
            print(f"    safety: {len(safety.get('globals', [])):,} globals"
                  + (f", {len(dangerous):,} DANGEROUS: {escaped(', '.join(dangerous))}" if dangerous
                     else ", none dangerous"))
            if safety.get("weights_only") is not None:
                print(f"    {escaped(weights_only_line(safety['weights_only']))}")


def _values(count: dict) -> str:
    return f"{count['values']:,} values ({human_bytes(count['bytes'])})"


def _training_line(kind: str, summary: dict) -> str:
    if "groups" in summary:
        moments = ", ".join(f"{k} {_values(c)}" for k, c in summary["moments"].items())
        return (f"{summary['group_count']:,} parameter groups, {summary['params']:,} parameters "
                f"({summary['params_with_state']:,} with state); {moments or 'no moments'}")
    if "generators" in summary:
        return "generators: " + ", ".join(summary["generators"])
    if "fields" in summary:
        return f"{summary['class']} ({summary['field_count']:,} fields)"
    if "log_history" in summary:
        facts = [f"{k} {short(summary[k])}" for k in ("global_step", "max_steps", "epoch") if k in summary]
        losses = [e for e in summary["log_history"] if "loss" in e]
        if losses:
            facts.append(f"loss {losses[0]['loss']:.6g} (step {losses[0].get('step', '?')}) -> "
                         f"{losses[-1]['loss']:.6g} (step {losses[-1].get('step', '?')})")
        return ", ".join(facts)
    state = summary.get("state") or {}
    return ", ".join(f"{k} {short(v)}" for k, v in state.items()) or \
        f"{counted(summary['stored']['tensors'], 'tensor')}, {_values(summary['stored'])}"


def _training_details(kind: str, summary: dict) -> list[str]:
    if "groups" in summary:
        return [f"group {i}: {g['params']:,} parameters, step {g['step']}; "
                + ", ".join(f"{k} {counted(c['tensors'], 'tensor')} {_values(c)}" for k, c in g["moments"].items())
                + "; " + ", ".join(f"{k} {short(v)}" for k, v in g["hyperparameters"].items()
                                   if k in ("lr", "initial_lr", "weight_decay", "betas", "eps"))
                for i, g in enumerate(summary["groups"])]
    if "fields" in summary:
        return [", ".join(f"{k} {short(v)}" for k, v in summary["fields"].items())]
    if "log_history" in summary:
        return ["log: " + "; ".join(", ".join(f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}"
                                              for k, v in e.items())
                                    for e in summary["log_history"][:MAX_LOG_SHOWN])] \
            if summary["log_history"] else []
    return []


MAX_LOG_SHOWN = 20


def _fmt(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def print_stats(entry: dict) -> None:
    s = entry["stats"]
    shape = "×".join(map(str, entry["shape"])) or "scalar"
    # Sampled figures say so on every line: a sample's min/max are not the tensor's extremes.
    if entry["exact"]:
        how, label, of = f"all {entry['numel']:,} elements, exact", "exact  ", f"all {entry['numel']:,} elements"
        cost = entry.get("exact_cost") or {}
        if cost.get("repeats", 1) > 1:   # a stride-0 view: its stored elements, counted repeated
            how += f": {cost['elements']:,} stored × {cost['repeats']:,} repeats"
    else:
        how = f"{entry['samples']:,} of {entry['numel']:,} elements sampled: estimates"
        label, of = "sampled", f"{entry['samples']:,} sampled values (not every element)"
    print(f"{escaped(entry['name'])}  {escaped(entry['dtype'])}  {shape}  ({how})")
    if entry.get("strides"):
        print(f"  strides {', '.join(map(str, entry['strides']))} (non-contiguous): read in its storage's order"
              + (f", {human_bytes(entry['sample_bytes'])}" if "sample_bytes" in entry else ""))
    if entry.get("dequantised_from"):
        print(f"  dequantised from {escaped(entry['dequantised_from'])}")
    if entry.get("computed_as"):
        print(f"  {escaped(entry['computed_as'])}")
    # a sample's extremes bound the tensor's: its min is at most the sample's, its max at least
    low, high = ("min", "max") if entry["exact"] else ("min ≤", "max ≥")
    print(f"  {label}  {low} {_fmt(s['min'])}  {high} {_fmt(s['max'])}  mean {_fmt(s['mean'])}"
          f"  std {_fmt(s['std'])}  near-zero {s['zeros'] * 100:.2f}%  nan {s['nan']}"
          f"  +inf {s['posinf']}  -inf {s['neginf']}")
    if s.get("percentiles"):
        print(f"  {label}  " + "  ".join(f"{k} {_fmt(v)}" for k, v in s["percentiles"].items()))
    hist = entry["histogram"]
    print(f"  histogram of {of}")
    top = max(hist["counts"]) or 1
    for left, count in zip(hist["edges"], hist["counts"]):
        eighths = round(count / top * 40 * 8)
        bar = BAR[0] * (eighths // 8) + (BAR[8 - eighths % 8] if eighths % 8 else "")
        print(f"  {_fmt(left):>12} │{bar} {count:,}")
    print()


def print_values(t: Tensor, start: int, got: list) -> None:
    print(f"{escaped(t.name)}  {t.dtype}  {'×'.join(map(str, t.shape)) or 'scalar'}"
          + (f"  dequantised from {escaped(t.info['dequantised from'])}" if "dequantised from" in t.info
             else f"  {escaped(t.info['computed as'])}" if "computed as" in t.info else ""))
    for i, v in enumerate(got, start):
        # repr, not a rounded format: these are the exact stored values.
        print(f"  [{', '.join(map(str, unravel(i, t.shape)))}]  {v!r}")


def unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for dim in reversed(shape):
        flat, i = divmod(flat, dim)
        index.append(i)
    return list(reversed(index))
