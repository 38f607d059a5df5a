"""PyTorch's ZIP checkpoints (`torch.save` since 1.6): .pt, .pth, .bin, .ckpt.

Layout (torch/serialization.py `_save`, written by miniz through PyTorchStreamWriter): every record
sits under one root folder (`archive/`, or the file's stem in older versions):
  <root>/data.pkl             the pickled object; tensors refer to storages by persistent id
                              ('storage', storage_class, key, location, numel)
  <root>/data/<key>           each storage's raw bytes, stored (not compressed), 64-byte aligned
  <root>/byteorder            "little" or "big" (absent before 1.12: little)
  <root>/version, .data/version, .format_version, .storage_alignment, .data/serialization_id
Only the directory, the local headers of the storages and the small records are read.
"""

from __future__ import annotations


from ...errors import FormatError, TensorloupeError, UnknownFormatError
from ...model import Checkpoint
from ...source import ByteSource
from .common import checkpoint, load_pickle, storage_loader
from ...unpickling.values import LIMITS
from .members import ENCRYPTED, LOCAL_HEADER, LOCAL_SIGNATURE, STORED, Archive

FORMAT = "pytorch-zip"
EXTENSIONS = (".pt", ".pth", ".bin", ".ckpt")
PICKLE = "data.pkl"
RECORDS = ("byteorder", "version", ".data/version", ".format_version", ".storage_alignment",
           ".data/serialization_id")
MAX_RECORD_BYTES = 256


def sniff(head: bytes, size: int, name: str) -> bool:
    """Any ZIP: the members decide (is_torch), not the first one, which is data/0 in
    TorchScript archives (torch.jit.save) and may be anything in rewritten files."""
    return head.startswith(LOCAL_SIGNATURE)


def is_torch(members) -> bool:
    """torch writes <root>/data.pkl beside its storages <root>/data/<key>, its version record,
    or (TorchScript) constants.pkl; a ZIP without any such pair is something else."""
    roots = {n[:-len(PICKLE)] for n in members if n == PICKLE or n.endswith("/" + PICKLE)}
    return any(root + "constants.pkl" in members or root + "version" in members
               or root + ".data/version" in members
               or any(m.startswith(root + "data/") for m in members) for root in roots)


def _pickle_member(archive: Archive) -> str:
    candidates = [n for n in archive.members if n == PICKLE or
                  (n.endswith("/" + PICKLE) and n.count("/") == 1)]
    if not candidates:
        raise archive.error(FormatError, "the ZIP archive has no data.pkl: not a PyTorch checkpoint",
                            expected="<root>/data.pkl", found=f"{len(archive.members)} members")
    if len(candidates) > 1:
        raise archive.error(FormatError, "the ZIP archive has more than one root folder with a "
                            "data.pkl", found=", ".join(sorted(candidates)[:4]))
    return candidates[0]


def read(source: ByteSource) -> Checkpoint:
    archive = Archive(source, FORMAT)
    if not is_torch(archive.members):
        raise UnknownFormatError(
            "this is a ZIP archive but not a PyTorch checkpoint (no <root>/data.pkl beside "
            "<root>/data/ or constants.pkl)", file=source.name,
            found=", ".join(sorted(archive.members)[:4]) or "no members")
    pickle_name = _pickle_member(archive)
    root = pickle_name[:-len(PICKLE)]
    records, warnings = {}, []
    # one coalesced pass over the local headers of data.pkl and the small records
    archive.data_offsets([root + r for r in (PICKLE, *RECORDS) if root + r in archive.members])
    for record in RECORDS:
        if root + record in archive.members:
            try:
                raw = archive.read(root + record, MAX_RECORD_BYTES)
            except TensorloupeError as e:
                if record == "byteorder":
                    raise
                warnings.append(f"the {record} record cannot be read: {e.message}")
                continue
            records[record] = raw.decode("utf-8", "replace").strip()
    byteorder = records.get("byteorder", "little")
    if byteorder not in ("little", "big"):
        raise archive.error(FormatError, "the byteorder record is neither 'little' nor 'big'",
                            found=repr(byteorder[:20]))
    data = archive.read(pickle_name, LIMITS.max_bytes)
    loader = storage_loader()
    try:
        result = load_pickle(data, loader)
    except TensorloupeError as e:
        info = archive.members[pickle_name]
        e.message = f"{pickle_name}: {e.message}"
        if e.offset is not None and info.compress_type == STORED:
            e.offset += archive.data_offsets([pickle_name])[pickle_name]
        raise e.located(file=source.name, format=FORMAT)

    members = {key: f"{root}data/{key}" for key in loader.storages}

    def locate(ref):
        member = members[ref.key]
        info = archive.members.get(member)
        if info is None:
            return None, 0, 0, f"its storage {member!r} is missing from the archive"
        if info.compress_type != STORED or info.flag_bits & ENCRYPTED:
            return None, 0, 0, (f"its storage {member!r} is compressed or encrypted, so it cannot "
                                "be read in place")
        if info.file_size < ref.nbytes:
            return None, 0, info.file_size, (
                f"its storage {member!r} holds {info.file_size} bytes but is declared as "
                f"{ref.numel} {ref.dtype} elements ({ref.nbytes} bytes)")
        # Positioned lazily: the local header is read when the storage's bytes are first needed.
        return archive.member_source(member), 0, info.file_size, None

    extras = {"archive": {"root": root.rstrip("/"), "members": len(archive.members),
                          "storages": len(members), **records}}
    if root + "constants.pkl" in archive.members:
        extras["torchscript"] = True
        warnings.append("this is a TorchScript archive: its code is not shown; the tensors of "
                        "data.pkl are")
    return checkpoint(FORMAT, source, result.value, [result], locate,
                      big_endian=byteorder == "big", warnings=warnings, extras=extras)
