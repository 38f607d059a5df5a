"""`org/model[@revision]`: a model already in the local Hugging Face cache, opened without the
network.

The cache is huggingface_hub's (`huggingface_hub/constants.py`, `file_download.py`): the folder
`HF_HUB_CACHE`, else `HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
`~/.cache/huggingface/hub`. A model lives in `models--<org>--<model>/`: `refs/<revision>` holds the
commit hash a branch or tag points at, `snapshots/<commit>/` holds the model's files (symlinks into
`blobs/`, or copies where symlinks are not allowed). A revision that is a commit hash names its
snapshot directly.

Names and small ref files only: nothing here reads a checkpoint, and nothing asks the Hub (a
model that is not cached is read from the Hub by opening/hubremote.py, unless HF_HUB_OFFLINE).
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from ..errors import UnreadableError, UsageError
from .beside import small_text
from .detect import EXTENSIONS

# org/model[@revision]: Hub names are letters, digits, '-', '_' and '.' (the page's URL box
# takes the same, opening/hubfiles.py).
SHORTCUT = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<rev>[^\s@]+))?$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
DEFAULT_REVISION = "main"
MAX_REF_BYTES = 256        # a ref file holds one hash; anything longer is not one


class NotCached(UnreadableError):
    """The model, or that revision of it, is not in the cache (opening/hubremote.py may then read
    it from the Hub)."""


class Cached(NamedTuple):
    repo: str
    revision: str
    commit: str
    folder: str            # the snapshot: snapshots/<commit>
    EXTRAS_KEY = "hub_cache"   # where a checkpoint's extras say it (report.print_inspect)

    def said(self) -> str:
        return (f"{self.repo}@{self.revision} from the Hugging Face cache, commit "
                f"{self.commit[:12]}, {self.folder}")

    def to_json(self) -> dict:
        return {"repo": self.repo, "revision": self.revision, "commit": self.commit,
                "folder": self.folder}


def cache_dir(env=None) -> str:
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return os.path.expanduser(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return os.path.join(os.path.expanduser(env["HF_HOME"]), "hub")
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "huggingface", "hub")


def is_hub_name(item) -> bool:
    """Whether `item` is an `org/model[@rev]` name rather than a path: it matches the shortcut
    and no such file or folder exists (a local `org/model` folder stays a folder)."""
    return (isinstance(item, str) and SHORTCUT.match(item) is not None
            and not item.lower().endswith((*EXTENSIONS, ".json"))   # a missing file stays one
            and not os.path.exists(item))


def find(name: str, env=None) -> Cached:
    """The cached snapshot `name` (org/model[@rev]) names, or a UsageError saying where it
    looked and what it found there."""
    m = SHORTCUT.match(name)
    if m is None:
        raise UsageError(f"{name!r} is not a Hub model name (org/model or org/model@revision)")
    repo, revision = m["repo"], m["rev"] or DEFAULT_REVISION
    root = cache_dir(env)
    model = os.path.join(root, "models--" + repo.replace("/", "--"))
    if not os.path.isdir(model):
        # exit 3 as for a path that does not exist: it may well be a mistyped local folder
        raise NotCached(f"{repo} is not in the Hugging Face cache (looked for {model}; "
                        "the cache is HF_HUB_CACHE, else HF_HOME/hub, else "
                        "~/.cache/huggingface/hub) and is no file or folder here")
    commit = revision if COMMIT.match(revision) else _ref(model, revision)
    folder = os.path.join(model, "snapshots", commit or "")
    if commit is None or not os.path.isdir(folder):
        known = sorted(os.listdir(os.path.join(model, "refs"))) \
            if os.path.isdir(os.path.join(model, "refs")) else []
        raise NotCached(f"revision {revision!r} of {repo} is not in the Hugging Face cache "
                        f"(looked in {model}; cached refs: {', '.join(known) or 'none'})")
    return Cached(repo, revision, commit, folder)


def _ref(model: str, revision: str) -> str | None:
    path = os.path.join(model, "refs", *revision.split("/"))
    # a revision is a name inside refs/, never a way out of it (`@../../x`)
    if ".." in revision.split("/") or not os.path.isfile(path):
        return None
    commit = small_text(path, MAX_REF_BYTES, "ascii")
    return commit if commit is not None and COMMIT.match(commit) else None

