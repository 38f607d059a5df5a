"""Format-neutral descriptions of a checkpoint and its tensors. No tensor bytes live here.

A Tensor is a descriptor into a byte source: where its first element is, its dtype and shape, and
(for torch views) its element strides. Readers build these from headers alone; only the sampler
reads the bytes they point at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from .display import counted, cut, exact_count, html_table, human_bytes, short
from .dtypes import DType, lookup
from .errors import TensorloupeError, UnsupportedError, UsageError
from .source import ByteSource


# The info of a tensor that has none: one shared, read-only mapping instead of an empty dict per
# tensor (a 1M-tensor header would otherwise hold a million of them). A reader that has details
# passes its own dict.
class _NoInfo(Mapping):
    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    __hash__ = object.__hash__  # immutable, so it may be a dataclass default


NO_INFO: Mapping[str, Any] = _NoInfo()


@dataclass(slots=True)
class Tensor:
    """One tensor's descriptor. Slots, no per-instance dict: headers with a million tensors exist
    (bench/header_memory.py states the cost per tensor)."""
    name: str
    dtype: str                       # a dtypes table name ("F32", "BF16", "Q4_K"), or the file's own unknown code
    shape: tuple[int, ...]           # row-major, outermost first
    offset: int                      # byte offset of element 0 (after any storage offset) in `source`
    nbytes: int                      # bytes this tensor's elements span in the file
    source: ByteSource | None = None
    strides: tuple[int, ...] | None = None   # element strides when not contiguous row-major (torch views)
    big_endian: bool = False
    problem: str | None = None       # why values cannot be read (unknown dtype, ...); the file still opens
    info: Mapping[str, Any] = NO_INFO  # format details: ggml dims order, storage key, ... (a
                                       # reader's own dict, possibly shared by equal tensors)
    parts: tuple["Tensor", ...] = ()   # a dequantised weight (quant/logical.py): the stored tensors
                                       # its values are computed from, as the file holds them

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def stored_nbytes(self) -> int:
        """Bytes the file holds for this tensor: its parts' for a dequantised weight."""
        return sum(p.nbytes for p in self.parts) if self.parts else self.nbytes

    @property
    def dtype_info(self) -> DType | None:
        return lookup(self.dtype)

    @property
    def contiguous(self) -> bool:
        return self.strides is None or self.strides == contiguous_strides(self.shape)

    def locate(self) -> int:
        """Absolute byte offset of element 0 in the file. May read: a torch ZIP storage is
        positioned from its local header on first use (see known_file_offset for the no-I/O form)."""
        return self.source.file_offset(self.offset) if self.source is not None else self.offset

    @property
    def known_file_offset(self) -> int | None:
        """The absolute offset if it is known without reading, else None."""
        return self.source.known_file_offset(self.offset) if self.source is not None else self.offset

    @property
    def file(self) -> str | None:
        """The name of the file this tensor's bytes are in (one shard of a set)."""
        return self.source.root().name if self.source is not None else None

    def element_strides(self) -> tuple[int, ...]:
        return self.strides if self.strides is not None else contiguous_strides(self.shape)

    def __repr__(self) -> str:
        # a name from a file, escaped and cut: a repr is one line in a notebook or a traceback
        return f"<Tensor {short(self.name, 120)!r} {short(self.dtype, 20)} {list(self.shape)}>"

    def numpy(self):
        """Every element as a NumPy array of the tensor's shape (numpy must be installed),
        reading this tensor's bytes only. The tensor's own dtype where NumPy has it, else the
        exact values as float32 (dtypes/arrays.py)."""
        from .dtypes.arrays import numpy_module, to_array
        numpy_module()   # its absence is said before anything is read
        if self.problem:
            raise UnsupportedError(f"tensor {self.name!r}: {self.problem}")
        info = self.dtype_info
        if info is None or self.source is None:
            raise UnsupportedError(f"tensor {self.name!r}: dtype {self.dtype!r} cannot be decoded")
        if self.numel == 0:
            return to_array(b"", info, self.shape, self.element_strides(), self.big_endian, True)
        if self.contiguous:
            span = self.nbytes
        else:   # the elements from 0 to the last one the strides reach (a view of plain elements)
            last = sum((d - 1) * s for d, s in zip(self.shape, self.element_strides()))
            span = (last + 1) * info.block_bytes // info.block_elems
        data = self.source.read_data(self.offset, span)
        return to_array(data, info, self.shape, self.element_strides(), self.big_endian,
                        self.contiguous)

    def __array__(self, dtype=None, copy=None):
        """`numpy.asarray(tensor)`: `numpy()`, a new array each time (so `copy` is always met)."""
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def to_json(self) -> dict:
        """The descriptor as JSON; never reads ("offset" is null while unknown, see
        Checkpoint.locate_all)."""
        out = {"name": self.name, "dtype": self.dtype, "shape": list(self.shape),
               "numel": self.numel, "offset": self.known_file_offset, "nbytes": self.nbytes,
               "file": self.file}
        if self.strides is not None:
            out["strides"] = list(self.strides)
        if self.problem:
            out["problem"] = self.problem
        if self.info:
            out["info"] = dict(self.info)
        if self.parts:
            out["stored_nbytes"] = self.stored_nbytes
            out["parts"] = [p.to_json() for p in self.parts]
        return out


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


MAX_SUGGESTED_NAME = 512        # characters of a mistyped name that close matches are sought for
MAX_SUGGESTING = 200_000        # tensors among which they are sought


@dataclass
class Checkpoint:
    format: str                       # "safetensors", "pytorch-zip", "pytorch-legacy", "gguf", ...
    name: str                         # the file name, or the set's (shards.set_name)
    size: int                         # bytes in the file(s)
    tensors: list[Tensor]             # in file order
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)  # format-specific reports: safety, model card, ...
    sources: list[ByteSource] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.by_name: dict[str, Tensor] = {}
        self.replace_tensors(self.tensors)     # a reader's dequantised tensors bring their parts

    def __repr__(self) -> str:
        return (f"<Checkpoint {self.format} {short(self.name, 120)!r}: "
                f"{counted(len(self.tensors), 'tensor')}, {human_bytes(self.size)}>")

    def _repr_html_(self, at_most: int = 20) -> str:
        """The summary and the first `at_most` tensors, as tables (every string escaped)."""
        by_dtype = ", ".join(f"{d} {exact_count(n)}" for d, n in self.parameters_by_dtype().items())
        summary = html_table([("format", self.format), ("files", ", ".join(self.files) or self.name),
                              ("size", f"{human_bytes(self.size)} ({exact_count(self.size)} bytes)"),
                              ("tensors", exact_count(len(self.tensors))),
                              ("parameters", f"{exact_count(self.parameter_count)} ({by_dtype})")]
                             + [("warning", w) for w in self.warnings[:at_most]],
                             caption=self.name)
        shown = [(t.name, t.dtype, list(t.shape), human_bytes(t.stored_nbytes))
                 for t in self.tensors[:at_most]]
        more = len(self.tensors) - len(shown)
        if more > 0:
            shown.append((f"… and {counted(more, 'more tensor')}", "", "", ""))
        return summary + html_table(shown, ("tensor", "dtype", "shape", "size"))

    def replace_tensors(self, tensors: list[Tensor]) -> None:
        """Tensors built from the stored ones (quant/logical.py): the lookup finds each, and
        the stored parts of a dequantised weight under their own names where no tensor has it."""
        self.tensors = tensors
        self.by_name = {p.name: p for t in tensors for p in t.parts}
        self.by_name.update((t.name, t) for t in tensors)

    def tensor(self, name: str) -> Tensor:
        try:
            return self.by_name[name]
        except KeyError:
            why = self._in_missing_part(name) or self._close_names(name)
            raise UsageError(f"no tensor named {cut(name)!r}" + (f": {why}" if why else ""),
                             file=self.name, format=self.format) from None

    def _close_names(self, name: str) -> str | None:
        """`did you mean …` for a mistyped name: difflib's close matches, bounded (a name of
        more than MAX_SUGGESTED_NAME characters, or a checkpoint of more than MAX_SUGGESTING
        tensors, would cost seconds of SequenceMatcher for a message)."""
        if len(name) > MAX_SUGGESTED_NAME or len(self.by_name) > MAX_SUGGESTING:
            return None
        import difflib   # a message's cost, paid only when a name is mistyped
        close = difflib.get_close_matches(name, list(self.by_name), n=3, cutoff=0.75)
        return f"did you mean {' or '.join(repr(cut(c)) for c in close)}?" if close else None

    def _in_missing_part(self, name: str) -> str | None:
        """Where a tensor not at hand is, in a shard set with parts missing (opening/shards.py's
        extras["shards"]): the missing file its index names, or the missing parts it may be in."""
        report = self.extras.get("shards") or {}
        home = (report.get("missing_tensors") or {}).get(name)
        if home:
            return f"the index puts it in {home}, which is missing"
        if report.get("missing_count") and "missing_tensors" not in report:
            n = report["missing_count"]
            return (f"{n:,} of the {counted(report['count'], 'part')} {'is' if n == 1 else 'are'} missing "
                    f"({', '.join(report['missing'])}): it may be in one of them")
        return None

    @property
    def parameter_count(self) -> int:
        return sum(t.numel for t in self.tensors)

    @property
    def files(self) -> list[str]:
        """The names of the files the checkpoint was read from (several for a shard set)."""
        return [s.root().name for s in self.sources]

    def parameters_by_dtype(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in self.tensors:
            counts[t.dtype] = counts.get(t.dtype, 0) + t.numel
        return dict(sorted(counts.items(), key=lambda item: -item[1]))

    def locate_all(self) -> None:
        """Find every tensor's absolute offset now (torch ZIP storages are otherwise positioned
        on first use). A storage whose local header is broken gets a problem instead."""
        pending = [t for t in self.tensors if t.problem is None and t.known_file_offset is None]
        prefetch = getattr(pending[0].source, "locate_together", None) if pending else None
        if prefetch is not None:
            try:
                prefetch([t.source for t in pending])  # one pass of coalesced header reads
            except TensorloupeError:
                pass  # found again below, tensor by tensor, each with its own message
        for t in pending:
            if t.problem is None and t.known_file_offset is None:
                try:
                    t.locate()
                except TensorloupeError as e:
                    t.problem = f"its bytes cannot be located: {e.message}"
                    self.warnings.append(f"tensor {t.name!r}: {t.problem}")

    def bytes_read(self) -> int:
        """Bytes read from the file(s) (what a read costs)."""
        return sum(s.root().bytes_read for s in self.sources)

    def bytes_asked(self) -> int:
        """Bytes asked of the checkpoint's sources: bytes_read plus those its block caches
        served (a plan's exact byte count; bytes_read may be less)."""
        return sum(s.bytes_read for s in self.sources)

    def reads(self) -> int:
        return sum(s.root().reads for s in self.sources)

    def close(self) -> None:
        for s in self.sources:
            s.close()

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
