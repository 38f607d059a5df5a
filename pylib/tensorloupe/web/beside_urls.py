"""Files beside a URL the user gave, found and probed for the page: a PEFT adapter's
adapter_config.json, and a diffusers folder's files (the page cannot list a server's folder).

  adapter   `.../adapter_model.safetensors` -> `.../adapter_config.json` (the same folder URL:
            the rule of every file read beside a model, opening/beside.py)
  diffusers `.../model_index.json`, or the folder's URL ending in `/`: model_index.json read
            whole; for each component it names (a plain folder name), its `config.json` and
            its weights: a safetensors index (then the shards it names) or the single file, in
            diffusers' order of preference (COMPONENT_WEIGHTS)

Every URL named here is in the user's URL's folder or a component folder under it, so on the
same origin (checked again before any is asked for). The worker probes them as it probes the
user's URLs (`tensorloupeProbeAll` in web/urls.mjs: the first 64 KiB by Range, a .json whole),
awaited here in one suspension (JSPI); without JSPI nothing can be awaited mid-open, and that is
said instead. Then the files open as URLs given together do (shards.open_all, opening/pipeline.py).
"""

from __future__ import annotations

import re

from ..adapters.pairs import NEEDS_CONFIG, layout_of
from ..errors import LimitError, UsageError
from ..opening.beside import ADAPTER_CONFIG_NAME, CONFIG_NAME, MAX_CONFIG_BYTES, parse_object
from ..opening.pipeline import MAX_COMPONENTS, MODEL_INDEX
from ..source.remote import sibling_url, url_name

ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
# a component's weights, best first: diffusers' save_pretrained names (and transformers' for
# text encoders); an index before its single file
COMPONENT_WEIGHTS = ("diffusion_pytorch_model.safetensors.index.json", "model.safetensors.index.json",
                     "diffusion_pytorch_model.safetensors", "model.safetensors")
COMPONENT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
NO_JSPI = "this browser cannot wait for files fetched while a model opens (no JSPI)"


def pipeline_index(urls: list[str]) -> str | None:
    """The model_index.json URL when the user gave one URL of a diffusers folder, else None."""
    if len(urls) != 1:
        return None
    url = urls[0].split("#", 1)[0].split("?", 1)[0]
    if url.endswith("/"):
        return url + MODEL_INDEX
    return urls[0] if url_name(url) == MODEL_INDEX else None


def adapter_config_url(urls: list[str], names) -> str | None:
    """adapter_config.json beside the one adapter URL whose tensor `names` need it."""
    if len(urls) != 1 or url_name(urls[0]) not in ADAPTER_WEIGHTS or layout_of(names) not in NEEDS_CONFIG:
        return None
    return sibling_url(urls[0], ADAPTER_CONFIG_NAME)


def read_adapter_config(url: str, probe_all, open_url) -> tuple[dict | None, str | None]:
    """(the adapter_config.json object, None) or (None, why it is not used)."""
    probes = probe_all([url])
    if probes is None:
        return None, f"{ADAPTER_CONFIG_NAME} beside the URL was not fetched: {NO_JSPI}"
    probe = probes[url]
    if probe.get("status") != 206:
        return None, None         # not there: the adapter says its factors are shown as stored
    return _json(open_url(url, probe), ADAPTER_CONFIG_NAME), None


def pipeline_files(index_url: str, probe_all, open_url, shard_urls) -> tuple[list[str], dict]:
    """The URLs of a diffusers folder's files (model_index.json first) and their probes."""
    probes = probe_all([index_url])
    if probes is None:
        raise UsageError(f"a diffusers folder opened by URL needs its files found: {NO_JSPI}; "
                         "give every file's URL instead", file=MODEL_INDEX)
    if probes[index_url].get("status") != 206:
        raise UsageError(f"no {MODEL_INDEX} was found at {index_url}", file=MODEL_INDEX)
    index = _json(open_url(index_url, probes[index_url]), MODEL_INDEX)
    components = [name for name, value in index.items() if not name.startswith("_")
                  and isinstance(value, list) and value and value[0] is not None]
    if len(components) > MAX_COMPONENTS:
        raise LimitError(f"{MODEL_INDEX} names more than {MAX_COMPONENTS} components", file=MODEL_INDEX)
    bad = [c for c in components if not COMPONENT_NAME.fullmatch(c) or c in (".", "..")]
    if bad:
        raise UsageError(f"{MODEL_INDEX} names a component {bad[0][:80]!r} that is not a folder "
                         "name: no URL is made of it", file=MODEL_INDEX)
    wanted = [sibling_url(index_url, f"{c}/{name}") for c in components
              for name in (CONFIG_NAME, *COMPONENT_WEIGHTS)]
    found = _same_origin(index_url, probe_all(wanted))
    probes.update(found)
    urls = [index_url]
    for c in components:
        config = sibling_url(index_url, f"{c}/{CONFIG_NAME}")
        weights = [sibling_url(index_url, f"{c}/{name}") for name in COMPONENT_WEIGHTS]
        present = [u for u in weights if found[u].get("status") == 206]
        if not present:
            continue
        if found[config].get("status") == 206:
            urls.append(config)
        best = present[0]
        if best.endswith(".index.json"):
            text = _bytes(open_url(best, found[best]), url_name(best)).decode("utf-8", "replace")
            shards = _same_origin(index_url, probe_all(shard_urls(best, text)))
            probes.update(shards)
            urls += [best, *shards]
        else:
            urls.append(best)
    return urls, probes


def _same_origin(base: str, probes: dict) -> dict:
    """The probes, once every URL is checked to be on `base`'s origin (never another server)."""
    from urllib.parse import urlsplit
    origin = urlsplit(base)[:2]
    for url in probes:
        if urlsplit(url)[:2] != origin:
            raise UsageError(f"{url} is not on the server of {base}: it is not fetched")
    return probes


def _bytes(source, name: str) -> bytes:
    """A small file's bytes, whole (a config, an index: bounded like every file beside a model)."""
    if source.size > MAX_CONFIG_BYTES:
        raise LimitError(f"{name} is too large", file=name, expected=f"at most {MAX_CONFIG_BYTES} bytes",
                         found=source.size)
    return source.read(0, source.size)


def _json(source, name: str) -> dict:
    return parse_object(_bytes(source, name), name)


def probe_all(urls: list[str]) -> dict | None:
    """{url: its probe} for these URLs, probed by the worker at once and awaited in one
    suspension; None where this call stack cannot suspend (no JSPI) or outside the browser."""
    try:
        from pyodide.ffi import can_run_sync, run_sync, to_js
    except ImportError:       # CPython
        return None
    if not can_run_sync():
        return None
    import js
    answers = run_sync(js.tensorloupeProbeAll(to_js(list(urls))))
    return {url: answer.to_py() for url, answer in zip(urls, answers)}


def forget(urls) -> None:
    """Drop the first bytes the worker kept for probed URLs that were not opened."""
    try:
        import js
        from pyodide.ffi import to_js
    except ImportError:
        return
    js.tensorloupeForget(to_js(list(urls)))

