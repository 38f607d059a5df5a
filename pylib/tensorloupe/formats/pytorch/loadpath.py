"""What torch.load(weights_only=False) does with a file's bytes, decided on the bytes as torch
decides, whatever format tensorloupe shows them as.

The definition is torch 2.13's torch/serialization.py `load` and `_legacy_load`:
  1. a path ending in ".safetensors" goes to safetensors.torch.load_file (no pickle);
  2. bytes 0-3 == PK\\x03\\x04 (`_is_zipfile`) -> the ZIP reader, which unpickles data.pkl;
  3. `tarfile.open(fileobj=f, mode="r:")` succeeds -> the pre-0.4 tar loader, which unpickles the
     `storages`, `tensors` and `pickle` members (any other tarfile.TarError falls through);
  4. else one pickle from byte 0 (the legacy format's magic number), then, if that is the magic
     number, the rest of the legacy format; every global those pickles name is imported and called.
One set of bytes can be two files: a valid safetensors or GGUF file can also be a pickle, a ZIP or
a tar for torch (fixtures/polyglot_files.py builds each). `path_of` says which path torch takes;
`checked` adds torch's reading of those bytes to a checkpoint shown as another format, as a
safety finding that names both readings.

Deciding that a pickle at byte 0 is harmless must not cost a read of the file: `_may_run` walks
its opcodes reading only opcode bytes and length fields (a length is skipped, never read), and
only a pickle that reaches an opcode that imports or calls, or a STOP, is unpickled (as data, by
the allow-list machine) to say what torch would run.
"""

from __future__ import annotations

import struct
from functools import lru_cache

from ...errors import TensorloupeError
from ...display import counted
from ...model import Checkpoint
from ...source import ByteSource

SAFETENSORS, ZIP, TAR, PICKLE = "safetensors", "zip", "tar", "pickle"
ZIP_MAGIC = b"PK\x03\x04"
# The path each torch format's reader follows (opening/detect.py picks the reader by it).
FOLLOWS = {"pytorch-zip": ZIP, "pytorch-tar": TAR, "pytorch-legacy": PICKLE, "pickle": PICKLE}
HOW = {ZIP: "a ZIP checkpoint (its first bytes are PK\\x03\\x04)",
       TAR: "a tar checkpoint (Python's tarfile opens it)",
       PICKLE: "a pickle from byte 0 (it is no ZIP and no tar)"}


def path_of(source: ByteSource, head: bytes) -> str:
    """The path torch.load takes through this file: SAFETENSORS, ZIP, TAR or PICKLE."""
    if source.name.endswith(".safetensors"):   # torch compares the path's suffix case-sensitively
        return SAFETENSORS
    if head[:4] == ZIP_MAGIC:
        return ZIP
    if is_tar(source, head):
        return TAR
    return PICKLE


def is_tar(source: ByteSource, head: bytes) -> bool:
    """Whether Python's tarfile, as torch calls it, opens the file (it reads the first header).
    `head`: the file's first bytes, as already read."""
    if len(head) < TAR_BLOCK:
        head = source.read(0, min(source.size, TAR_BLOCK))
    if len(head) < TAR_BLOCK or not _checksum_matches(head[:TAR_BLOCK]):
        return False     # tarfile refuses it too (InvalidHeaderError), and is not imported
    import tarfile
    from .members import CappedFile
    try:
        with tarfile.open(fileobj=CappedFile(source), mode="r:"):
            return True
    except tarfile.TarError:
        return False
    except (TensorloupeError, EOFError, OSError, ValueError, UnicodeError, struct.error,
            OverflowError):
        return False   # torch.load raises these itself: it reads nothing further


TAR_BLOCK = 512
TAR_CHECKSUM = slice(148, 156)


def _checksum_matches(block: bytes) -> bool:
    """tarfile's first test of a header (TarInfo.frombuf): its checksum field, octal text up to
    a NUL, equals the sum of the block's bytes with that field read as spaces (unsigned or
    signed). True when unsure (a base-256 field): tarfile then decides."""
    field = block[TAR_CHECKSUM]
    if field[0] in (0x80, 0xFF):
        return True
    try:
        stated = int(field.split(b"\0", 1)[0].decode("ascii").strip() or "0", 8)
    except (UnicodeError, ValueError):
        return False
    rest = block[:TAR_CHECKSUM.start] + block[TAR_CHECKSUM.stop:]
    unsigned = 8 * 0x20 + sum(rest)
    signed = 8 * 0x20 + sum(b - 256 if b > 127 else b for b in rest)
    return stated in (unsigned, signed)


def read_as(path: str, source: ByteSource) -> Checkpoint:
    """The checkpoint torch.load's path `path` finds in these bytes, read as data."""
    if path == ZIP:
        from . import zipped
        return zipped.read(source)
    if path == TAR:
        from . import tar
        return tar.read(source)
    from .legacy import read_leading_pickle
    return read_leading_pickle(source, "is no ZIP and no tar archive")


def checked(source: ByteSource, head: bytes, path: str, shown: Checkpoint) -> Checkpoint:
    """`shown`, with torch's reading of the same bytes added as a safety finding when torch.load
    takes them (`path`, from path_of) for another file: the danger that reading names (or its
    different tensors), in extras["safety"], and a warning first in the list."""
    if path == SAFETENSORS or FOLLOWS.get(shown.format) == path:
        return shown
    if path == PICKLE and not _may_run(source, head):
        return shown        # torch's unpickler fails on these bytes before it imports anything
    try:
        other = read_as(path, source)
    except TensorloupeError as e:
        dangerous = named_dangerous(e)
        if not dangerous:
            return shown    # torch.load fails on these bytes too, and nothing of them has run
        return _conflict(shown, path, {"dangerous": dangerous, "globals": [
            {"name": n, "verdict": "dangerous", "reason": "named before the pickle broke",
             "count": 1} for n in dangerous], "calls": [], "notes": [], "opcodes": {}},
            e.format or path, f"its pickle breaks ({e.message}) after naming dangerous globals")
    if other.format == "pickle" and not other.extras["safety"]["globals"]:
        return shown        # a pickle of plain data: torch refuses its magic number, runs nothing
    return _conflict(shown, path, other.extras["safety"], other.format,
                     f"that reading is {other.format} with {counted(len(other.tensors), 'tensor')}")


def _conflict(shown: Checkpoint, path: str, safety: dict, fmt: str, reading: str) -> Checkpoint:
    """`shown` with the safety finding: `fmt` is the format torch's reading found, `reading`
    says what it holds."""
    dangerous = safety["dangerous"]
    runs = (f"it names {len(dangerous):,} dangerous global(s) that torch.load(weights_only=False) "
            f"would run: {', '.join(dangerous[:10])}" if dangerous else
            "its globals are all allowed, but torch.load would return other tensors than these")
    note = (f"these bytes are two files: shown here as {shown.format}, but torch.load takes them "
            f"for {HOW[path]} since the name does not end in .safetensors; {reading}; {runs}")
    merged = dict(safety, notes=[note, *safety.get("notes", ())],
                  torch_reading={"path": path, "format": fmt, "reading": reading})
    extras = dict(shown.extras, safety=merged)
    warnings = [f"SAFETY: {note}", *shown.warnings]
    return Checkpoint(shown.format, shown.name, shown.size, shown.tensors, metadata=shown.metadata,
                      warnings=warnings, extras=extras, sources=shown.sources)


def named_dangerous(error: BaseException) -> list[str]:
    """The dangerous globals a pickle named before it broke (unpickling/machine.py records them
    on its error), found along the chain of errors raised `from` it."""
    seen = error
    while seen is not None:
        dangerous = getattr(seen, "dangerous", ())
        if dangerous:
            return list(dangerous)
        seen = seen.__cause__
    return []


# --- the cheap walk: can the pickle at byte 0 run anything before it breaks? -------------------

# Opcodes that import (GLOBAL, STACK_GLOBAL, INST, EXT*), call (REDUCE, OBJ, NEWOBJ*, BUILD
# through __setstate__, PERSID through persistent_load), or end a pickle whose value torch then
# uses (STOP: the magic number, and the legacy pickles after it).
REACHES = frozenset({"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX",
                     "BUILD", "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID", "STOP"})


@lru_cache(maxsize=None)
def _arguments() -> dict[int, tuple]:
    """opcode byte -> (name, fixed argument bytes or -lines, length field or None), from
    CPython's own opcode table (imported here: only a file torch would unpickle pays for it)."""
    import pickletools
    widths = {pickletools.TAKEN_FROM_ARGUMENT1: "<B", pickletools.TAKEN_FROM_ARGUMENT4: "<i",
              pickletools.TAKEN_FROM_ARGUMENT4U: "<I", pickletools.TAKEN_FROM_ARGUMENT8U: "<Q"}
    table = {}
    for op in pickletools.opcodes:
        kind, code = op.arg, op.code.encode("latin-1")[0]
        if kind is None or kind.n >= 0:
            table[code] = (op.name, kind.n if kind else 0, None)
        elif kind.n == pickletools.UP_TO_NEWLINE:   # GLOBAL and INST take two lines
            table[code] = (op.name, -2 if kind.name == "stringnl_noescape_pair" else -1, None)
        else:
            table[code] = (op.name, 0, struct.Struct(widths[kind.n]))
    return table


MAX_WALK = 100_000          # opcodes walked before the machine is asked instead
MAX_LINE = 16 << 20         # a text argument longer than this: the machine is asked instead
CHUNK = 4096


class _Bytes:
    """Sequential small reads of a source, in chunks, from a given head."""

    def __init__(self, source: ByteSource, head: bytes):
        self.source, self.start, self.data = source, 0, head

    def at(self, pos: int, n: int) -> bytes | None:
        """n bytes at pos, or None past the end of the file."""
        if pos + n > self.source.size:
            return None
        if not (self.start <= pos and pos + n <= self.start + len(self.data)):
            self.start = pos
            self.data = self.source.read(pos, min(self.source.size - pos, max(n, CHUNK)))
        return self.data[pos - self.start:pos - self.start + n]

    def line_end(self, pos: int) -> int | None:
        """The offset just past the next newline from pos, None if there is none (or too far)."""
        scanned = 0
        while scanned < MAX_LINE and pos + scanned < self.source.size:
            n = min(self.source.size - pos - scanned, CHUNK << 4)
            chunk = self.at(pos + scanned, n)
            found = chunk.find(b"\n")
            if found >= 0:
                return pos + scanned + found + 1
            scanned += n
        return None if pos + scanned >= self.source.size else -1


def _may_run(source: ByteSource, head: bytes) -> bool:
    """Whether the pickle at byte 0 reaches an opcode that imports, calls or ends it before it
    breaks (an unknown opcode, an argument past the end of the file). Reads only opcodes and
    lengths. True when unsure (the walk is long, a line very long): the machine then decides."""
    data, table = _Bytes(source, head), _arguments()
    pos = 0
    for _ in range(MAX_WALK):
        code = data.at(pos, 1)
        if code is None or code[0] not in table:
            return False
        name, fixed, length = table[code[0]]
        if name in REACHES:
            return True
        pos += 1
        if fixed < 0:                      # one or two newline-terminated lines
            for _ in range(-fixed):
                end = data.line_end(pos)
                if end is None:
                    return False
                if end < 0:
                    return True
                pos = end
        elif length is not None:           # a length, then that many bytes (skipped unread)
            raw = data.at(pos, length.size)
            if raw is None:
                return False
            (n,) = length.unpack(raw)
            if n < 0:
                return False
            pos += length.size + n
        else:
            pos += fixed
    return True
