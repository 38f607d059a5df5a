"""Checkpoints stored as several files, opened as one (`tensorloupe.open([path, ...])`).

Split GGUF (llama.cpp `gguf-split`, gguf-py `GGUFWriter(split_max_tensors=...)`): parts named
`<stem>-00001-of-00003.gguf`, each a complete GGUF file whose metadata has `split.no` (0-based),
`split.count` and `split.tensors.count`; the first part carries the model's metadata.

Sharded safetensors (transformers `save_pretrained`): `model-00001-of-00002.safetensors`, ... and
optionally `model.safetensors.index.json`, {"metadata": {"total_size": N}, "weight_map": {tensor:
shard file name}}. With an index, the shards it names are the set; without one, the `-NNNNN-of-NNNNN`
names are.

Sharded PyTorch (transformers 4.x `save_pretrained(safe_serialization=False, max_shard_size=...)`):
`pytorch_model-00001-of-00002.bin`, ... (each a `torch.save` of its shard's state dict, ZIP or
legacy) and `pytorch_model.bin.index.json`, the same index. They merge as safetensors shards do;
each part's safety report is kept (extras["safety"] covers every part: a dangerous global in any
shard is named, with its file).

Parts may be given in any order. The result keeps the base format ("gguf", "safetensors"), so every
view works unchanged, and each Tensor keeps its own part's source. `extras["shards"]` lists the
parts ({"count", "parts": [{"no", "name", "size", "tensors"}], "missing": [file names],
"missing_count": N, "errors": [sentences], "missing_tensors": {tensor: missing file} with an
index}; at most MAX_LISTED names are listed). A missing part is a warning that names it ("part 2 of
3 (model-00002-of-00003.gguf) is missing ..."), and the set still opens: the parts at hand can be
inspected; but the set is incomplete, which `errors(ckpt)` says (health flags it as an error,
`inspect` says it first, `--strict` fails). Code reads extras["shards"], never the warnings' text.
Files that cannot belong together (mixed formats, disagreeing part counts, the same part twice,
one tensor in two parts) are errors, and so is a part count no real split writes (llama.cpp's
split.count is a uint16): missing parts are counted by arithmetic, never by walking the count.
"""

from __future__ import annotations

import itertools
import json
import re
from operator import attrgetter
from typing import Callable, NamedTuple

from . import beside, deepspeed, detect, pipeline, training
from ..errors import (ErrorFactory, FormatError, LimitError, TensorloupeError, UnsupportedError,
                      UsageError)
from ..model import Checkpoint, Tensor
from .parallel import MAX_WORKERS, map_parallel
from ..source import ByteSource, is_url
from ..formats import safetensors
from ..formats import multifile as dcpnames   # DCP file names
from ..formats.multifile import merge_reports
from ..display import counted, exact_count

PART_NAME = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.(?P<ext>gguf|safetensors|bin)$")
# Any .json among the files given is read as an index (its weight_map names the parts).
JSON_SUFFIX = ".json"
# transformers writes indexes of a few hundred KB; refuse to parse anything absurd.
MAX_INDEX_BYTES = 100_000_000
# llama.cpp writes split.count as a uint16 (LLM_KV_SPLIT_COUNT); the -NNNNN-of-NNNNN names allow
# at most 99999 safetensors shards.
MAX_SPLIT_COUNT = 65535
# Missing parts named one by one (in warnings and extras["shards"]["missing"]); the rest are counted.
MAX_LISTED = 20


def open_all(sources: list[ByteSource], read: Callable | None = None) -> Checkpoint:
    """`read(source)` reads one of them (default read_one); a caller that has read some already
    (the page reads each shard's header as it arrives) passes its own."""
    if not sources:
        raise UsageError("no files were given")
    if any(dcpnames.is_member(s.name) for s in sources):
        return _open_dcp(sources)
    # An ONNX model's external data files go with it: it finds them by name (ByteSource.beside).
    data = {_basename(s.name): s for s in sources if detect.is_external_data(s.name)}
    if data:
        if len(data) == len(sources):
            raise UsageError("this is an ONNX model's external data, not a model: open the "
                             ".onnx file (or its folder) instead", file=sources[0].name)
        for source in sources:
            source.neighbours = data
        sources = [s for s in sources if not detect.is_external_data(s.name)]
        try:
            ckpt = open_all(sources, read)
        except BaseException:
            for source in data.values():
                source.close()
            raise
        for unused in set(map(id, data.values())) - set(map(id, ckpt.sources)):
            next(s for s in data.values() if id(s) == unused).close()
        return ckpt
    if any(pipeline.is_index(s.name) for s in sources):   # a diffusers folder: its components
        try:
            return pipeline.open_sources(sources, lambda parts: open_all(parts, read))
        except BaseException:
            for source in sources:
                source.close()
            raise
    if any(deepspeed.is_member(s.name) for s in sources):
        return _open_zero(sources, read or read_one)
    # A training run's files beside the model (opening/training.py) are its training state.
    state = [s for s in sources if training.is_part(s.name)]
    files = [s for s in sources if not is_index(s.name) and s not in state]
    indexes = [s for s in sources if is_index(s.name) and s not in state]
    try:
        if state and not files and not indexes:   # training files alone: each is what it is
            files, state = [s for s in state if not training.is_json_part(s.name)], []
            if not files:
                raise UsageError("this is the trainer state of a training checkpoint, not a "
                                 "model: open its folder (or the model file with it)",
                                 file=sources[0].name)
        if not files:
            other = next((s for s in indexes if beside.what_is(s.name)), None)
            if other is not None:   # config.json, tokenizer.json: what it is, and what to open
                raise UsageError(f"this is {beside.what_is(other.name)}, not a checkpoint: open "
                                 "the model file (or its folder) instead", file=other.name)
            raise UsageError("only index files were given; add the checkpoint files",
                             file=indexes[0].name)
        if len(indexes) > 1:
            raise UsageError("more than one index file was given",
                             found=", ".join(s.name for s in indexes))
        # Remote parts are opened side by side: each header is a round trip or two of waiting.
        # So is the index, first (the rest of a large one is a request of its own); its errors
        # are raised where the merge reads it, after the checks that need no index.
        workers = MAX_WORKERS if any(s.root().waits for s in sources) else 1
        done = map_parallel(read or read_one, indexes + files, workers)
        indexes, parts = done[:len(indexes)], done[len(indexes):]
        if state:
            return _with_training(_merge(parts, indexes),
                                  [training.part_of(s, read or read_one) for s in state])
        return _merge(parts, indexes)
    except BaseException:
        for source in sources:
            source.close()
        raise


def _open_dcp(sources: list[ByteSource]) -> Checkpoint:
    """A torch.distributed.checkpoint folder: its .metadata and the .distcp files given
    (formats/pytorch/distcp.py); a .distcp without the .metadata is refused, naming it."""
    # Imported here: the torch readers, which other sets never need.
    from ..formats.pytorch import distcp
    try:
        metadata = [s for s in sources if distcp.is_metadata(s.name)]
        others = [s for s in sources if not distcp.is_member(s.name)]
        if others:
            raise UsageError("the files are not all of one torch.distributed.checkpoint folder",
                             found=", ".join(s.name for s in others[:3]))
        if not metadata:
            raise distcp.lone_data_file(sources[0].name)
        if len(metadata) > 1:
            raise UsageError(f"more than one {distcp.METADATA_NAME} was given")
        data = {}
        for s in sources:
            if s is not metadata[0]:
                name = _basename(s.name)
                if name in data:
                    raise UsageError("the same data file was given twice", file=name)
                data[name] = s
        return distcp.read_set(metadata[0], data)
    except BaseException:
        for source in sources:
            source.close()
        raise


def _open_zero(sources: list[ByteSource], read: Callable) -> Checkpoint:
    """A DeepSpeed ZeRO tag folder's files, as one model (opening/deepspeed.py)."""
    try:
        others = [s for s in sources if not deepspeed.is_member(s.name)]
        if others:
            raise UsageError("the files are not all of one DeepSpeed ZeRO checkpoint folder",
                             found=", ".join(s.name for s in others[:3]))
        return deepspeed.read_set(sources, read)
    except BaseException:
        for source in sources:
            source.close()
        raise


def _merge(parts: list, indexes: list) -> Checkpoint:
    """The model the parts make: one file, or the set merged by its format's merger."""
    formats = sorted({p.format for p in parts})
    if len(formats) > 1:
        raise FormatError("the files are not shards of one checkpoint: they are of different "
                          "formats", found=", ".join(f"{p.name} ({p.format})" for p in parts))
    merger = MERGERS.get(formats[0])
    if len(parts) == 1 and not indexes and not (merger and merger.is_part(parts[0])):
        return parts[0]
    if merger is None:
        raise UnsupportedError(f"{formats[0]} files cannot be opened as shards of one "
                               "checkpoint", format=formats[0])
    return merger.merge(parts, indexes)


def _with_training(ckpt: Checkpoint, parts: list) -> Checkpoint:
    """The model with its training state beside it (opening/training.py): extras["training"],
    and one safety report over the model's pickles and every training pickle (each part keeps
    its own too), so a dangerous global in any of them is named (and fails --strict)."""
    try:
        extras, warnings = training.report(parts)
        ckpt.extras["training"] = extras
        ckpt.warnings += warnings
        pickled = training.safety_parts(parts)
        if pickled:
            ckpt.extras["safety"] = _merge_safety(
                ([ckpt] if "safety" in ckpt.extras else []) + pickled)
    finally:
        training.close(parts)
    return ckpt


def open_each(targets: list, open_one: Callable[[object], ByteSource]) -> Checkpoint:
    """open_all of `open_one(target)` for each target, each file read in the same task that
    opened it: a remote part's header is parsed while the other parts' first requests are still
    on their way, not after the last of them. Errors are those of opening every target first
    (the first target that cannot be opened, in the order given), then open_all's."""
    workers = MAX_WORKERS if any(is_url(t) for t in targets) else 1

    def open_and_read(target):
        try:
            source = open_one(target)
        except BaseException as e:    # raised below, in the order given
            return None, e, None
        try:
            return source, None, ("read", read_one(source))
        except BaseException as e:    # raised by open_all, which closes every source
            return source, None, ("error", e)
    done = map_parallel(open_and_read, list(targets), workers)
    failed = next((e for _, e, _ in done if e is not None), None)
    if failed is not None:
        for source, _, _ in done:
            if source is not None:
                source.close()
        raise failed
    known = {source: read for source, _, read in done}

    def read(source):
        how, value = known[source]
        if how == "error":
            raise value
        return value
    return open_all([source for source, _, _ in done], read)


def _absent(names: list[str]) -> str:
    """Tensors an index lists that no shard holds, in words."""
    return (f"{counted(len(names), 'tensor')} the index lists {'is' if len(names) == 1 else 'are'} "
            f"in none of the shards, e.g. {names[0]!r}")


def is_index(name: str) -> bool:
    return name.lower().endswith(JSON_SUFFIX)


def read_one(source: ByteSource):
    """A part's Checkpoint, or for an index a ReadIndex (its contents or the error reading it),
    or for trainer_state.json its training.Part."""
    if dcpnames.is_member(source.name):   # read together by _open_dcp, never one by one
        return None
    if detect.is_external_data(source.name):   # read through its ONNX model
        return None
    if training.is_json_part(source.name):
        return training.read_json(source)
    if is_index(source.name):
        try:
            return ReadIndex(source.name, read_index(source), None)
        except TensorloupeError as e:
            return ReadIndex(source.name, None, e)
    try:
        return detect.read(source)
    except TensorloupeError as e:
        raise e.located(file=source.name)


class ReadIndex(NamedTuple):
    name: str
    index: dict | None
    error: TensorloupeError | None

    def get(self) -> dict:
        if self.error is not None:
            raise self.error
        return self.index


# --- split GGUF -------------------------------------------------------------------------------

def _merge_gguf(parts: list[Checkpoint], indexes: list[ReadIndex]) -> Checkpoint:
    # Imported here: the GGUF reader brings the ggml codecs, which other sets never need.
    from ..formats.gguf import reader as gguf
    from ..formats.gguf.card import model_card
    if indexes:
        raise UsageError("an index file goes with sharded safetensors or .bin files, not with "
                         "split GGUF", file=indexes[0].name)
    numbered = []
    for p in parts:
        count, no = p.metadata.get("split.count"), p.metadata.get("split.no")
        if not (_is_int(count) and _is_int(no)):
            if len(parts) == 1:
                return p
            raise FormatError("this file is not part of a split GGUF model (it has no split.count "
                              "and split.no)", file=p.name, format="gguf")
        if count > MAX_SPLIT_COUNT:
            raise LimitError(f"split.count {exact_count(count)} is more parts than any split model has",
                             file=p.name, format="gguf", expected=f"at most {MAX_SPLIT_COUNT:,}",
                             found=count)
        if not 0 <= no < count:
            raise FormatError(f"split.no {exact_count(no)} is outside the {count:,} parts of the model",
                              file=p.name, format="gguf", expected=f"0..{count - 1:,}", found=no)
        numbered.append((no, count, p))
    counts = sorted({count for _, count, _ in numbered})
    if len(counts) > 1:
        raise FormatError("the files are parts of different split models: they disagree on "
                          "split.count", format="gguf",
                          found=", ".join(f"{p.name}: {c}" for _, c, p in numbered))
    count = counts[0]
    by_no: dict[int, Checkpoint] = {}
    for no, _, p in numbered:
        if no in by_no:
            raise UsageError(f"part {no + 1:,} of {count:,} was given twice",
                             format="gguf", found=f"{by_no[no].name} and {p.name}")
        by_no[no] = p
    ordered = [by_no[no] for no in sorted(by_no)]
    warnings: list[str] = []
    missing = _missing(count, set(by_no), lambda no: _part_name(ordered, no, count, "gguf"),
                       warnings)
    errors = list(warnings)
    tensors = _merge_tensors(ordered, "gguf")
    head = by_no.get(0, ordered[0])
    expected = head.metadata.get("split.tensors.count")
    if not missing and _is_int(expected) and expected != len(tensors):
        warnings.append(f"split.tensors.count says {counted(expected, 'tensor')} but the parts "
                        f"hold {exact_count(len(tensors))}")
    sources = [p.sources[0] for p in ordered]
    head_source = ordered.index(head)
    arrays = {key: dict(record, source=head_source)
              for key, record in head.extras.get("gguf_arrays", {}).items()}
    for p in ordered:
        # The note each part makes about being one of several is said by the set as a whole.
        note = gguf.split_note(p.extras["split"]) if "split" in p.extras else None
        warnings += [f"{p.name}: {w}" for w in p.warnings if w != note]
    size = sum(p.size for p in ordered)
    extras = {"gguf": head.extras["gguf"], "gguf_arrays": arrays,
              "model_card": model_card(head.metadata, tensors, size),
              "shards": _shards_report(ordered, [no for no in sorted(by_no)], count, missing,
                                       count - len(by_no), errors)}
    return Checkpoint("gguf", set_name([p.name for p in ordered]), size, tensors,
                      metadata=dict(head.metadata),
                      warnings=warnings, extras=extras, sources=sources)


# --- sharded safetensors ------------------------------------------------------------------------

def read_index(source: ByteSource) -> dict:
    error = ErrorFactory(source.name, "shard index")

    if source.size > MAX_INDEX_BYTES:
        raise error(LimitError, "the index file is too large", expected=f"at most {MAX_INDEX_BYTES:,} "
                    "bytes", found=source.size)
    try:
        index = json.loads(source.read(0, source.size).decode("utf-8"))
    except UnicodeDecodeError as e:
        raise error(FormatError, "the index is not valid UTF-8", offset=e.start) from e
    except (ValueError, RecursionError) as e:
        # JSONDecodeError is a ValueError; so is an integer of more than 4,300 digits, whose
        # message tells a Python programmer to raise a limit: say what is in the file instead.
        said = getattr(e, "msg", None) or ("it holds an integer of more than 4,300 digits"
                                           if "digits" in str(e) else str(e))
        raise error(FormatError, f"the index is not valid JSON: {said}",
                    offset=getattr(e, "pos", None)) from e
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise error(FormatError, "the index has no weight_map of tensor names to file names")
    metadata = index.get("metadata")
    # Tens of thousands of tensors name a few hundred files: each file name is cut once.
    bases = {v: _basename(v) for v in set(weight_map.values())}
    return {"weight_map": {k: bases[v] for k, v in weight_map.items()},
            "metadata": metadata if isinstance(metadata, dict) else {}}


def _merge_shards(parts: list[Checkpoint], indexes: list[ReadIndex]) -> Checkpoint:
    """Sharded safetensors or sharded torch files: the parts (all of one format) and their
    index, if given."""
    fmt = parts[0].format
    index = indexes[0].get() if indexes else None
    index_name = indexes[0].name if indexes else None
    warnings: list[str] = []
    names = {p.name: p for p in parts}
    if len(names) < len(parts):
        raise UsageError("the same shard was given twice", format=fmt,
                         found=", ".join(p.name for p in parts))
    if index is not None:
        expected = sorted(set(index["weight_map"].values()))
        count = len(expected)
        ordered = [names[n] for n in expected if n in names]
        given = {no for no, name in enumerate(expected) if name in names}
        missing = _missing(count, given, expected.__getitem__, warnings)
        errors = list(warnings)
        for p in parts:
            if p.name not in expected:
                warnings.append(f"{p.name} is not named by {index_name}; its tensors are shown "
                                "anyway")
                ordered.append(p)
        numbers = [expected.index(p.name) if p.name in expected else None for p in ordered]
    else:
        ordered, numbers, count, missing = _by_part_name(parts, warnings)
        errors = [w for w in warnings if not w.startswith("without an index")]
    tensors = _merge_tensors(ordered, fmt)
    if index is not None:
        absent = _check_weight_map(index, ordered, set(expected) - set(names), warnings)
        if absent:
            errors.append(_absent(absent))
    for p in ordered:
        warnings += [f"{p.name}: {w}" for w in p.warnings]
    size = sum(p.size for p in ordered)
    extras = {"shards": _shards_report(ordered, numbers, count, missing,
                                       count - sum(no is not None for no in numbers), errors)}
    if index is not None and missing:
        # which tensors the missing shards hold, so asking for one says where it is
        wanted = set(missing)
        extras["shards"]["missing_tensors"] = {
            name: shard for name, shard in index["weight_map"].items() if shard in wanted}
    if index is not None:
        extras["index"] = {"name": index_name, "metadata": index["metadata"]}
    if any("safety" in p.extras for p in ordered):
        extras["safety"] = _merge_safety(ordered)
    return Checkpoint(fmt, set_name([p.name for p in ordered]), size, tensors,
                      metadata=dict(ordered[0].metadata), warnings=warnings, extras=extras,
                      sources=[p.sources[0] for p in ordered])


def _merge_safety(parts: list[Checkpoint]) -> dict:
    """One safety report for every part's pickle (safety.merge_reports), each part by its name."""
    return merge_reports([(p.name, p.extras.get("safety") or {}) for p in parts])


def _by_part_name(parts: list[Checkpoint], warnings: list[str]):
    """Without an index, -NNNNN-of-NNNNN in the names says which shards make the set."""
    matches = [PART_NAME.match(p.name) for p in parts]
    if not all(matches):
        unnamed = [p.name for p, m in zip(parts, matches) if not m]
        warnings.append("without an index file and with names not like model-00001-of-00002."
                        f"{_EXT.get(parts[0].format, 'safetensors')} ({', '.join(unnamed)}), "
                        "missing shards cannot be detected")
        return parts, list(range(len(parts))), len(parts), []
    sets = {(m["stem"], int(m["count"])) for m in matches}
    if len(sets) > 1:
        raise FormatError("the files are shards of different checkpoints", format=parts[0].format,
                          found=", ".join(p.name for p in parts))
    stem, count = sets.pop()
    by_no: dict[int, Checkpoint] = {}
    for p, m in zip(parts, matches):
        by_no[int(m["no"]) - 1] = p
    ordered = [by_no[no] for no in sorted(by_no)]
    ext = matches[0]["ext"]
    missing = _missing(count, set(by_no), lambda no: f"{stem}-{no + 1:05d}-of-{count:05d}.{ext}",
                       warnings)
    return ordered, sorted(by_no), count, missing


_EXT = {"pytorch-zip": "bin", "pytorch-legacy": "bin"}


def _check_weight_map(index: dict, parts: list[Checkpoint], missing: set[str],
                      warnings: list[str]) -> list[str]:
    """The shards against their index; returns the tensors the index lists that no shard at
    hand holds (those of missing shards aside). Tens of thousands of names are compared as sets
    (at C speed); the names are walked one by one, for the warnings' order, only when they
    disagree."""
    absent: list[str] = []
    weight_map = index["weight_map"]
    found: dict[str, str] = {}
    for p in parts:   # a part's tensors all come from its one source
        found.update(dict.fromkeys(p.by_name, p.sources[0].name))
    if found.items() - weight_map.items():
        for name, shard in found.items():
            if name not in weight_map:
                warnings.append(f"tensor {name!r} in {shard} is not in the index")
            elif weight_map[name] != shard:
                warnings.append(f"tensor {name!r} is in {shard} but the index says {weight_map[name]}")
    if weight_map.keys() - found.keys():
        absent = [n for n, shard in weight_map.items() if n not in found and shard not in missing]
        if absent:
            warnings.append(_absent(absent))
    total = index["metadata"].get("total_size")
    if not missing and _is_int(total):
        held = sum(map(attrgetter("nbytes"), itertools.chain.from_iterable(p.tensors for p in parts)))
        if total != held:
            warnings.append(f"the index's total_size is {exact_count(total)} bytes but the tensors hold {held:,}")
    return absent


# --- shared ------------------------------------------------------------------------------------

def _merge_tensors(parts: list[Checkpoint], fmt: str) -> list[Tensor]:
    tensors = list(itertools.chain.from_iterable(p.tensors for p in parts))
    # Every name once (the usual case) is seen at C speed; only then are the names walked, to
    # name the tensor given twice and the parts that hold it.
    if len(set(map(attrgetter("name"), tensors))) < len(tensors):
        owner: dict[str, str] = {}
        for p in parts:
            for t in p.tensors:
                if t.name in owner:
                    raise FormatError(f"tensor {t.name!r} is in two parts", format=fmt,
                                      found=f"{owner[t.name]} and {p.name}")
                owner[t.name] = p.name
    return tensors


def _missing(count: int, given: set[int], name, warnings: list[str]) -> list[str]:
    """Names of the first MAX_LISTED parts (0-based numbers) not given, with a warning for each
    and one for the rest (appended to `warnings`: the set's errors are these sentences, see
    errors()). Walks only as far as it lists: a count is never iterated."""
    listed: list[str] = []
    no = 0
    while len(listed) < MAX_LISTED and no < count:
        if no not in given:
            listed.append(name(no))
            warnings.append(f"part {no + 1:,} of {count:,} ({listed[-1]}) is missing: its tensors "
                            "are not shown")
        no += 1
    rest = count - len(given) - len(listed)
    if rest > 0:
        warnings.append(f"{rest:,} more of the {count:,} parts are missing")
    return listed


def _shards_report(ordered, numbers, count, missing, missing_count, errors) -> dict:
    return {"count": count, "missing": missing, "missing_count": missing_count, "errors": errors,
            "parts": [{"no": None if no is None else no + 1, "name": p.name, "size": p.size,
                       "tensors": len(p.tensors)} for p, no in zip(ordered, numbers)]}


def _named_as_part(c: Checkpoint) -> bool:
    return PART_NAME.match(c.name) is not None


class Merger(NamedTuple):
    is_part: Callable[[Checkpoint], bool]   # whether a lone file says it is one of several
    merge: Callable[[list[Checkpoint], list[ReadIndex]], Checkpoint]


# Keyed by each reader's FORMAT (the GGUF reader's "gguf", named without importing it): the
# formats that can be split, and how.
MERGERS = {
    "gguf": Merger(lambda c: "split" in c.extras and c.extras["split"]["count"] > 1, _merge_gguf),
    safetensors.FORMAT: Merger(_named_as_part, _merge_shards),
    # the torch readers' FORMATs (named without importing them): transformers' .bin shards
    "pytorch-zip": Merger(_named_as_part, _merge_shards),
    "pytorch-legacy": Merger(_named_as_part, _merge_shards),
}


def errors(ckpt: Checkpoint) -> list[str]:
    """What makes a shard set incomplete (missing parts, tensors its index names that no part
    holds), as sentences: `health` reports them as errors, `inspect` first, `--strict` fails."""
    return list((ckpt.extras.get("shards") or {}).get("errors") or ())


def set_name(names: list[str]) -> str:
    """One name for the files of a set, as a shell would write it:
    model-{00001..00003}-of-00003.safetensors (parts 1 to 3), a-{00001,00003}-of-00003.gguf."""
    if len(names) == 1:
        return names[0]
    matches = [PART_NAME.match(n) for n in names]
    if all(matches) and len({(m["stem"], m["count"], m["ext"]) for m in matches}) == 1:
        numbers = sorted(int(m["no"]) for m in matches)
        if numbers == list(range(numbers[0], numbers[-1] + 1)):
            inner = f"{numbers[0]:05d}..{numbers[-1]:05d}"
        else:
            inner = ",".join(f"{n:05d}" for n in numbers)
        m = matches[0]
        return f"{m['stem']}-{{{inner}}}-of-{m['count']}.{m['ext']}"
    return f"{names[0]} and {len(names) - 1} more"



def _part_name(parts: list[Checkpoint], no: int, count: int, ext: str) -> str:
    """The file name part `no` (0-based) should have, from the names of the parts at hand."""
    for p in parts:
        m = PART_NAME.match(p.name)
        if m:
            return f"{m['stem']}-{no + 1:05d}-of-{count:05d}.{ext}"
    return f"split.no {no}"


def _basename(name: str) -> str:
    return name.replace("\\", "/").rsplit("/", 1)[-1]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
