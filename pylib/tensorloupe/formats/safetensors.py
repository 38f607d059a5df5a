"""safetensors: an 8-byte little-endian header length, a JSON header, then the tensor bytes.

Spec (huggingface/safetensors README, "Format"): the header is a JSON object mapping tensor names
to {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to the byte after the
header, plus an optional "__metadata__" object of string to string. The header may be padded with
trailing spaces. The reference reader (safetensors/src/tensor.rs) validates the whole header before
trusting any of it, and so do we: one error per broken rule, each naming the tensor and the values.
"""

from __future__ import annotations

import json
import math
import re
import struct

from ..display import exact_count
from ..dtypes.plain import DTYPES, SAFETENSORS_DTYPES
from ..errors import ErrorFactory, FormatError, LimitError, TruncatedError
from ..model import Checkpoint, Tensor
from ..source import ByteSource

FORMAT = "safetensors"
HEADER_LENGTH = struct.Struct("<Q")
# The reference implementation refuses headers above 100 MB (MAX_HEADER_SIZE in tensor.rs).
MAX_HEADER_BYTES = 100_000_000
METADATA_KEY = "__metadata__"
TORCHAO_NAMES = "tensor_names"   # quant/aosafetensors.py: torchao's flatten_tensor_state_dict
# Every dim and offset is a usize in the reference reader; torch tensors have at most 64 dims. Both
# are checked before any arithmetic, so a shape's product is at most (2**64)**64 (1,233 digits:
# printable, and math.prod of a million dims, quadratic, never runs).
MAX_DIMS = 64
MAX_COUNT = 2**64 - 1


def sniff(head: bytes, size: int, name: str) -> bool:
    """A plausible header length followed by '{' (or the whitespace the Rust reader tolerates)."""
    if len(head) < HEADER_LENGTH.size + 1:
        return False
    (n,) = HEADER_LENGTH.unpack_from(head)
    first = head[HEADER_LENGTH.size:HEADER_LENGTH.size + 64].lstrip(b" \t\r\n")[:1]
    return 2 <= n <= MAX_HEADER_BYTES and first == b"{"


# A surrogate escape in the raw header (`\uD800`-`\uDFFF`): then the decoded strings are checked;
# json pairs a high and a low escape into one character, so a surrogate left in them is lone.
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(value):
    """The first string (a key or a value) in the parsed header that holds a lone surrogate."""
    if isinstance(value, str):
        return value if SURROGATE.search(value) else None
    items = value.items() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for item in items:
        for part in (item if isinstance(value, dict) else (item,)):
            found = _lone_surrogate(part)
            if found is not None:
                return found
    return None


class _DuplicateKeys:
    """object_pairs_hook that builds dicts and remembers keys that appeared twice."""

    def __init__(self) -> None:
        self.duplicates: list[str] = []

    def __call__(self, pairs):
        out = dict(pairs)  # last one wins, as in serde_json (the reference reader)
        if len(out) != len(pairs):  # rare: only then walk the pairs in Python
            seen: set = set()
            for key, _ in pairs:
                if key in seen:
                    self.duplicates.append(key)
                seen.add(key)
        return out


def read(source: ByteSource) -> Checkpoint:
    name, size = source.name, source.size
    error = ErrorFactory(name, FORMAT)

    if size < HEADER_LENGTH.size:
        raise error(TruncatedError, f"the file has only {size:,} bytes; a safetensors file starts "
                    "with an 8-byte header length", offset=0, expected="at least 8 bytes", found=size)
    (header_len,) = HEADER_LENGTH.unpack(source.read(0, HEADER_LENGTH.size))
    if header_len > MAX_HEADER_BYTES:
        raise error(LimitError, "the header length is larger than the 100 MB the format allows",
                    offset=0, expected=f"at most {MAX_HEADER_BYTES:,}", found=header_len)
    if header_len > size - HEADER_LENGTH.size:
        raise error(TruncatedError, "the header runs past the end of the file (truncated download?)",
                    offset=8, expected=f"{header_len:,} header bytes", found=f"{size - 8:,} bytes left")
    raw = source.read(HEADER_LENGTH.size, header_len)
    data_start = HEADER_LENGTH.size + header_len
    data_len = size - data_start

    warnings: list[str] = []
    stripped = raw.lstrip(b" \t\r\n")
    if len(stripped) != len(raw):
        warnings.append(f"the JSON header starts with {len(raw) - len(stripped):,} whitespace bytes; "
                        "the spec requires it to start with '{' (the Rust reader accepts it)")
    if not stripped.startswith(b"{"):
        raise error(FormatError, "the header is not a JSON object", offset=8,
                    expected="'{'", found=repr(stripped[:16]))
    hook = _DuplicateKeys()
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=hook)
    except UnicodeDecodeError as e:
        raise error(FormatError, "the header is not valid UTF-8", offset=8 + e.start) from e
    except (ValueError, RecursionError) as e:
        # JSONDecodeError is a ValueError; so is an integer of more than 4,300 digits.
        where = getattr(e, "pos", None)
        raise error(FormatError, f"the header is not valid JSON: {getattr(e, 'msg', e)}",
                    offset=None if where is None else 8 + where) from e
    if not isinstance(header, dict):
        raise error(FormatError, "the header is not a JSON object", offset=8)
    if SURROGATE_ESCAPE.search(raw):
        lone = _lone_surrogate(header)
        if lone is not None:
            # JSON may escape half of a UTF-16 pair alone; the Rust reader refuses such a header
            # ("unexpected end of hex escape"), and no UTF-8 text can hold what it decodes to.
            raise error(FormatError, "the header escapes a lone UTF-16 surrogate in "
                        f"{lone.encode('utf-8', 'backslashreplace').decode()!r}, which is not text "
                        "(the Rust reader refuses it too)", offset=8)
    for key in hook.duplicates:
        warnings.append(f"the header names {key!r} more than once; the last entry is used "
                        "(the Rust reader silently does the same)")

    metadata = header.pop(METADATA_KEY, None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise error(FormatError, "__metadata__ must map strings to strings", offset=8,
                    found=_excerpt(metadata))

    # Each entry is dropped as soon as its descriptor exists, so the parsed JSON and the
    # descriptors are not both held whole (bench/header_memory.py).
    tensors = [_tensor(source, key, header.pop(key), data_start, error) for key in list(header)]
    del header
    tensors.sort(key=lambda t: (t.offset, t.nbytes))
    _check_layout(tensors, data_start, data_len, error)
    for t in tensors:
        if t.problem:
            warnings.append(f"tensor {t.name!r}: {t.problem}")
    ckpt = Checkpoint(FORMAT, name, size, tensors, metadata=metadata, warnings=warnings,
                      extras={"header_bytes": header_len}, sources=[source])
    if TORCHAO_NAMES in metadata:    # torchao's tensor subclasses, flattened with their metadata
        from ..quant import aosafetensors
        aosafetensors.apply(ckpt)
    return ckpt


def _tensor(source, key, entry, data_start, error) -> Tensor:
    """The entry's descriptor. An entry whose fields are all well-typed is checked by C-level
    calls (a set of the types of its numbers, their min and max): a shard set's 39,120 entries
    took ~1 s of Python-level checks in the browser. Anything else takes the checks one by one,
    which say what is wrong (_checked_tensor)."""
    if type(entry) is dict:
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if (type(dtype) is str and type(shape) is list and type(offsets) is list
                and len(shape) <= MAX_DIMS and len(offsets) == 2):
            numbers = shape + offsets
            if (set(map(type, numbers)) == _INTS and min(numbers) >= 0 and max(numbers) <= MAX_COUNT
                    and offsets[0] <= offsets[1]):
                return _descriptor(source, key, dtype, shape, offsets, data_start, error)
    return _checked_tensor(source, key, entry, data_start, error)


_INTS = {int}    # JSON numbers that are whole: not floats, and not true/false (bools)


def _checked_tensor(source, key, entry, data_start, error) -> Tensor:
    where = f"tensor {key!r}"
    if not isinstance(entry, dict):
        raise error(FormatError, f"{where} is not an object", found=_excerpt(entry))
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in entry]
    if missing:
        raise error(FormatError, f"{where} has no {', '.join(missing)}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str):
        raise error(FormatError, f"{where} has a dtype that is not a string", found=_excerpt(dtype))
    if isinstance(shape, list) and len(shape) > MAX_DIMS:
        raise error(LimitError, f"{where} has {len(shape):,} dimensions",
                    expected=f"at most {MAX_DIMS:,}", found=len(shape))
    if not (isinstance(shape, list) and all(_is_count(d) for d in shape)):
        raise error(FormatError, f"{where} has an invalid shape",
                    expected=f"a list of integers from 0 to {MAX_COUNT:,}", found=_excerpt(shape))
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)):
        raise error(FormatError, f"{where} has invalid data_offsets",
                    expected=f"[begin, end] integers from 0 to {MAX_COUNT:,}", found=_excerpt(offsets))
    if offsets[0] > offsets[1]:
        raise error(FormatError, f"{where} ends before it begins", found=f"data_offsets {offsets}")
    return _descriptor(source, key, dtype, shape, offsets, data_start, error)


def _descriptor(source, key, dtype, shape, offsets, data_start, error) -> Tensor:
    """The descriptor of an entry whose fields are valid: its dtype and shape must still agree
    with the bytes its offsets hold."""
    begin, end = offsets
    problem = None
    info = DTYPES.get(dtype) if dtype in SAFETENSORS_DTYPES else None
    numel = math.prod(shape)
    if info is None:
        problem = f"unknown dtype {dtype!r}: its values cannot be decoded"
    else:
        bits = numel * info.block_bytes * 8 // info.block_elems if numel % info.block_elems == 0 else None
        if bits is None or bits % 8:
            raise error(FormatError, f"tensor {key!r}: {exact_count(numel)} elements of {dtype} do not fill whole bytes",
                        found=f"shape {shape}")
        if bits // 8 != end - begin:
            raise error(FormatError, f"tensor {key!r}: shape {shape} of {dtype} needs {exact_count(bits // 8)} bytes "
                        f"but data_offsets {offsets} hold {end - begin:,}",
                        expected=bits // 8, found=end - begin)
    # data_offsets are not kept: they are offset - data_start and offset + nbytes - data_start.
    return Tensor(key, dtype, tuple(shape), data_start + begin, end - begin, source=source,
                  problem=problem)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _excerpt(value) -> str:
    """The start of a JSON value for a message (its integers are below 4,300 digits: JSON parsed
    them; nesting as deep as the parser allowed may still be too deep to write back)."""
    try:
        return json.dumps(value)[:80]
    except (ValueError, RecursionError):
        return f"a {type(value).__name__} nested too deep to show"



def _check_layout(tensors: list[Tensor], data_start: int, data_len: int, error) -> None:
    """Tensors must tile the data section exactly: sorted, contiguous, no holes, no overlaps."""
    position = 0
    previous = None
    for t in tensors:
        begin, end = t.offset - data_start, t.offset - data_start + t.nbytes
        if begin != position:
            kind = "overlaps" if begin < position else "leaves a hole before"
            after = f"the end of {previous!r}" if previous else "the data section start"
            raise error(FormatError, f"tensor {t.name!r} {kind} {after}",
                        expected=f"data_offsets to begin at {position:,}", found=begin)
        position, previous = end, t.name
    if position > data_len:
        raise error(TruncatedError, f"the file is {position - data_len:,} bytes shorter than its header "
                    "says (truncated download?)", expected=f"{position:,} data bytes",
                    found=f"{data_len:,}")
    if position < data_len:
        raise error(FormatError, f"the file has {data_len - position:,} bytes after the last tensor",
                    expected=f"{position:,} data bytes", found=f"{data_len:,}")
