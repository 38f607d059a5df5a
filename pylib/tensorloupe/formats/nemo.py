"""NVIDIA NeMo `.nemo` files: a tar archive (nemo/core/connectors/save_restore_connector.py,
`_make_nemo_file_from_folder`: tarfile mode "w:", or "w:gz" in older NeMo) of
  ./model_config.yaml    the model's OmegaConf config (its `target` names the model class)
  ./model_weights.ckpt   torch.save(state_dict): a torch ZIP checkpoint
  (tokenizer files, ...; model-parallel models: ./mp_rank_00/model_weights.ckpt, ...)
The checkpoint is read in place through a slice of the file, exactly as torch.load reads it
(formats/pytorch/loadpath.py), safety report included; the config is parsed by yamlish (a YAML
subset: nothing constructed, tags and anchors refused). A gzipped .nemo cannot be read by range:
it is inflated into memory when it is at most MAX_INFLATED bytes, and refused above.
"""

from __future__ import annotations

import posixpath
import struct
import tarfile
import zlib

from ..errors import (LOW_LEVEL_ERRORS, ErrorFactory, FormatError, LimitError, TensorloupeError,
                      TruncatedError, UnknownFormatError)
from ..model import Checkpoint
from ..source import ByteSource, MemorySource
from ..source.base import SliceSource
from .pytorch import loadpath
from .pytorch.members import CappedFile
from . import yamlish

FORMAT = "nemo"
CONFIG, WEIGHTS = "model_config.yaml", "model_weights.ckpt"
TAR_MAGIC, TAR_MAGIC_AT = b"ustar", 257
GZIP_MAGIC = b"\x1f\x8b"
MAX_CONFIG = 16 << 20
MAX_INFLATED = 256 << 20
MAX_MEMBERS = 100_000


def sniff(head: bytes, size: int, name: str) -> bool:
    """A tar whose first member is NeMo's (tarfile writes "./" first for a folder), or a gzip
    named .nemo."""
    if head.startswith(GZIP_MAGIC):
        return name.lower().endswith(".nemo")
    if head[TAR_MAGIC_AT:TAR_MAGIC_AT + len(TAR_MAGIC)] != TAR_MAGIC:
        return False
    first = _normal(head[:100].split(b"\0", 1)[0].decode("latin-1"))
    return name.lower().endswith(".nemo") or first in (CONFIG, WEIGHTS) or \
        first.endswith("/" + WEIGHTS)


def _normal(name: str) -> str:
    return name[2:] if name.startswith("./") else name


def read(source: ByteSource) -> Checkpoint:
    error = ErrorFactory(source.name, FORMAT)
    warnings: list[str] = []
    tar_source = source
    if source.read(0, min(2, source.size)) == GZIP_MAGIC:
        tar_source = _inflated(source, error)
        warnings.append(f"this .nemo is gzipped: all {source.size:,} bytes were read and "
                        f"inflated to {tar_source.size:,} to open it (an uncompressed .nemo is "
                        "read in place)")
    members = _members(tar_source, error)
    weights = sorted(n for n in members if n == WEIGHTS or n.endswith("/" + WEIGHTS))
    if not weights:
        raise error(UnknownFormatError, f"this tar archive has no {WEIGHTS}: not a NeMo model",
                    found=", ".join(sorted(members)[:4]) or "no members")
    metadata: dict = {}
    config = members.get(CONFIG)
    if config is not None:
        try:
            text = tar_source.read(config.offset_data, _capped(config, MAX_CONFIG, error))
            metadata["nemo.model_config"] = yamlish.loads(text.decode("utf-8"))
        except (yamlish.YamlError, UnicodeDecodeError) as e:
            warnings.append(f"{CONFIG} is not shown: {getattr(e, 'message', type(e).__name__)}")
    else:
        warnings.append(f"the archive has no {CONFIG}")
    parts = [_part(tar_source, members[name], name, error) for name in weights]
    tensors = []
    for name, part in zip(weights, parts):
        prefix = "" if len(parts) == 1 else posixpath.dirname(name) + "/"
        for t in part.tensors:
            if prefix:
                t.name = prefix + t.name
            tensors.append(t)
        warnings += [f"{name}: {w}" for w in part.warnings]
        metadata.update({(prefix + k): v for k, v in part.metadata.items()})
    extras = {k: v for k, v in parts[0].extras.items()}
    if len(parts) > 1:
        from .multifile import merge_reports
        extras["safety"] = merge_reports([(n, p.extras.get("safety", {})) for n, p in
                                          zip(weights, parts)])
    _name_the_member(extras.get("safety"), weights)
    cfg = metadata.get("nemo.model_config")
    extras["nemo"] = {"members": sorted(members)[:200], "weights": weights,
                      "gzipped": tar_source is not source,
                      "target": cfg.get("target") if isinstance(cfg, dict) else None,
                      "torch_format": parts[0].format}
    return Checkpoint(FORMAT, source.name, source.size, tensors, metadata=metadata,
                      warnings=warnings, extras=extras, sources=[source])


def _members(source: ByteSource, error) -> dict[str, tarfile.TarInfo]:
    try:
        with tarfile.open(fileobj=CappedFile(source), mode="r:") as tar:
            infos = []
            for info in tar:
                infos.append(info)
                if len(infos) > MAX_MEMBERS:
                    raise error(LimitError, f"the tar archive has more than {MAX_MEMBERS:,} members")
    except TensorloupeError as e:
        raise e.located(file=source.name, format=FORMAT)
    except (tarfile.TarError, EOFError, OSError, *LOW_LEVEL_ERRORS) as e:
        raise error(FormatError, f"not a readable tar archive: {type(e).__name__}") from e
    members = {}
    for info in infos:
        name = _normal(info.name)
        parts = name.split("/")
        if name.startswith("/") or ".." in parts or "\\" in name:
            # tarfile's own filter ("data") refuses these; a NeMo restore extracts the archive
            raise error(FormatError, f"the tar member {info.name[:200]!r} escapes the archive's "
                        "folder (an absolute path or '..'): extracting it would write outside it",
                        offset=info.offset)
        if info.isfile():
            if info.offset_data + info.size > source.size:
                raise error(TruncatedError, f"the tar member {name[:200]!r} runs past the end of "
                            "the file", offset=info.offset_data, expected=f"{info.size:,} bytes",
                            found=f"{max(0, source.size - info.offset_data):,}")
            members[name] = info
        elif info.issym() or info.islnk():
            if name == CONFIG or name.endswith(WEIGHTS):
                raise error(FormatError, f"the tar member {name[:200]!r} is a link (to "
                            f"{info.linkname[:200]!r}), not a file", offset=info.offset)
    return members


def _capped(info: tarfile.TarInfo, cap: int, error) -> int:
    if info.size > cap:
        raise error(LimitError, f"the tar member {info.name!r} is larger than the limit",
                    expected=f"at most {cap:,} bytes", found=info.size)
    return info.size


def _part(source: ByteSource, info: tarfile.TarInfo, name: str, error) -> Checkpoint:
    """The torch checkpoint in a member, read in place as torch.load reads it."""
    inner = SliceSource(source, info.offset_data, info.size, source.name)
    head = inner.read(0, min(1024, inner.size))
    path = loadpath.path_of(inner, head)
    try:
        return loadpath.read_as(path, inner)
    except TensorloupeError as e:
        e.message = f"{name}: {e.message}"
        raise e.located(file=source.name, format=FORMAT)


def _inflated(source: ByteSource, error) -> MemorySource:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out, position, step = bytearray(), 0, 1 << 20
    try:
        while position < source.size and not inflater.eof:
            chunk = source.read(position, min(step, source.size - position))
            position += len(chunk)
            out += inflater.decompress(chunk, MAX_INFLATED + 1 - len(out))
            if len(out) > MAX_INFLATED or inflater.unconsumed_tail:
                raise error(LimitError, f"this gzipped .nemo inflates to more than {MAX_INFLATED:,} "
                            "bytes, which tensorloupe does not hold in memory: extract it (tar "
                            "-xzf) and open model_weights.ckpt", expected=f"at most {MAX_INFLATED:,}")
    except (zlib.error, struct.error) as e:
        raise error(FormatError, f"the gzip stream does not inflate: {e}") from e
    if not inflater.eof:
        raise error(TruncatedError, "the gzip stream ends early", found=f"{source.size:,} bytes")
    return MemorySource(bytes(out), source.name)


def _name_the_member(safety: dict | None, weights: list[str]) -> None:
    """torch.load never gets the .nemo itself (NeMo extracts the tar and loads its
    model_weights.ckpt): the weights_only verdict says which member it is about."""
    loads = (safety or {}).get("weights_only")
    if isinstance(loads, dict) and len(weights) == 1:
        safety["weights_only"] = {**loads, "member": weights[0]}
