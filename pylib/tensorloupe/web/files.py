"""What the user gave the page, as checkpoints: dropped or picked files, a dropped folder, URLs.

Files that are parts of one checkpoint become one entry that opens them together
(`tensorloupe.open([...])`, opening/shards.py), grouped by opening/grouping.py's rule (the CLI's
folder targets use the same): split GGUF `<stem>-00001-of-00003.gguf`, sharded safetensors
`<stem>-00001-of-00003.safetensors` with their `<stem>.safetensors.index.json` if it is there, sharded
torch `pytorch_model-00001-of-00003.bin` with `pytorch_model.bin.index.json`. A `config.json` beside a model (same folder) is not an entry of its own: it goes with
every entry of that folder, for the top-k of moe.detect and the architecture; nor are
`tokenizer.json` and `tokenizer_config.json` (the Tokens tab reads them beside the model). Every other file is an entry by itself,
as it always was, so unrelated files dropped together are a list to pick from; inside a dropped
folder, only files that can be checkpoints are listed (not tokenizer.json, README.md, ...).

Pure Python, on names only (the same rules for mounted paths and for URLs), tested in CPython.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import UsageError
from ..opening.beside import CONFIG_NAME, MAX_CONFIG_BYTES, parse_object, read_bounded
from ..opening.grouping import ALONGSIDE, METADATA_NAME, group as checkpoints, kind_of
from ..source import is_url
from ..source.remote import url_name


class Given(NamedTuple):
    """One file as the page gave it: `rel` its path in the drop (folder/name) or its URL, `path`
    what Python opens (the WORKERFS path, or the URL), `folder` whether it came from a folder."""
    rel: str
    path: str
    size: int | None
    folder: bool

    @property
    def name(self) -> str:
        return url_name(self.rel) if is_url(self.rel) else self.rel.rsplit("/", 1)[-1]

    @property
    def directory(self) -> str:
        return self.rel.split("#", 1)[0].split("?", 1)[0].rsplit("/", 1)[0] if "/" in self.rel else ""


def given(files: list[dict]) -> list[Given]:
    try:
        return [Given(str(f["rel"]), str(f["path"]), f.get("size"), bool(f.get("folder")))
                for f in files]
    except (KeyError, TypeError) as e:
        raise UsageError(f"a file entry lacks {e}") from e


def group(files: list[Given]) -> list[dict]:
    """The entries the page lists, in the order their first file was given: {"kind": "set"
    (several files, one checkpoint) or "file", "name", "paths" (what to open, together), "files"
    (their names), "size" (None if unknown: URLs), "config" (the config.json's path, or None)}.
    Grouped by opening/grouping.py, the rule the CLI's folder targets use too."""
    configs = {f.directory: f for f in files if f.name == CONFIG_NAME}
    found = checkpoints(files, name=lambda f: f.name, directory=lambda f: f.directory,
                        listed=lambda f: not f.folder)
    entries = [(g.first, "set" if len(g.members) > 1 else "file", g.name, g.members) for g in found
               if not any(f.folder and not _visible_in_folder(f.rel) for f in g.members)]
    with_model = {members[0].directory for *_, members in entries}
    # A config.json or tokenizer file with no model beside it is listed (and refused when opened).
    position = {id(f): i for i, f in enumerate(files)}
    entries += [(position[id(f)], "file", f.name, [f]) for f in files
                if kind_of(f.name) == ALONGSIDE and f.directory not in with_model and not f.folder
                and (f.name != CONFIG_NAME or configs[f.directory] is f)]
    entries.sort(key=lambda entry: entry[0])
    return [_entry(kind, name, members, configs.get(members[0].directory))
            for _, kind, name, members in entries]


def _entry(kind: str, name: str, members: list[Given], config: Given | None) -> dict:
    sizes = [f.size for f in members]
    if config in members:
        config = None
    return {"kind": kind, "name": name, "paths": [f.path for f in members],
            "files": [f.name for f in members],
            "size": sum(sizes) if all(isinstance(s, int) for s in sizes) else None,
            "config": config.path if config else None}


def _visible_in_folder(rel: str) -> bool:
    """Inside a dropped folder: not hidden nor in a hidden folder (.git, .cache) under it (the
    dropped folder's own name, parts[0], may be anything)."""
    parts = [p for p in rel.split("/") if p]
    if len(parts) > 1 and parts[-1] == METADATA_NAME:   # DCP's .metadata is no hidden file
        parts = parts[:-1] + ["metadata"]
    return len(parts) > 1 and not any(p.startswith(".") for p in parts[1:])


def load_config(path: str) -> dict:
    """A config.json on the (mounted) file system, as a dict."""
    name = path.rsplit("/", 1)[-1]
    data = read_bounded(path, MAX_CONFIG_BYTES)   # size-capped like every file read beside a model
    if data is None:
        raise UsageError("cannot read the file: No such file or directory", file=name)
    return parse_config(data, name)


def parse_config(data: bytes, name: str = CONFIG_NAME) -> dict:
    """A Hugging Face config.json: a JSON object (anything else is a FormatError)."""
    return parse_object(data, name, "config.json")
