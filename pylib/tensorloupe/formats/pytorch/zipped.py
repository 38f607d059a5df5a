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
from .allowlist import TORCH_DTYPES
from . import torchscript
from .common import checkpoint, load_pickle, storage_loader
from ...unpickling.objects import LIMITS
from .members import ENCRYPTED, LOCAL_HEADER, LOCAL_SIGNATURE, STORED, Archive

FORMAT = "pytorch-zip"
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
    or (TorchScript) constants.pkl; a ZIP without any such pair is something else. Names are
    compared lowercased, as torch's lookup compares them (lookup.py): DATA.pkl is data.pkl."""
    members = {n.lower() for n in members}
    roots = {n[:-len(PICKLE)] for n in members if n == PICKLE or n.endswith("/" + PICKLE)}
    return any(root + "constants.pkl" in members or root + "version" in members
               or root + ".data/version" in members
               or any(m.startswith(root + "data/") for m in members) for root in roots)


def _pickle_member(archive: Archive) -> str:
    """The data.pkl torch unpickles: "<root>/data.pkl" looked up as torch does (lookup.py), the
    root being the folder of the first central directory entry."""
    first = archive.infos[0].filename if archive.infos else ""
    if "/" in first:
        found = archive.find(first.split("/", 1)[0] + "/" + PICKLE)
        if found is None:
            raise archive.error(FormatError, "the ZIP archive has no data.pkl in the folder of its "
                                "first member: not a PyTorch checkpoint",
                                expected=f"{first.split('/', 1)[0]}/{PICKLE}",
                                found=f"{len(archive.infos):,} members")
        return found
    # torch refuses an archive whose first entry is in no folder; read what such a file holds
    candidates = [n for n in archive.members if n.lower() == PICKLE or
                  (n.lower().endswith("/" + PICKLE) and n.count("/") == 1)]
    if not candidates:
        raise archive.error(FormatError, "the ZIP archive has no data.pkl: not a PyTorch checkpoint",
                            expected="<root>/data.pkl", found=f"{len(archive.members):,} members")
    if len(candidates) > 1:
        raise archive.error(FormatError, "the ZIP archive has more than one root folder with a "
                            "data.pkl", found=", ".join(sorted(candidates)[:4]))
    return candidates[0]


def _archive_notes(archive: Archive, pickle_name: str) -> list[str]:
    """What in the archive's layout makes other tools disagree about what torch would load."""
    notes = []
    variants = archive.variants(pickle_name)
    if len(variants) > 1:
        names = ", ".join(repr(info.filename) for info in variants[:6])
        notes.append(f"the archive has {len(variants):,} members named {pickle_name!r} (exactly or "
                     f"but for case: {names}); torch's case-insensitive lookup opens "
                     f"{pickle_name!r} at byte {archive.members[pickle_name].header_offset:,}, which "
                     "is what is shown; the safety report covers all of them")
    expected = pickle_name.rpartition("/")[0] + "/" + PICKLE if "/" in pickle_name else PICKLE
    if len(variants) == 1 and pickle_name != expected:
        notes.append(f"the pickle is named {pickle_name!r}, not {expected!r}: torch's lookup "
                     "ignores case and unpickles it (tools that match names exactly miss it)")
    shadowed = [info.filename for info in archive.shadowed if info not in variants]
    if shadowed:
        notes.append(f"{len(shadowed):,} other members repeat a name (exactly or but for case), "
                     f"e.g. {shadowed[0]!r}: torch reads one of each, as shown")
    if archive.leading:
        notes.append(f"{archive.leading:,} bytes before the first member the central directory lists")
    return notes


def read(source: ByteSource) -> Checkpoint:
    if source.read(0, len(LOCAL_SIGNATURE)) != LOCAL_SIGNATURE:
        # torch.load calls a file a ZIP only if it starts with a local header; anything else takes
        # its legacy path, which unpickles the file's first bytes (code included) before it checks
        # for the magic number. So analyse what torch would unpickle, not the ZIP behind it.
        from .legacy import read_leading_pickle
        return read_leading_pickle(source, "does not start with a ZIP local header "
                                   f"({LOCAL_SIGNATURE!r})")
    archive = Archive(source, FORMAT)
    if not is_torch(archive.members):
        raise UnknownFormatError(
            "this is a ZIP archive but not a PyTorch checkpoint (no <root>/data.pkl beside "
            "<root>/data/ or constants.pkl)", file=source.name,
            found=", ".join(sorted(archive.members)[:4]) or "no members")
    pickle_name = _pickle_member(archive)
    root = pickle_name[:-len(PICKLE)]
    records, warnings = {}, []
    found_records = {r: archive.find(root + r) for r in RECORDS}
    # one coalesced pass over the local headers of data.pkl and the small records
    archive.data_offsets([pickle_name] + [n for n in found_records.values() if n])
    for record, member in found_records.items():
        if member is not None:
            try:
                raw = archive.read(member, MAX_RECORD_BYTES)
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
    notes = _archive_notes(archive, pickle_name)
    data = archive.read(pickle_name, LIMITS.max_bytes, verify=False)
    crc = archive.crc_problem(archive.members[pickle_name], data)
    if crc:
        notes.append(crc + ": torch does not check CRCs and unpickles these bytes, so they are "
                     "analysed anyway")
    loader = storage_loader()
    try:
        result = load_pickle(data, loader)
    except TensorloupeError as e:
        info = archive.members[pickle_name]
        e.message = f"{pickle_name}: {e.message}"
        if e.offset is not None and info.compress_type == STORED:
            e.offset += archive.data_offsets([pickle_name])[pickle_name]
        raise e.located(file=source.name, format=FORMAT)
    others = _shadowed_pickles(archive, pickle_name, notes)

    members = {key: f"{root}data/{key}" for key in loader.storages}

    def locate(ref):
        member = archive.find(members[ref.key])
        info = archive.members.get(member) if member else None
        if info is None:
            return None, 0, 0, f"its storage {member!r} is missing from the archive"
        if info.compress_type != STORED or info.flag_bits & ENCRYPTED:
            return None, 0, 0, (f"its storage {member!r} is compressed or encrypted, so it cannot "
                                "be read in place")
        if info.compress_size != info.file_size:
            # a stored member holds exactly its size; a different (e.g. ZIP64) size would put
            # the tensor's bytes in whatever follows the member
            return None, 0, 0, (f"its storage {member!r} is stored with {info.compress_size:,} bytes "
                                f"but declares {info.file_size:,}")
        if info.file_size < ref.nbytes:
            return None, 0, info.file_size, (
                f"its storage {member!r} holds {info.file_size:,} bytes but is declared as "
                f"{ref.numel:,} {ref.dtype} elements ({ref.nbytes:,} bytes)")
        # Positioned lazily: the local header is read when the storage's bytes are first needed.
        return archive.member_source(member), 0, info.file_size, None

    extras = {"archive": {"root": root.rstrip("/"), "members": len(archive.members),
                          "storages": len(members), **records}}
    if archive.find(root + "constants.pkl"):
        extras["torchscript"] = torchscript.summary(archive, root, [result, *others],
                                                    lambda data: load_pickle(data, storage_loader()))
        warnings.append(f"this is a TorchScript archive: {extras['torchscript']['headline']}; "
                        "its code is listed, never run; the tensors of data.pkl are shown")
    return checkpoint(FORMAT, source, result.value, [result, *others], locate,
                      big_endian=byteorder == "big", warnings=warnings, extras=extras,
                      notes=notes, load_problems=_record_problems(archive, loader.storages, members))


def _record_problems(archive: Archive, storages: dict, members: dict) -> list[str]:
    """Where torch.load stops reading the storages (torch/serialization.py load_tensor,
    get_storage_from_record): a record that is missing, or whose size is not the storage's
    declared elements times their size."""
    problems = []
    for key, ref in storages.items():
        member = archive.find(members[key])
        info = archive.members.get(member) if member else None
        if info is None:
            problems.append(f"its storage record {members[key]!r} is missing")
        elif ref.dtype in TORCH_DTYPES and info.file_size != ref.nbytes:
            problems.append(f"its storage record {members[key]!r} holds {info.file_size:,} bytes "
                            f"where the pickle declares {ref.numel:,} {ref.dtype} elements "
                            f"({ref.nbytes:,} bytes): torch stops there (record size does not "
                            "match expected size)")
    return problems[:3] + ([f"and {len(problems) - 3:,} more such storages"] if len(problems) > 3
                           else [])


def _shadowed_pickles(archive: Archive, pickle_name: str, notes: list[str]) -> list:
    """The other data.pkl variants, unpickled for the safety report only (another reader of the
    same file, or another torch version, could open one of them)."""
    out = []
    chosen = archive.members[pickle_name]
    for info in archive.variants(pickle_name):
        if info is chosen:
            continue
        try:
            data = archive.read(info.filename, LIMITS.max_bytes, verify=False, info=info)
            out.append(load_pickle(data, storage_loader()))
        except TensorloupeError as e:
            notes.append(f"the other {info.filename!r} (at byte {info.header_offset:,}) cannot be "
                         f"analysed: {e.message}")
    return out
