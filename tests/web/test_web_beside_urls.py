"""web/beside_urls.py in CPython: which URLs beside a given one the page asks for (an adapter's
adapter_config.json, a diffusers folder's files from its model_index.json), with the worker's
probes and reads replaced by a dictionary of files; what a hostile model_index.json cannot make
it ask for."""

import json

import pytest

from tensorloupe.errors import LimitError, UsageError
from tensorloupe.source.base import MemorySource
from tensorloupe.web import beside_urls

BASE = "http://127.0.0.1:9/pipes/sd/"


class Server:
    """Files by URL; `asked` is every URL probed, in order."""

    def __init__(self, files: dict):
        self.files, self.asked = files, []

    def probe_all(self, urls):
        self.asked += urls
        return {u: ({"status": 206, "total": len(self.files[u])} if u in self.files else {"status": 404})
                for u in urls}

    def open_url(self, url, probe):
        return MemorySource(self.files[url], url.rsplit("/", 1)[-1])


def shard_urls(index_url, text):
    base = index_url.rsplit("/", 1)[0]
    return [f"{base}/{name}" for name in sorted(set(json.loads(text)["weight_map"].values()))]


def index(**components) -> bytes:
    return json.dumps({"_class_name": "StableDiffusionPipeline", **components}).encode()


def test_the_index_url_of_what_the_user_gave():
    assert beside_urls.pipeline_index([BASE]) == BASE + "model_index.json"
    assert beside_urls.pipeline_index([BASE + "model_index.json"]) == BASE + "model_index.json"
    assert beside_urls.pipeline_index([BASE + "unet/model.safetensors"]) is None
    assert beside_urls.pipeline_index([BASE, BASE + "x"]) is None


def test_an_adapter_url_names_its_config_beside_it():
    names = ["base_model.model.x.lora_A.weight", "base_model.model.x.lora_B.weight"]
    url = "http://h/a/adapter_model.safetensors?download=1"
    assert beside_urls.adapter_config_url([url], names) == "http://h/a/adapter_config.json"
    assert beside_urls.adapter_config_url(["http://h/a/model.safetensors"], names) is None
    assert beside_urls.adapter_config_url([url], ["lora_unet_x.lora_down.weight"]) is None   # kohya: none


def test_components_single_files_and_shards_are_found():
    files = {
        BASE + "model_index.json": index(unet=["diffusers", "UNet2DConditionModel"],
                                         vae=["diffusers", "AutoencoderKL"],
                                         scheduler=["diffusers", "PNDMScheduler"],
                                         safety_checker=[None, None]),
        BASE + "unet/config.json": b"{}",
        BASE + "unet/diffusion_pytorch_model.safetensors.index.json":
            json.dumps({"weight_map": {"a": "s-1.safetensors", "b": "s-2.safetensors"}}).encode(),
        BASE + "unet/diffusion_pytorch_model.safetensors": b"unused: the index comes first",
        BASE + "unet/s-1.safetensors": b"1", BASE + "unet/s-2.safetensors": b"2",
        BASE + "vae/diffusion_pytorch_model.safetensors": b"v",
    }
    server = Server(files)
    urls, probes = beside_urls.pipeline_files(BASE + "model_index.json", server.probe_all,
                                              server.open_url, shard_urls)
    assert urls == [BASE + "model_index.json", BASE + "unet/config.json",
                    BASE + "unet/diffusion_pytorch_model.safetensors.index.json",
                    BASE + "unet/s-1.safetensors", BASE + "unet/s-2.safetensors",
                    BASE + "vae/diffusion_pytorch_model.safetensors"]
    assert all(probes[u]["status"] == 206 for u in urls)
    assert not [u for u in server.asked if "safety_checker" in u]       # [null, null]: nothing asked
    assert all(u.startswith(BASE) for u in server.asked)


@pytest.mark.parametrize("name", ["../elsewhere", "a/b", "http://evil.example", "?x", ".."])
def test_a_component_that_is_not_a_folder_name_makes_no_url(name):
    # model_index.json is data: its keys become URL paths only if they are plain folder names
    server = Server({BASE + "model_index.json": index(**{name: ["diffusers", "UNet2DConditionModel"]})})
    with pytest.raises(UsageError, match="is not a folder name: no URL is made of it"):
        beside_urls.pipeline_files(BASE + "model_index.json", server.probe_all, server.open_url, shard_urls)
    assert server.asked == [BASE + "model_index.json"]


def test_shards_on_another_server_are_not_fetched():
    files = {BASE + "model_index.json": index(unet=["diffusers", "UNet2DConditionModel"]),
             BASE + "unet/model.safetensors.index.json": b"{}"}
    server = Server(files)

    def elsewhere(index_url, text):
        return ["http://evil.example/s.safetensors"]
    with pytest.raises(UsageError, match="is not on the server of"):
        beside_urls.pipeline_files(BASE + "model_index.json", server.probe_all, server.open_url, elsewhere)


def test_too_many_components_are_refused_before_any_is_asked():
    many = {f"c{i}": ["diffusers", "X"] for i in range(beside_urls.MAX_COMPONENTS + 1)}
    server = Server({BASE + "model_index.json": index(**many)})
    with pytest.raises(LimitError, match="more than"):
        beside_urls.pipeline_files(BASE + "model_index.json", server.probe_all, server.open_url, shard_urls)
    assert len(server.asked) == 1


def test_without_jspi_it_is_said():
    with pytest.raises(UsageError, match="no JSPI"):
        beside_urls.pipeline_files(BASE + "model_index.json", lambda urls: None, None, shard_urls)
    config, why = beside_urls.read_adapter_config("http://h/adapter_config.json", lambda urls: None, None)
    assert config is None and "no JSPI" in why


def test_a_missing_adapter_config_is_no_warning_of_its_own():
    server = Server({})
    assert beside_urls.read_adapter_config("http://h/adapter_config.json", server.probe_all,
                                           server.open_url) == (None, None)
