"""Files beside a URL the user gave, found and probed for the page: a PEFT adapter's
adapter_config.json, and a diffusers folder's files (the page cannot list a server's folder).

  adapter   `.../adapter_model.safetensors` -> `.../adapter_config.json` (the same folder URL:
            the rule of every file read beside a model, opening/beside.py)
  diffusers `.../model_index.json`, or the folder's URL ending in `/`: the files
            opening/pipeline_urls.py finds (the CLI's rule too), probed by the worker

Every URL named here is in the user's URL's folder or a component folder under it, so on the
same origin (checked again before any is asked for). The worker probes them as it probes the
user's URLs (`tensorloupeProbeAll` in web/urls.mjs: the first 64 KiB by Range, a .json whole),
awaited here in one suspension (JSPI); without JSPI nothing can be awaited mid-open, and that is
said instead. Then the files open as URLs given together do (shards.open_all, opening/pipeline.py).
"""

from __future__ import annotations

from ..adapters.pairs import NEEDS_CONFIG, layout_of
from ..opening import pipeline_urls
from ..opening.beside import ADAPTER_CONFIG_NAME
from ..opening.pipeline import MAX_COMPONENTS, MODEL_INDEX   # noqa: F401  (the page's limits, named here)
from ..opening.pipeline_urls import COMPONENT_NAME, COMPONENT_WEIGHTS   # noqa: F401
from ..source.remote import sibling_url, url_name

ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
NO_JSPI = "this browser cannot wait for files fetched while a model opens (no JSPI)"


def pipeline_index(urls: list[str]) -> str | None:
    """The model_index.json URL when the user gave one URL of a diffusers folder, else None."""
    return pipeline_urls.index_url(urls)


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
    """The URLs of a diffusers folder's files (model_index.json first) and their probes
    (opening/pipeline_urls.py, the CLI's rule too; without JSPI that is said)."""
    return pipeline_urls.files(index_url, probe_all, open_url, shard_urls, cannot_probe=NO_JSPI)


def _json(source, name: str) -> dict:
    return pipeline_urls._json(source, name)


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

