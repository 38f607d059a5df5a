"""`org/model[@revision]` that is not in the local Hugging Face cache: its files on the Hub, read
by HTTP Range like any URL, found by name as the page's Hub shortcut finds them (hubfiles.py:
`model.safetensors.index.json` and the shards it names, else `model.safetensors`; `config.json`
beside them is then found as beside any URL).

huggingface_hub's own variables say where and whether: `HF_ENDPOINT` is the Hub's address (a
mirror, or a local server in the tests), and `HF_HUB_OFFLINE=1` forbids the network, so the
cache's answer (NotCached: exit 3, "cannot be read") stands. Nothing is downloaded: the first
request asks for the index (or the single file's header), and every later read is a range that a
view needs.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from ..errors import FetchError, TensorloupeError, UsageError
from .beside import read_bounded
from .hubcache import NotCached

ENDPOINT = "HF_ENDPOINT"
OFFLINE = "HF_HUB_OFFLINE"
MAX_INDEX_BYTES = 16 * 2**20    # as shards.read_index allows
NOT_FOUND = 404


class OnHub(NamedTuple):
    repo: str
    revision: str
    endpoint: str
    files: list[str]       # the URLs to open: the index, or the single file
    EXTRAS_KEY = "hub_remote"

    def said(self) -> str:
        return (f"{self.repo}@{self.revision} from the Hub ({self.endpoint}) by HTTP Range "
                "requests: it is not in the Hugging Face cache")

    def to_json(self) -> dict:
        return {"repo": self.repo, "revision": self.revision, "endpoint": self.endpoint,
                "files": self.files}


def offline(env) -> bool:
    return env.get(OFFLINE, "").strip().lower() in ("1", "true", "yes", "on")


def locate(name: str, missing: NotCached, env=None) -> OnHub:
    """The Hub's URLs for `name`, which the cache did not have (`missing` says so)."""
    from . import hubfiles   # urllib.parse: only for a model that is not cached
    env = os.environ if env is None else env
    if offline(env):
        raise NotCached(f"{missing.message}; {OFFLINE} is set, so the Hub is not asked")
    endpoint = (env.get(ENDPOINT) or hubfiles.HUB).rstrip("/")
    plan = hubfiles.plan(name, endpoint)
    if plan is None:     # is_hub_name matched it, so plan parses it too
        raise UsageError(f"{name!r} is not a Hub model name (org/model or org/model@revision)")
    found = OnHub(plan["repo"], plan["revision"], endpoint, [])
    try:
        if read_bounded(plan["index"], MAX_INDEX_BYTES) is not None:
            return found._replace(files=[plan["index"]])
        if _exists(plan["single"]):
            return found._replace(files=[plan["single"]])
    except TensorloupeError as e:     # no network, a refused range: both facts, in one line
        raise NotCached(f"{missing.message}; asking the Hub ({endpoint}) failed: {e}") from e
    raise NotCached(f"{missing.message}, and the Hub ({endpoint}) has neither "
                    f"{hubfiles.INDEX} nor {hubfiles.SINGLE} for {plan['repo']}@"
                    f"{plan['revision']}")


def _exists(url: str) -> bool:
    """Whether the Hub has the file at `url`: its first ranged request answers (the Hub sends a
    weight file's bytes from another host, by a redirect). Only a 404 means no; any other
    failure (no network, a refused range) is the error to show."""
    from ..source import open_source
    try:
        open_source(url, follow_redirects=True).close()
    except FetchError as e:
        if getattr(e, "status", None) == NOT_FOUND:
            return False
        raise
    return True
