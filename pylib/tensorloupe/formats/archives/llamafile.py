"""llamafile: an executable (Cosmopolitan's APE: `MZqFpD` first) with a ZIP appended that holds the
model as a stored .gguf member, its data aligned by llamafile's `zipalign` so it can be mapped.

The ZIP is found as zipfile finds any ZIP, by its end-of-central-directory record at the end of the
file; the .gguf member's data offset comes from its local header (formats/pytorch/members.py), and
the GGUF is read in place through a MemberSlice over that member: the executable is never read.
The result is the GGUF's checkpoint (format "gguf", so its tokenizer and architecture views work),
with extras["container"] saying where it was found.
"""

from __future__ import annotations

from ...errors import ErrorFactory, FormatError, TensorloupeError, UnknownFormatError
from ...model import Checkpoint
from ...source import ByteSource
from ..pytorch.members import ENCRYPTED, STORED, Archive
from .members import MemberSlice

FORMAT = "llamafile"
APE_MAGIC = b"MZqFpD"        # Actually Portable Executable: a DOS header that is also a shell script
SUFFIX = ".gguf"


def sniff(head: bytes, size: int, name: str) -> bool:
    return head.startswith(APE_MAGIC) or name.lower().endswith(".llamafile")


def read(source: ByteSource) -> Checkpoint:
    from ..gguf import reader as gguf     # the GGUF reader and its codecs: only for a llamafile
    error = ErrorFactory(source.name, FORMAT)
    archive = Archive(source, FORMAT)
    models = [n for n in archive.members if n.lower().endswith(SUFFIX)]
    if not models:
        raise error(UnknownFormatError, "this executable has no .gguf member in its ZIP: not a "
                    "llamafile with weights", found=", ".join(sorted(archive.members)[:4])
                    or "no members")
    name = models[0]
    info = archive.members[name]
    if info.compress_type != STORED or info.flag_bits & ENCRYPTED or \
            info.compress_size != info.file_size:
        raise error(FormatError, f"the GGUF member {name!r} is compressed or encrypted, so it "
                    "cannot be read in place (llamafile's zipalign stores it)",
                    found=f"compression method {info.compress_type}")
    offset = archive.data_offsets([name])[name]
    member = MemberSlice(source, offset, info.file_size, name=name)
    try:
        inner = gguf.read(member)
    except TensorloupeError as e:
        e.message = f"member {name!r}: {e.message}"
        e.file, e.format = source.name, FORMAT
        raise
    warnings = list(inner.warnings)
    if len(models) > 1:
        warnings.append(f"the ZIP holds {len(models):,} .gguf members; the first, {name!r}, is shown")
    extras = dict(inner.extras, container={"format": FORMAT, "member": name, "offset": offset,
                                           "executable_bytes": min(i.header_offset for i in
                                                                   archive.infos)})
    return Checkpoint(inner.format, source.name, source.size, inner.tensors,
                      metadata=inner.metadata, warnings=warnings, extras=extras, sources=[source])
