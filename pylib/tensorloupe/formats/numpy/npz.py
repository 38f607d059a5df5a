""".npz files (numpy.savez, savez_compressed): a ZIP of .npy members, one array each.

Stored members (savez) are read in place: the member's data offset (its local header,
formats/pytorch/members.py) plus the .npy header. Deflated members (savez_compressed) have no
byte offsets: their headers are inflated at open (a few KiB each), their values when first read,
from the member's start (archives/members.py InflatedSource, capped): the cost is said.
Tensor names are the member names without ".npy", as numpy.load's NpzFile keys them.
"""

from __future__ import annotations

from ...display import counted, human_bytes
from ...errors import ErrorFactory, UnknownFormatError
from ...model import Checkpoint
from ...source import ByteSource
from ..archives.members import InflatedSource, first_member
from ..multifile import merge_reports
from ..pytorch.members import DEFLATED, ENCRYPTED, STORED, Archive
from .npy import PEEK, read_array

FORMAT = "npz"
SUFFIX = ".npy"


def sniff(head: bytes, size: int, name: str) -> bool:
    """A ZIP whose first member is a .npy (numpy.savez writes nothing else), or named .npz."""
    first = first_member(head)
    return first is not None and (first.endswith(SUFFIX) or name.lower().endswith(".npz"))


def read(source: ByteSource) -> Checkpoint:
    error = ErrorFactory(source.name, FORMAT)
    archive = Archive(source, FORMAT)
    names = [n for n in archive.members if n.endswith(SUFFIX)]
    if not names:
        raise UnknownFormatError("this is a ZIP archive but not a .npz: it has no .npy members",
                                 file=source.name, format=FORMAT,
                                 found=", ".join(sorted(archive.members)[:4]) or "no members")
    offsets = archive.data_offsets(names)     # the local headers, in coalesced reads
    stored = [n for n in names if archive.members[n].compress_type == STORED]
    # every stored member's .npy header in one vectored read (in place: no block rounding)
    peeks = dict(zip(stored, source.read_many(
        [(offsets[n], min(archive.members[n].file_size, PEEK)) for n in stored])))
    tensors, warnings, safety, deflated = [], [], [], []
    for name in names:
        info = archive.members[name]
        key = name[:-len(SUFFIX)]
        if info.flag_bits & ENCRYPTED or info.compress_type not in (STORED, DEFLATED):
            raise error(UnknownFormatError, f"member {name!r} is encrypted or compressed with "
                        f"method {info.compress_type}; numpy writes stored or deflated members")
        if info.compress_type == STORED:
            array = read_array(source, offsets[name], info.file_size, key, error, peeks[name])
        else:
            deflated.append(info)
            array = read_array(InflatedSource(archive, name, offsets[name]), 0, info.file_size,
                               key, error)
        tensors.append(array.tensor)
        warnings += array.warnings
        if "safety" in array.extras:
            safety.append((key, array.extras["safety"]))
    extras = {"npz": {"members": len(names), "deflated": len(deflated),
                      "deflated_bytes": sum(i.file_size for i in deflated)}}
    if deflated:
        warnings.append(f"{counted(len(deflated), 'array')} of {len(names):,} are deflated "
                        f"(savez_compressed): their values have no place in the file, so reading "
                        f"one inflates its member from the start (up to "
                        f"{human_bytes(max(i.file_size for i in deflated))})")
    others = [n for n in archive.members if not n.endswith(SUFFIX)]
    if others:
        warnings.append(f"{counted(len(others), 'member')} are not .npy arrays and are not shown "
                        f"(e.g. {others[0]!r})")
    if safety:
        extras["safety"] = merge_reports(safety)
    return Checkpoint(FORMAT, source.name, source.size, tensors, warnings=warnings,
                      extras=extras, sources=[source])
