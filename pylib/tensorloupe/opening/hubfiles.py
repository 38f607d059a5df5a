"""The Hugging Face Hub shortcut of the URL box: `org/model`, `org/model@revision`, or a Hub model
page, tree, blob or resolve URL, turned into the Hub's file URLs, `<hub>/<org>/<model>/resolve/
<revision>/<file>`, which answer Range requests (the files themselves, not HTML pages).

Without the Hub's API (another request to another service), the model's files are found by
name, the way transformers finds them: `model.safetensors.index.json` (whose weight_map names the
shards), else `model.safetensors`; `config.json` beside them gives moe its top-k. The worker
(web/worker.mjs) asks `plan` what to try, fetches, and asks `shard_urls` for an index's shards.
`hub` is the Hub's address: https://huggingface.co, or a mirror given as `?hub=` in the page's
address (the tests use a local server that imitates the Hub's URL layout).
"""

from __future__ import annotations

import json
from typing import NamedTuple
from urllib.parse import quote, unquote, urlsplit

from ..errors import FormatError, UsageError
from .detect import EXTENSIONS
from .hubcache import SHORTCUT   # org/model[@revision], as the CLI takes it

HUB = "https://huggingface.co"
HUB_HOSTS = ("huggingface.co", "www.huggingface.co", "hf.co")
# a name ending so is a file, not org/model: detect's one extension table (it had its own copy,
# which missed .distcp, .pkl and the container formats)
FILE_SUFFIXES = (*EXTENSIONS, ".json")
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
CONFIG = "config.json"
URL_KINDS = ("blob", "resolve", "tree")


class HubModel(NamedTuple):
    hub: str
    repo: str
    revision: str
    file: str | None          # a file the user pointed at, or None: find the model's files

    def url(self, name: str) -> str:
        return f"{self.hub}/{self.repo}/resolve/{quote(self.revision, safe='')}/{quote(name)}"


def parse(text: str, hub: str = HUB) -> HubModel | None:
    """The Hub model `text` names, or None when it is an ordinary URL (or path)."""
    text = text.strip()
    hub = hub.rstrip("/")
    m = SHORTCUT.match(text)
    if m and not text.lower().endswith(FILE_SUFFIXES):
        return HubModel(hub, m["repo"], m["rev"] or "main", None)
    parts = urlsplit(text)
    own = hub and text.startswith(hub + "/")
    if parts.scheme not in ("http", "https") or not (own or parts.hostname in HUB_HOSTS):
        return None
    base = hub if own else f"{parts.scheme}://{parts.netloc}"
    path = text[len(base):].split("?", 1)[0].split("#", 1)[0] if own else parts.path
    segments = [unquote(s) for s in path.strip("/").split("/") if s]
    if len(segments) < 2 or segments[0] in ("datasets", "spaces"):
        return None
    repo = "/".join(segments[:2])
    if len(segments) >= 4 and segments[2] in URL_KINDS:
        file = "/".join(segments[4:]) or None
        return HubModel(base, repo, segments[3], None if segments[2] == "tree" else file)
    if len(segments) == 2 and not segments[1].lower().endswith(FILE_SUFFIXES):
        return HubModel(base, repo, "main", None)
    return None


def plan(text: str, hub: str = HUB) -> dict | None:
    """What the worker fetches for `text`: {"repo", "revision", "index", "single", "config"} URLs
    (`single` is the file the user named, or model.safetensors), or None if it is no Hub model."""
    model = parse(text, hub)
    if model is None:
        return None
    named = model.file
    folder = named.rsplit("/", 1)[0] + "/" if named and "/" in named else ""
    if named and not named.endswith(".index.json"):
        index, single = None, model.url(named)
    else:
        index, single = model.url(named or INDEX), (None if named else model.url(SINGLE))
    return {"repo": model.repo, "revision": model.revision, "index": index, "single": single,
            "config": model.url(folder + CONFIG)}


def shard_urls(index_url: str, text: str) -> list[str]:
    """The shard URLs a fetched index names, beside it (relative to its URL)."""
    try:
        weight_map = json.loads(text).get("weight_map")
    except (ValueError, AttributeError) as e:
        raise FormatError("the index is not a JSON object with a weight_map",
                          file=index_url.rsplit("/", 1)[-1]) from e
    if not isinstance(weight_map, dict) or not weight_map:
        raise UsageError("the index names no shard files", file=index_url.rsplit("/", 1)[-1])
    base = index_url.rsplit("/", 1)[0]
    return [f"{base}/{quote(name)}" for name in sorted(set(map(str, weight_map.values())))]
