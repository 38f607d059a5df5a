"""Which reader a file needs: cheap signature checks tried in order, then the file extension.

Before any format is tried, files that are commonly mistaken for checkpoints (Git LFS pointers,
HTML pages saved by a browser, empty files) get a message of their own.
"""

from __future__ import annotations

import os
import re
from types import ModuleType
from typing import Callable, NamedTuple

from ..errors import UnknownFormatError
from ..model import Checkpoint
from ..source import ByteSource
from . import training

HEAD_BYTES = 1024


# Readers are imported when their turn comes: a safetensors file never pays for importing the
# torch and GGUF readers (pickletools, tarfile, the ggml codecs: most of the start-up in Pyodide).
def _safetensors():
    from ..formats import safetensors
    return safetensors


def _gguf():
    from ..formats.gguf import reader
    return reader


def _onnx():
    from ..formats.onnx import reader
    return reader


def _npy():
    from ..formats.numpy import npy
    return npy


def _npz():
    from ..formats.numpy import npz
    return npz


def _dduf():
    from ..formats.archives import dduf
    return dduf


def _llamafile():
    from ..formats.archives import llamafile
    return llamafile
def _hdf5():
    from ..formats.hdf5 import reader
    return reader


def _keras():
    from ..formats.hdf5 import keras
    return keras


def _nemo():
    from ..formats import nemo
    return nemo


def _torch_dcp():
    from ..formats.pytorch import distcp
    return distcp


def _torch_zip():
    from ..formats.pytorch import zipped
    return zipped


def _torch_legacy():
    from ..formats.pytorch import legacy
    return legacy


def _torch_tar():
    from ..formats.pytorch import tar
    return tar


class Reader(NamedTuple):
    load: Callable[[], ModuleType]   # the container reader: FORMAT, sniff(head, size, name), read(source)
    extensions: tuple[str, ...]      # the names that mean "this was meant to be that format"


# The container readers in sniffing order. Their extensions are here, not in the readers, so
# that listing file types (a dropped folder's model files) imports none of them: this is the one
# extension table (grouping.py, the CLI's folder targets and the page's file list use it).
READERS = (
    Reader(_safetensors, (".safetensors",)),
    Reader(_gguf, (".gguf",)),
    Reader(_onnx, (".onnx",)),
    Reader(_npy, (".npy",)),
    # ZIPs that are not torch's: known by their first member, so before the torch ZIP reader
    Reader(_npz, (".npz",)),
    Reader(_dduf, (".dduf",)),
    Reader(_llamafile, (".llamafile",)),   # an executable: found by the ZIP at its end
    # torch.distributed.checkpoint: known by name (a .distcp starts like a torch ZIP), so first
    Reader(_torch_dcp, (".distcp",)),
    Reader(_hdf5, (".h5", ".hdf5")),              # Keras .weights.h5 and any h5py file
    Reader(_keras, (".keras",)),                  # a ZIP: before torch's ZIP reader takes it
    Reader(_nemo, (".nemo",)),                    # a tar: before torch's tar reader takes it
    Reader(_torch_zip, (".pt", ".pth", ".bin", ".ckpt", ".jit")),   # .jit: TorchScript archives
    Reader(_torch_legacy, (".pkl", ".pickle")),   # plain pickles: read for their safety report
    Reader(_torch_tar, ()),          # shares .pt/.pth/... with the ZIP format: found by content only
)
EXTENSIONS = tuple(ext for reader in READERS for ext in reader.extensions)
# An ONNX model's external data files, by the names exporters give them (torch.onnx and
# onnx.save_model: model.onnx.data; optimum: model.onnx_data): read through the model, never alone.
BESIDE_DATA = (".onnx.data", ".onnx_data")


def is_external_data(name: str) -> bool:
    return name.lower().endswith(BESIDE_DATA)

LFS_POINTER = re.compile(rb"^version https://git-lfs\.github\.com/spec/v1\s*\n"
                         rb"(?:.*\n)*?size (\d+)", re.MULTILINE)
HTML_START = (b"<!doctype html", b"<html", b"<?xml", b"<head", b"<body")


def read(source: ByteSource) -> Checkpoint:
    head = source.read(0, min(HEAD_BYTES, source.size))
    _refuse_impostors(source, head)
    path = _torch_path(source, head)
    for entry in READERS:
        reader = entry.load()
        if _takes(reader, path, head, source):
            return _part_of(_checked(source, head, path, reader.read(source)))
    extension = os.path.splitext(source.name)[1].lower()
    for entry in READERS:
        if extension in entry.extensions:
            # Nothing matched, but the name says what it should be: let that reader say what is wrong.
            return _part_of(_checked(source, head, path, entry.load().read(source)))
    raise UnknownFormatError(
        f"this is not a checkpoint tensorloupe can read ({', '.join(EXTENSIONS)})",
        file=source.name, found=f"first bytes {head[:16].hex(' ')}")


def _torch_path(source: ByteSource, head: bytes) -> str:
    """The path torch.load takes through the file (formats/pytorch/loadpath.py). A name ending
    in .safetensors is that module's first rule, decided here so that such a file imports
    nothing of torch's readers."""
    if source.name.endswith(".safetensors"):
        return "safetensors"
    from ..formats.pytorch import loadpath
    return loadpath.path_of(source, head)


def _checked(source: ByteSource, head: bytes, path: str, shown: Checkpoint) -> Checkpoint:
    if path == "safetensors":
        return shown
    from ..formats.pytorch import loadpath
    return loadpath.checked(source, head, path, shown)


def _takes(reader: ModuleType, path: str, head: bytes, source: ByteSource) -> bool:
    """Whether `reader` reads this file. safetensors and GGUF go by their signature (and are
    then checked against what torch.load makes of the bytes); torch's own formats go as torch.load
    takes the file: a tar is what tarfile opens, whatever its magic or first member's name, and
    a file torch unpickles from byte 0 is legacy/pickle even if it starts like a tar."""
    if path == "safetensors":
        return reader.sniff(head, source.size, source.name)
    from ..formats.pytorch import loadpath
    follows = loadpath.FOLLOWS.get(reader.FORMAT)
    if follows is None:
        return reader.sniff(head, source.size, source.name)
    return follows == path and (path != loadpath.PICKLE or
                                reader.sniff(head, source.size, source.name))


def _part_of(ckpt: Checkpoint) -> Checkpoint:
    """A training run's file read by itself says what it is part of (training.py's names)."""
    found = training.match(training.basename(ckpt.name))
    if found is not None:
        kind, whose = found
        said = (f"this is the {kind} of a training run ({whose or 'a training checkpoint'}), not "
                "a model: its values are training state; open its folder to see it beside the model")
        if whose == training.DEEPSPEED:
            from . import deepspeed
            said = deepspeed.lone_sentence(ckpt.name)
        ckpt.warnings.append(said)
        ckpt.extras["part_of"] = {"kind": kind, "of": whose, "warning": said}
    return ckpt


def _refuse_impostors(source: ByteSource, head: bytes) -> None:
    if source.size == 0:
        raise UnknownFormatError("the file is empty (0 bytes)", file=source.name)
    pointer = LFS_POINTER.match(head)
    if pointer:
        raise UnknownFormatError(
            f"this is a Git LFS pointer file ({source.size:,} bytes), not the model: the real file "
            f"({int(pointer.group(1)):,} bytes) was never downloaded; run `git lfs pull` or "
            "download it from the model page", file=source.name)
    if head.lstrip()[:16].lower().startswith(HTML_START):
        raise UnknownFormatError(
            "this is an HTML page saved under a model's file name (a login, error or download "
            "page?), not a checkpoint", file=source.name)
