"""What torch.load(weights_only=True), torch's default since 2.6, does with a torch file: loads it
or refuses it, and which globals it refuses. Decided from the pickles tensorloupe read, never by
importing torch.

The definition is torch 2.13's torch/_weights_only_unpickler.py and torch/serialization.py `load`:
  - a TorchScript ZIP (a constants.pkl record) and a pre-0.4 tar checkpoint are refused outright
    ("Cannot use weights_only=True with ...");
  - a ZIP's data.pkl, or every pickle of the legacy format, goes through the weights_only
    unpickler: it refuses every opcode outside SUPPORTED_OPCODES ("Unsupported operand") and every
    global outside ALLOWED ("Unsupported global"), and modules sys, os, posix and nt always;
  - a file that is only a pickle passes the unpickler and then fails torch's magic-number check;
  - a ZIP storage record whose size is not the storage's declared bytes is refused when read
    ("record size ... does not match expected size"), as is a storage record that is missing.
The table is checked against torch itself (tests/test_torch_verdicts.py), as is the verdict on
every pickle fixture the repository writes.
"""

from __future__ import annotations

from ...display import counted

TORCH = "torch 2.13"
LOAD = "torch.load(weights_only=True)"

# torch.storage._dtype_to_storage_type_map() and _new_dtypes(), uint1..7 and int1..7: each dtype
# object is allowed under its str(), "torch.<name>" (aliases such as torch.float or torch.half are
# not: their str() is torch.float32, torch.float16).
_DTYPES = (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
    "bool", "complex128", "complex64", "qint8", "qint32", "quint8", "quint4x2", "quint2x4",
    "uint16", "uint32", "uint64", "complex32", "float8_e5m2", "float8_e4m3fn",
    "float8_e5m2fnuz", "float8_e4m3fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "bits8",
    "bits16", "bits1x8", "bits2x4", "bits4x2",
    *(f"uint{n}" for n in range(1, 8)), *(f"int{n}" for n in range(1, 8)))
# torch._storage_classes (legacy typed storages, torch.cuda's too) and torch._tensor_classes
_STORAGES = ("Double", "Float", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte",
             "Bool", "ComplexDouble", "ComplexFloat")
_QSTORAGES = ("QInt8", "QInt32", "QUInt8", "QUInt4x2", "QUInt2x4")
_TENSORS = ("Double", "Float", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte")
_REBUILDS = ("_rebuild_parameter", "_rebuild_parameter_with_state", "_rebuild_qtensor",
             "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
             "_rebuild_sparse_tensor", "_rebuild_meta_tensor_no_storage", "_rebuild_nested_tensor",
             "_rebuild_wrapper_subclass", "_rebuild_device_tensor_from_numpy",
             "_rebuild_device_tensor_from_cpu_tensor")
ALLOWED: frozenset[str] = frozenset((
    # _get_allowed_globals()'s first rows
    "collections.OrderedDict", "collections.Counter", "torch.nn.parameter.Parameter",
    "torch.serialization._get_layout", "torch.Size", "torch.Tensor", "torch.device",
    "_codecs.encode", "builtins.bytearray", "builtins.set", "builtins.complex",
    *(f"torch.{d}" for d in _DTYPES),
    *(f"torch.{t}Tensor" for t in _TENSORS + ("Bool",)),
    *(f"torch.cuda.{t}Tensor" for t in _TENSORS + ("Bool",)),
    *(f"torch.sparse.{t}Tensor" for t in _TENSORS),
    *(f"torch.cuda.sparse.{t}Tensor" for t in _TENSORS),
    *(f"torch.{s}Storage" for s in _STORAGES + _QSTORAGES),
    *(f"torch.cuda.{s}Storage" for s in _STORAGES),
    "torch.storage.TypedStorage", "torch.storage.UntypedStorage",
    *(f"torch.{q}" for q in ("per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
                             "per_channel_symmetric", "per_channel_affine_float_qparams")),
    *(f"torch._utils.{f}" for f in _REBUILDS),
    "torch._tensor._rebuild_from_type_v2",
    # registered by `import torch` itself (torch.serialization.add_safe_globals in
    # torch/nested/_internal and torch/distributed/_mesh_layout.py): allowed in any process
    "torch.nested._internal.nested_tensor.NestedTensor",
    "torch.nested._internal.nested_tensor._rebuild_njt",
    "torch.distributed._mesh_layout._MeshLayout", "torch.distributed._mesh_layout._FlatLayout",
))
# Modules refused even when a user allow-lists one of their names (_blocklisted_modules).
BLOCKED_MODULES = ("sys", "os", "posix", "nt")
# The opcodes Unpickler.load handles (pickletools names); any other is "Unsupported operand".
SUPPORTED_OPCODES: frozenset[str] = frozenset((
    "APPEND", "APPENDS", "BINFLOAT", "BINGET", "BININT", "BININT1", "BININT2", "BINPERSID",
    "BINPUT", "BINUNICODE", "BUILD", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_SET", "EMPTY_TUPLE",
    "GLOBAL", "LONG1", "LONG_BINGET", "LONG_BINPUT", "MARK", "NEWFALSE", "NEWOBJ", "NEWTRUE",
    "NONE", "PROTO", "REDUCE", "SETITEM", "SETITEMS", "SHORT_BINSTRING", "STOP", "TUPLE",
    "TUPLE1", "TUPLE2", "TUPLE3"))

TORCHSCRIPT, TAR, PLAIN = "torchscript", "tar", "plain"
# tensorloupe's format name (or "torchscript") -> the kind `report` takes
OUTRIGHT_BY_FORMAT = {"torchscript": TORCHSCRIPT, "pytorch-tar": TAR, "pickle": PLAIN}
_OUTRIGHT = {
    TORCHSCRIPT: "it is a TorchScript archive: torch refuses weights_only=True for those (only "
                 "torch.jit.load, which runs the archive's code, opens it)",
    TAR: "it is a pre-0.4 tar checkpoint: torch refuses weights_only=True for that format",
}


def allowed(name: str) -> bool:
    """Whether torch's weights_only unpickler accepts this global (a GLOBAL's module.name)."""
    return name in ALLOWED and name.partition(".")[0] not in BLOCKED_MODULES


def report(pickles, kind: str | None = None, problems: list[str] = ()) -> dict:
    """{"loads", "refused", "why"} for the pickles torch.load reads, in its order. `kind`:
    TORCHSCRIPT or TAR (refused before any pickle), PLAIN (a pickle without the legacy magic
    number), or None; `problems`: what else torch stops at (a storage record of the wrong size)."""
    refused = list(dict.fromkeys(name for result in pickles for name in result.globals
                                 if not allowed(name)))
    operands = sorted({op for result in pickles for op in result.opcodes
                       if op not in SUPPORTED_OPCODES})
    reasons = []
    if kind in _OUTRIGHT:
        reasons.append(_OUTRIGHT[kind])
    if operands:
        reasons.append(f"its unpickler refuses the opcode(s) {', '.join(operands)} (it reads "
                       "protocol 2 opcodes only)")
    if refused:
        reasons.append(f"its unpickler refuses the global(s) {', '.join(refused)} (not on "
                       f"{TORCH}'s weights_only allow-list)")
    if kind == PLAIN and not reasons:
        reasons.append("the file is a pickle without torch's legacy magic number: torch "
                       "unpickles it, then refuses it (Invalid magic number)")
    reasons += problems
    if reasons:
        why = f"{LOAD} ({TORCH}) refuses it: " + "; ".join(reasons)
    else:
        why = f"{LOAD} ({TORCH}) loads it: every global and opcode is on its allow-list"
    return {"loads": not reasons, "refused": refused, "why": why}


def merged(named: list[tuple[str, dict]]) -> dict | None:
    """One verdict for several files' reports: loads only if torch loads every one of them."""
    parts = [(name, s["weights_only"]) for name, s in named if "weights_only" in s]
    if not parts:
        return None
    refusing = [(name, w) for name, w in parts if not w["loads"]]
    refused = list(dict.fromkeys(g for _, w in parts for g in w["refused"]))
    if not refusing:
        return {"loads": True, "refused": [], "why": f"{LOAD} ({TORCH}) loads each of the "
                f"{counted(len(parts), 'file')}"}
    return {"loads": False, "refused": refused, "files": [name for name, _ in refusing],
            "why": "; ".join(f"{name}: {w['why']}" for name, w in refusing[:5])
            + (f"; and {counted(len(refusing) - 5, 'more file')}" if len(refusing) > 5 else "")}

