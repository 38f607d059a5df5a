"""What the readers of checkpoints stored as several files share, importing no reader: the
names of a torch.distributed.checkpoint folder's files (pytorch/distcp.py reads them; grouping
by name, opening/grouping.py, needs them without the torch readers), and the merge of several
pickles' safety reports (shard sets, training folders, DCP folders)."""

from __future__ import annotations

from ..errors import FormatError

FORMAT = "torch-dcp"
METADATA_NAME = ".metadata"
DATA_EXTENSION = ".distcp"


def _basename(name: str) -> str:
    return name.replace("\\", "/").rsplit("/", 1)[-1] if name else ""


def is_member(name: str) -> bool:
    base = _basename(name)
    return base == METADATA_NAME or base.endswith(DATA_EXTENSION)


def is_metadata(name: str) -> bool:
    return _basename(name) == METADATA_NAME


def lone_data_file(name: str) -> FormatError:
    """A .distcp without its .metadata: what it is part of, and what to open instead."""
    return FormatError(
        f"this is one data file of a torch.distributed.checkpoint (DCP) folder: which tensors "
        f"its bytes hold is written in the folder's {METADATA_NAME}, which was not given; open "
        f"the folder (or {METADATA_NAME} with its {DATA_EXTENSION} files)",
        file=_basename(name), format=FORMAT)


def merge_reports(named: list[tuple[str, dict]], max_files: int = 20) -> dict:
    """One report (safety_report's shape) for several pickles' reports, each given with the name
    of the file (or the part) it is of: globals counted over them, every dangerous one named
    with the files that name it (the first `max_files`), each one's notes and calls kept with
    its name. Shard sets, training folders and DCP folders merge their parts' reports so."""
    globals_: dict[str, dict] = {}
    calls, notes, opcodes = [], [], {}
    for name, safety in named:
        for g in safety.get("globals", ()):
            seen = globals_.setdefault(g["name"], dict(g, count=0, files=[]))
            seen["count"] += g["count"]
            if len(seen["files"]) < max_files and name not in seen["files"]:
                seen["files"].append(name)
            if g["verdict"] == "dangerous":
                seen.update(verdict=g["verdict"], reason=g["reason"])
        calls += [dict(c, file=name) for c in safety.get("calls", ())]
        notes += [f"{name}: {n}" for n in safety.get("notes", ())]
        for op, n in safety.get("opcodes", {}).items():
            opcodes[op] = opcodes.get(op, 0) + n
    merged = {"globals": list(globals_.values()),
              "dangerous": [n for n, g in globals_.items() if g["verdict"] == "dangerous"],
              "calls": calls, "notes": notes, "opcodes": dict(sorted(opcodes.items()))}
    # a part torch.load takes for another file (formats/pytorch/loadpath.py): the first one
    readings = [dict(safety["torch_reading"], file=name) for name, safety in named
                if "torch_reading" in safety]
    if readings:
        merged["torch_reading"] = readings[0]
    from .pytorch import weightsonly   # here: opening safetensors imports no torch reader
    loads = weightsonly.merged(named)
    if loads is not None:
        merged["weights_only"] = loads
    return merged
