"""A diffusers folder given by URL (`.../model_index.json`, or the folder's URL ending in `/`):
its files found by name, since no web server lists a folder. The page (web/beside_urls.py, with
the worker's probes) and the CLI (targets.py, with `http_probe_all`) share this.

model_index.json is read whole (bounded); for each component it names (a plain folder name), its
`config.json` and its weights are probed: a safetensors index (then the shards it names) or the
single file, in diffusers' order of preference (COMPONENT_WEIGHTS). A component folder with a
config.json is a model (schedulers and tokenizers have their own *_config.json), so one with no
weights file is an error naming the files looked for; so is a shard its index names that is not
there. Every URL named here is in the user's URL's folder or a component folder under it, so on
the same origin (checked again before any is asked for). The files then open as URLs given
together do (shards.open_all, pipeline.py).

A probe is {"status": 206, ...} for a file that is there (the page's also say its first bytes),
anything else for one that is not; `open_url(url, probe)` gives a probed file's ByteSource.
"""

from __future__ import annotations

import re

from ..errors import FetchError, LimitError, UsageError
from ..source.remote import sibling_url, url_name
from .beside import CONFIG_NAME, MAX_CONFIG_BYTES, parse_object
from .pipeline import MAX_COMPONENTS, MODEL_INDEX

# a component's weights, best first: diffusers' save_pretrained names (and transformers' for
# text encoders); an index before its single file
COMPONENT_WEIGHTS = ("diffusion_pytorch_model.safetensors.index.json", "model.safetensors.index.json",
                     "diffusion_pytorch_model.safetensors", "model.safetensors")
COMPONENT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
FOUND = 206
NOT_FOUND = 404


def index_url(urls: list[str]) -> str | None:
    """The model_index.json URL when the user gave one URL of a diffusers folder (the folder's
    URL ending in `/`, or its model_index.json), else None."""
    if len(urls) != 1 or not isinstance(urls[0], str):
        return None
    url = urls[0].split("#", 1)[0].split("?", 1)[0]
    if url.endswith("/"):
        return url + MODEL_INDEX
    return urls[0] if url_name(url) == MODEL_INDEX else None


def files(index: str, probe_all, open_url, shard_urls,
          cannot_probe: str = "its files cannot be probed here") -> tuple[list[str], dict]:
    """The URLs of a diffusers folder's files (model_index.json first) and their probes.
    `probe_all(urls)` answers None where nothing can be probed (`cannot_probe` says why)."""
    probes = probe_all([index])
    if probes is None:
        raise UsageError(f"a diffusers folder opened by URL needs its files found: {cannot_probe}; "
                         "give every file's URL instead", file=MODEL_INDEX)
    if probes[index].get("status") != FOUND:
        raise UsageError(f"no {MODEL_INDEX} was found at {index}", file=MODEL_INDEX)
    declared = _json(open_url(index, probes[index]), MODEL_INDEX)
    components = [name for name, value in declared.items() if not name.startswith("_")
                  and isinstance(value, list) and value and value[0] is not None]
    if len(components) > MAX_COMPONENTS:
        raise LimitError(f"{MODEL_INDEX} names more than {MAX_COMPONENTS:,} components", file=MODEL_INDEX)
    bad = [c for c in components if not COMPONENT_NAME.fullmatch(c) or c in (".", "..")]
    if bad:
        raise UsageError(f"{MODEL_INDEX} names a component {bad[0][:80]!r} that is not a folder "
                         "name: no URL is made of it", file=MODEL_INDEX)
    wanted = [sibling_url(index, f"{c}/{name}") for c in components
              for name in (CONFIG_NAME, *COMPONENT_WEIGHTS)]
    found = probe_all(_same_origin(index, wanted))
    probes.update(found)
    urls = [index]
    for c in components:
        config = sibling_url(index, f"{c}/{CONFIG_NAME}")
        weights = [sibling_url(index, f"{c}/{name}") for name in COMPONENT_WEIGHTS]
        present = [u for u in weights if found[u].get("status") == FOUND]
        has_config = found[config].get("status") == FOUND
        if not present:
            if has_config:     # a model's folder (its config.json is there) without its weights
                raise UsageError(f"the component {c}/ has a {CONFIG_NAME} but none of its weights "
                                 f"files: {', '.join(f'{c}/{n}' for n in COMPONENT_WEIGHTS)} are not "
                                 f"beside {MODEL_INDEX}", file=f"{c}/{CONFIG_NAME}")
            continue
        if has_config:
            urls.append(config)
        best = present[0]
        if best.endswith(".index.json"):
            text = _bytes(open_url(best, found[best]), url_name(best)).decode("utf-8", "replace")
            shards = probe_all(_same_origin(index, shard_urls(best, text)))
            missing = [u for u, p in shards.items() if p.get("status") != FOUND]
            if missing:
                raise UsageError(f"{c}/{url_name(missing[0])}, which {c}/{url_name(best)} names, is "
                                 f"not there ({len(missing):,} of its {len(shards):,} shards are not)",
                                 file=f"{c}/{url_name(missing[0])}")
            probes.update(shards)
            urls += [best, *shards]
        else:
            urls.append(best)
    return urls, probes


def http_probe_all(urls: list[str]) -> dict:
    """The CLI's probes (CPython): each URL's first ranged request (HttpSource), its source kept
    in the probe for `http_open`; a 404 is a file that is not there, any other failure (no
    network, a refused range) is raised."""
    from ..source.remote import HttpSource
    out = {}
    for url in urls:
        try:
            source = HttpSource(url)
        except FetchError as e:
            if getattr(e, "status", None) != NOT_FOUND:
                raise
            out[url] = {"status": NOT_FOUND}
            continue
        out[url] = {"status": FOUND, "total": source.size, "source": source}
    return out


def http_open(url: str, probe: dict):
    return probe["source"]


def _same_origin(base: str, urls: list[str]) -> list[str]:
    """The URLs, once each is checked to be on `base`'s origin, before any is asked for (a
    model_index.json or an index is data: it never sends a request to another server)."""
    from urllib.parse import urlsplit
    origin = urlsplit(base)[:2]
    for url in urls:
        if urlsplit(url)[:2] != origin:
            raise UsageError(f"{url} is not on the server of {base}: it is not fetched")
    return urls


def _bytes(source, name: str) -> bytes:
    """A small file's bytes, whole (a config, an index: bounded like every file beside a model)."""
    if source.size > MAX_CONFIG_BYTES:
        raise LimitError(f"{name} is too large", file=name, expected=f"at most {MAX_CONFIG_BYTES:,} bytes",
                         found=source.size)
    return source.read(0, source.size)


def _json(source, name: str) -> dict:
    return parse_object(_bytes(source, name), name)
