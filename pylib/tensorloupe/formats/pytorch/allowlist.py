"""The globals a torch pickle may name: allow-listed stand-ins, verdicts, and torch's type tables.

A torch checkpoint's pickle names a few dozen globals (rebuild functions, storage classes, dtypes,
OrderedDict). Each allowed name is one row below with a pure builder that turns the call's
arguments into data (a TensorRef, a dict, a tuple, a number); nothing is imported and no attribute
of a real module is looked up. Every other name resolves to a stand-in without a builder, so any
call to it becomes an inert unpickling.objects.Marker. verdicts.py says what every other name would do
if a real unpickler ran the file.
"""

from __future__ import annotations

import _compat_pickle
import struct

from ...errors import FormatError
from ...unpickling.objects import Marker, StandIn, Stateful, safe_keys
from . import weightsonly
from .verdicts import MAY_EXECUTE, judge_other  # noqa: F401 (MAY_EXECUTE: the reason tests name)

# torch dtype name -> (tensorloupe dtype table name or None if we cannot decode it, bytes per element)
TORCH_DTYPES: dict[str, tuple[str | None, int]] = {
    "float32": ("F32", 4), "float64": ("F64", 8), "float16": ("F16", 2), "bfloat16": ("BF16", 2),
    "int8": ("I8", 1), "int16": ("I16", 2), "int32": ("I32", 4), "int64": ("I64", 8),
    "uint8": ("U8", 1), "uint16": ("U16", 2), "uint32": ("U32", 4), "uint64": ("U64", 8),
    "bool": ("BOOL", 1), "complex64": ("C64", 8), "complex128": ("C128", 16),
    "float8_e4m3fn": ("F8_E4M3", 1), "float8_e5m2": ("F8_E5M2", 1),
    "float8_e4m3fnuz": ("F8_E4M3FNUZ", 1), "float8_e5m2fnuz": ("F8_E5M2FNUZ", 1),
    "float8_e8m0fnu": ("F8_E8M0", 1),
    # Quantized tensors show their raw integer codes (int_repr), the scale is in the tensor's info.
    "qint8": ("I8", 1), "quint8": ("U8", 1), "qint32": ("I32", 4),
    "complex32": ("C32", 4), "quint4x2": (None, 1), "quint2x4": (None, 1),
    "float4_e2m1fn_x2": ("F4", 1), "bits8": (None, 1), "bits16": (None, 2), "bits1x8": (None, 1),
    "bits2x4": (None, 1), "bits4x2": (None, 1),
}
# Spellings torch also accepts for the same dtypes (torch.float is torch.float32, ...).
DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "short": "int16",
                 "int": "int32", "long": "int64", "cfloat": "complex64", "cdouble": "complex128",
                 "chalf": "complex32"}

# Legacy typed storage classes (torch/storage.py `_dtype_to_storage_type_map`) -> torch dtype.
STORAGE_CLASSES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool", "BFloat16Storage": "bfloat16",
    "ComplexDoubleStorage": "complex128", "ComplexFloatStorage": "complex64",
    "QInt8Storage": "qint8", "QInt32Storage": "qint32", "QUInt8Storage": "quint8",
    "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4", "UntypedStorage": "uint8",
}
STORAGE_MODULES = ("torch", "torch.cuda", "torch.storage")


class StorageRef:
    """A storage named by a persistent id: where its bytes are is decided by the container."""

    __slots__ = ("key", "dtype", "numel", "location", "kind")

    def __init__(self, key: str, dtype: str, numel: int, location: str, kind: str):
        self.key, self.dtype, self.numel, self.location, self.kind = key, dtype, numel, location, kind

    @property
    def nbytes(self) -> int:
        """Bytes of the storage (counting 1 per element when its dtype is unknown)."""
        return self.numel * TORCH_DTYPES.get(self.dtype, (None, 1))[1]


class TensorRef(Stateful):
    """A tensor as its rebuild function describes it: a strided view into a storage."""

    __slots__ = ("storage", "offset", "size", "stride", "dtype", "kind", "info")

    def __init__(self, storage, offset, size, stride, dtype, kind="tensor", info=None):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride
        self.dtype, self.kind, self.info = dtype, kind, info or {}
        self.state = self.items = self.dictitems = None


class NumpyData(Stateful):
    """numpy arrays, dtypes and scalars, kept as data: their BUILD state says what they hold."""

    __slots__ = ("what", "args")

    def __init__(self, what: str, args: tuple):
        self.what, self.args = what, args
        self.state = self.items = self.dictitems = None


def dtype_of(standin) -> str:
    """The torch dtype name a stand-in (a dtype object or a storage class) stands for.

    A global we do not know (a newer torch's dtype or storage class) keeps its own name: its
    tensors get a problem (no decoder) and the file still opens.
    """
    if isinstance(standin, StandIn):
        return standin.name if standin.value is None else standin.value[1]
    raise FormatError(f"{_kind(standin)} is given where torch writes a dtype or storage class")


class BadCall(FormatError):
    """An allowed function called with arguments torch would not take: the file is wrong there."""


def _kind(value) -> str:
    """What a pickle value is, for a message (never its str(): it may be huge or deep)."""
    if isinstance(value, (StandIn, Marker)):
        return value.name
    name = type(value).__name__
    return {StorageRef: "a storage", TensorRef: "a tensor"}.get(type(value)) or \
        f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _arguments(what: str, args: tuple, least: int, most: int | None = None) -> tuple:
    """The call's arguments, if there are as many as `what` takes."""
    most = least if most is None else most
    if not least <= len(args) <= most:
        takes = f"{least}" if least == most else f"{least} to {most}"
        raise BadCall(f"the pickle calls {what} with {len(args):,} arguments; it takes {takes}")
    return args


def _ints(what: str, field: str, value) -> tuple:
    """A tensor's size or stride: a tuple (or list, or torch.Size) of integers."""
    if type(value) not in (tuple, list) or not all(type(v) is int for v in value):
        raise BadCall(f"the pickle calls {what} with a {field} that is not a sequence of "
                      f"integers", found=_kind(value))
    return tuple(value)


def _tensor_args(what: str, storage, offset, size, stride):
    if not isinstance(storage, StorageRef):
        raise BadCall(f"the pickle calls {what} with a first argument that is not a storage",
                      found=_kind(storage))
    if type(offset) is not int:
        raise BadCall(f"the pickle calls {what} with a storage offset that is not an integer",
                      found=_kind(offset))
    size, stride = _ints(what, "size", size), _ints(what, "stride", stride)
    if len(size) != len(stride):
        raise BadCall(f"the pickle calls {what} with {len(size):,} sizes but {len(stride):,} strides")
    return storage, offset, size, stride


REBUILD_QTENSOR = "torch._utils._rebuild_qtensor"


def _rebuild_tensor_as(what: str, least: int, most: int):
    # _rebuild_tensor: (storage, storage_offset, size, stride); _v2 adds requires_grad,
    # backward_hooks[, metadata]
    def rebuild(args, kwargs):
        args = _arguments(what, args, least, most)
        storage, offset, size, stride = _tensor_args(what, *args[:4])
        return TensorRef(storage, offset, size, stride, storage.dtype)
    return rebuild


def _rebuild_tensor_v3(args, kwargs):
    # (storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])
    what = "torch._utils._rebuild_tensor_v3"
    args = _arguments(what, args, 7, 8)
    storage, offset, size, stride = _tensor_args(what, *args[:4])
    return TensorRef(storage, offset, size, stride, _dtype_argument(what, args[6]))


def _dtype_argument(what: str, value) -> str:
    try:
        return dtype_of(value)
    except FormatError:
        raise BadCall(f"the pickle calls {what} with a dtype that is no torch dtype",
                      found=_kind(value)) from None


def _rebuild_parameter(args, kwargs):
    # (data, requires_grad, backward_hooks[, state])
    data = _arguments("torch._utils._rebuild_parameter", args, 1, 4)[0]
    if isinstance(data, TensorRef):
        data.kind = "parameter"
    return data


def _number(value):
    # an int beyond int64 is no torch scale or zero point (and str() may refuse its digits)
    if type(value) is int:
        return value if -(1 << 63) <= value < 1 << 63 else None
    return value if type(value) is float else None


# torch._utils._rebuild_qtensor's quantizer_params, by qscheme (torch/_tensor.py
# __reduce_ex_internal): (qscheme, scale, zero_point), or (qscheme, scales, zero_points, axis)
# with the per-channel scales and zero points as tensors.
PER_TENSOR = ("per_tensor_affine",)
PER_CHANNEL = ("per_channel_affine", "per_channel_affine_float_qparams")


def _quantizer(params, dims: int) -> dict:
    what = REBUILD_QTENSOR
    if type(params) not in (tuple, list) or not params:
        raise BadCall(f"the pickle calls {what} with quantizer parameters that are not a tuple "
                      "(qscheme, ...)", found=_kind(params))
    scheme = params[0].name if isinstance(params[0], StandIn) else None
    scheme = scheme.removeprefix("torch.") if scheme else None
    if scheme in PER_TENSOR:
        if len(params) != 3 or _number(params[1]) is None or type(params[2]) is not int \
                or _number(params[2]) is None:
            raise BadCall(f"the pickle calls {what} with per-tensor quantizer parameters that are "
                          "not (qscheme, scale, zero_point)", expected="(qscheme, a number, an "
                          "int64)", found=f"({', '.join(_kind(p) for p in params)})")
        return {"qscheme": scheme, "scale": params[1], "zero_point": params[2]}
    if scheme in PER_CHANNEL:
        if len(params) != 4 or not all(isinstance(p, TensorRef) for p in params[1:3]) or \
                type(params[3]) is not int or not 0 <= params[3] < max(dims, 1):
            raise BadCall(f"the pickle calls {what} with per-channel quantizer parameters that "
                          "are not (qscheme, scales, zero_points, axis)", expected="(qscheme, a "
                          f"tensor, a tensor, an axis below {max(dims, 1)})",
                          found=f"({', '.join(_kind(p) for p in params)})")
        return {"qscheme": scheme, "axis": params[3]}
    raise BadCall(f"the pickle calls {what} with a qscheme torch cannot rebuild",
                  expected=" or ".join(f"torch.{s}" for s in PER_TENSOR + PER_CHANNEL),
                  found=_kind(params[0]))


def _rebuild_qtensor(args, kwargs):
    # (storage, storage_offset, size, stride, quantizer_params, requires_grad, backward_hooks).
    # The values shown are the stored integer codes (torch's int_repr()); scale and zero point
    # (per tensor) or the channel axis go in the tensor's info.
    args = _arguments(REBUILD_QTENSOR, args, 5, 7)
    storage, offset, size, stride = _tensor_args(REBUILD_QTENSOR, *args[:4])
    quantizer = _quantizer(args[4], len(size))
    return TensorRef(storage, offset, size, stride, storage.dtype, "quantized", {"quantizer": quantizer})


def _rebuild_wrapper_subclass(args, kwargs):
    # (cls, dtype, size, stride, storage_offset, layout, device, requires_grad): a tensor subclass
    # (torchao's Int8Tensor, Float8Tensor, ...) with no storage of its own; its inner tensors come
    # in the state _rebuild_from_type_v2 sets on it (torch/_tensor.py _rebuild_from_type_v2)
    what = "torch._utils._rebuild_wrapper_subclass"
    args = _arguments(what, args, 8)
    cls, dtype = args[0], _dtype_argument(what, args[1])
    size, stride = _ints(what, "size", args[2]), _ints(what, "stride", args[3])
    if len(size) != len(stride):
        raise BadCall(f"the pickle calls {what} with {len(size):,} sizes but {len(stride):,} strides")
    name = cls.name if isinstance(cls, (StandIn, Marker)) else _kind(cls)
    return TensorRef(None, 0, size, stride, dtype, "subclass", {"subclass": name})


def _rebuild_from_type_v2(args, kwargs):
    # (func, new_type, args, state): func(*args), then the subclass and its state
    func, new_type, inner_args, state = _arguments("torch._tensor._rebuild_from_type_v2", args, 4)
    if not isinstance(func, StandIn) or func.builder is _rebuild_from_type_v2:
        return Marker("torch._tensor._rebuild_from_type_v2", args)  # no nesting: no recursion
    if type(inner_args) not in (tuple, list):
        raise BadCall(f"the pickle calls torch._tensor._rebuild_from_type_v2 with arguments for "
                      f"{func.name} that are not a tuple", found=_kind(inner_args))
    result = func.apply(tuple(inner_args), None)
    if isinstance(result, TensorRef) and isinstance(new_type, StandIn):
        result.info["subclass"] = new_type.name
        if result.kind == "subclass" and type(state) is dict:
            result.state = state     # its inner tensors and attributes, walked by find_tensors
            result.info["inner"] = [k for k, v in state.items() if type(k) is str and type(v) is TensorRef]
            result.info["attributes"] = {k: v for k, v in state.items() if type(k) is str and _plain(v)}
    return result


def _plain(value) -> bool:
    """An attribute a subclass's state may hold that is shown as it is: a number, a flag, a short
    string, or a short list of integers (torchao's block_size)."""
    if value is None or type(value) in (bool, int, float):
        return type(value) is not int or -(1 << 63) <= value < 1 << 63
    if type(value) is str:
        return len(value) <= 64
    return type(value) in (list, tuple) and len(value) <= 8 and all(type(v) is int and 0 <= v < 1 << 63 for v in value)


def _rebuild_meta(args, kwargs):
    # (dtype, size, stride, requires_grad)
    what = "torch._utils._rebuild_meta_tensor_no_storage"
    args = _arguments(what, args, 3, 4)
    dtype = _dtype_argument(what, args[0])
    size, stride = _ints(what, "size", args[1]), _ints(what, "stride", args[2])
    return TensorRef(None, 0, size, stride, dtype, "meta")


def _ordered_dict(args, kwargs):
    pairs = list(args[0]) if args and type(args[0]) in (list, tuple) else []
    if not all(type(pair) in (list, tuple) and len(pair) == 2 for pair in pairs):
        raise BadCall("the pickle calls collections.OrderedDict with items that are not "
                      "(key, value) pairs")
    return dict(zip(safe_keys(key for key, _ in pairs), (value for _, value in pairs)))


def _device(args, kwargs):
    # torch.device("cuda", 0) -> "cuda:0" (no str() of a pickle int over 64 bits: it may have
    # more digits than str() allows)
    return ":".join(a if type(a) is str else str(a) for a in args
                    if (type(a) is str and len(a) < 40) or (type(a) is int and a.bit_length() < 64))


def _codecs_encode(args, kwargs):
    # Protocol 2 pickles bytes as _codecs.encode(text, "latin1").
    text, encoding = (_arguments("_codecs.encode", args, 1, 2) + ("utf-8",))[:2]
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8", "ascii"):
        raise BadCall("the pickle calls _codecs.encode with other arguments than a str and "
                      "latin1, utf-8 or ascii", found=f"({', '.join(_kind(a) for a in args)})")
    return text.encode(encoding)


def _sized(what: str, convert, accepted, most: int):
    def build(args, kwargs):
        if len(args) > most or any(not isinstance(a, accepted) for a in args):
            raise BadCall(f"the pickle calls {what} with arguments it does not take",
                          expected=f"at most {most} of {' or '.join(_kind(t()) for t in accepted)}",
                          found=f"({', '.join(_kind(a) for a in args)})")
        try:
            return convert(*args)
        except (TypeError, ValueError, OverflowError) as e:  # slice(), complex(2**2000)
            raise BadCall(f"the pickle calls {what} with a value it cannot hold") from e
    return build


_NUMPY_SCALARS = {"b1": "?", "i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I",
                  "i8": "q", "u8": "Q", "f2": "e", "f4": "f", "f8": "d"}


def _numpy_scalar(args, kwargs):
    args = _arguments("numpy.core.multiarray.scalar", args, 1, 2)
    dtype, raw = args[0], args[1] if len(args) > 1 else None
    code = dtype.args[0] if isinstance(dtype, NumpyData) and dtype.args else None
    order = ">" if isinstance(dtype, NumpyData) and isinstance(dtype.state, tuple) and \
        len(dtype.state) > 1 and dtype.state[1] == ">" else "<"
    if isinstance(raw, bytes) and isinstance(code, str) and code in _NUMPY_SCALARS:
        layout = struct.Struct(order + _NUMPY_SCALARS[code])
        if layout.size == len(raw):
            return layout.unpack(raw)[0]
    return NumpyData("scalar", args)


def _numpy(what):
    return lambda args, kwargs: NumpyData(what, args)


_TENSOR_BUILDERS = {
    "torch._utils._rebuild_tensor": _rebuild_tensor_as("torch._utils._rebuild_tensor", 4, 4),
    "torch._utils._rebuild_tensor_v2": _rebuild_tensor_as("torch._utils._rebuild_tensor_v2", 6, 7),
    "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
    "torch._utils._rebuild_qtensor": _rebuild_qtensor,
    "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
    "torch._utils._rebuild_wrapper_subclass": _rebuild_wrapper_subclass,
    "torch._utils._rebuild_meta_tensor_no_storage": _rebuild_meta,
}
_DATA_BUILDERS = {
    "collections.OrderedDict": _ordered_dict,
    "torch.Size": _sized("torch.Size", tuple, (list, tuple), 1),
    "torch.device": _device,
    "_codecs.encode": _codecs_encode,
    "builtins.set": _sized("builtins.set", lambda items=(): set(safe_keys(items)), (list, tuple), 1),
    "builtins.frozenset": _sized("builtins.frozenset",
                                 lambda items=(): frozenset(safe_keys(items)), (list, tuple), 1),
    "builtins.complex": _sized("builtins.complex", complex, (int, float), 2),
    "builtins.bytearray": _sized("builtins.bytearray", bytearray, (bytes, bytearray), 1),
    "builtins.bytes": _sized("builtins.bytes", bytes, (bytes,), 1),
    "builtins.slice": _sized("builtins.slice", slice, (int, type(None)), 3),
    "numpy.dtype": _numpy("dtype"),
    "numpy.core.multiarray._reconstruct": _numpy("ndarray"),
    "numpy._core.multiarray._reconstruct": _numpy("ndarray"),
    "numpy.core.multiarray.scalar": _numpy_scalar,
    "numpy._core.multiarray.scalar": _numpy_scalar,
}
# Names allowed as arguments only (calling them still makes a Marker), including the legacy
# tensor classes (torch.FloatTensor, ...) the tar format records next to each tensor.
_ALLOWED_VALUES = {"numpy.ndarray", "torch.Tensor", "torch.nn.parameter.Parameter",
                   "torch.per_tensor_affine", "torch.per_channel_affine",
                   "torch.per_channel_affine_float_qparams", "torch.strided"} | {
    f"{module}.{name.removesuffix('Storage')}Tensor" for module in ("torch", "torch.cuda")
    for name in STORAGE_CLASSES}

# torch.distributed.checkpoint's .metadata (formats/pytorch/distcp.py): DCP's own dataclasses,
# pickled by NEWOBJ + BUILD (their fields as the BUILD state) and one enum called with its value.
# They are read as data: each becomes an inert Marker holding its state, which distcp.py reads by
# name; none is imported. torch itself reads .metadata with pickle.load (filesystem.py
# read_metadata), not weights_only, so the reason says so rather than claim torch's allow-list.
DCP_METADATA = "torch.distributed.checkpoint.metadata"
DCP_CLASSES = frozenset(
    [f"{DCP_METADATA}.{name}" for name in (
        "Metadata", "TensorStorageMetadata", "TensorProperties", "ChunkStorageMetadata",
        "BytesStorageMetadata", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")]
    + ["torch.distributed.checkpoint.filesystem._StorageInfo"])
DCP_REASON = ("torch.distributed.checkpoint's metadata dataclass, read as data by tensorloupe "
              "(torch.load(weights_only=True) refuses it: not on torch's weights_only allow-list; "
              "torch's DCP reader reads .metadata with pickle.load, which imports it)")


def normalize(module: str, name: str) -> tuple[str, str]:
    """The module and name a real unpickler would import, after Python 2 renames (fix_imports)."""
    module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def judge(module: str, name: str) -> tuple[str, str]:
    """(verdict, reason): "allowed", "inert" or "dangerous", and why."""
    full = f"{module}.{name}"
    if full in _TENSOR_BUILDERS or full in _DATA_BUILDERS or full in _ALLOWED_VALUES or \
            _torch_value(full) is not None:
        if weightsonly.allowed(full):
            return "allowed", "read as data by tensorloupe (torch's weights_only allow-list has it)"
        return "allowed", ("read as data by tensorloupe (torch.load(weights_only=True) refuses it: "
                           "not on torch's weights_only allow-list)")
    if full in DCP_CLASSES:
        return "allowed", DCP_REASON
    return judge_other(module, name)


def verdict(module: str, name: str) -> str:
    return judge(module, name)[0]


def _torch_value(full_name: str):
    """('dtype', name) for torch dtype objects, ('storage', dtype) for storage classes."""
    module, _, name = full_name.rpartition(".")
    if module == "torch" and (name in TORCH_DTYPES or name in DTYPE_ALIASES):
        return ("dtype", DTYPE_ALIASES.get(name, name))
    if module in STORAGE_MODULES and name in STORAGE_CLASSES:
        return ("storage", STORAGE_CLASSES[name])
    return None


# Allow-listed builders that are functions, not classes: NEWOBJ (cls.__new__(cls, ...)) on them
# fails in torch (weights_only or not), so it is refused here too instead of read as a call.
_FUNCTIONS = frozenset(_TENSOR_BUILDERS) | {
    "_codecs.encode", "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar"}


def resolve(module: str, name: str) -> StandIn:
    module, name = normalize(module, name)
    full = f"{module}.{name}"
    builder = _TENSOR_BUILDERS.get(full) or _DATA_BUILDERS.get(full)
    verdict, reason = judge(module, name)
    return StandIn(full, verdict, builder, _torch_value(full), reason=reason,
                   function=full in _FUNCTIONS)
