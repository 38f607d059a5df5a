"""opening/pipeline_urls.py, the rule the CLI and the page share for a diffusers folder given by
URL, with probes and reads replaced by a dictionary of files: a component's config.json without
its weights, and a shard its index names that is not there, are errors naming the file; a URL
on another server is refused before it is asked for. (Stdlib only: it runs in Pyodide too.)"""

import json

import pytest

from tensorloupe.errors import UsageError
from tensorloupe.opening import pipeline_urls
from tensorloupe.source.base import MemorySource

BASE = "http://127.0.0.1:9/pipes/sd/"
INDEX = BASE + "model_index.json"


class Server:
    def __init__(self, files: dict):
        self.files, self.asked = files, []

    def probe_all(self, urls):
        self.asked += urls
        return {u: ({"status": 206} if u in self.files else {"status": 404}) for u in urls}

    def open_url(self, url, probe):
        return MemorySource(self.files[url], url.rsplit("/", 1)[-1])


def shard_urls(index_url, text):
    base = index_url.rsplit("/", 1)[0]
    return [f"{base}/{name}" for name in sorted(set(json.loads(text)["weight_map"].values()))]


def model_index(**components) -> bytes:
    return json.dumps({"_class_name": "StableDiffusionPipeline", **components}).encode()


def test_a_model_component_without_its_weights_is_named():
    server = Server({INDEX: model_index(unet=["diffusers", "UNet2DConditionModel"],
                                        scheduler=["diffusers", "PNDMScheduler"]),
                     BASE + "unet/config.json": b"{}"})
    with pytest.raises(UsageError) as e:
        pipeline_urls.files(INDEX, server.probe_all, server.open_url, shard_urls)
    assert e.value.file == "unet/config.json"
    assert "unet/diffusion_pytorch_model.safetensors" in str(e.value) and "unet/model.safetensors" in str(e.value)


def test_a_component_of_no_config_and_no_weights_is_not_a_model():
    server = Server({INDEX: model_index(unet=["diffusers", "UNet2DConditionModel"],
                                        scheduler=["diffusers", "PNDMScheduler"]),
                     BASE + "unet/diffusion_pytorch_model.safetensors": b"u"})
    urls, _ = pipeline_urls.files(INDEX, server.probe_all, server.open_url, shard_urls)
    assert urls == [INDEX, BASE + "unet/diffusion_pytorch_model.safetensors"]


def test_a_missing_shard_is_named():
    server = Server({INDEX: model_index(unet=["diffusers", "UNet2DConditionModel"]),
                     BASE + "unet/diffusion_pytorch_model.safetensors.index.json":
                         json.dumps({"weight_map": {"a": "s-1.safetensors", "b": "s-2.safetensors"}}).encode(),
                     BASE + "unet/s-1.safetensors": b"1"})
    with pytest.raises(UsageError, match="unet/s-2.safetensors, which unet/diffusion_pytorch_model"
                                         r".safetensors.index.json names, is not there \(1 of its 2"):
        pipeline_urls.files(INDEX, server.probe_all, server.open_url, shard_urls)


def test_a_shard_on_another_server_is_never_asked_for():
    server = Server({INDEX: model_index(unet=["diffusers", "UNet2DConditionModel"]),
                     BASE + "unet/model.safetensors.index.json": b"{}"})
    with pytest.raises(UsageError, match="is not on the server of"):
        pipeline_urls.files(INDEX, server.probe_all, server.open_url,
                            lambda index_url, text: ["http://evil.example/s.safetensors"])
    assert all(u.startswith(BASE) for u in server.asked)


def test_the_index_url_of_a_folder_or_its_model_index():
    assert pipeline_urls.index_url([BASE]) == INDEX
    assert pipeline_urls.index_url([INDEX + "?download=1"]) == INDEX + "?download=1"
    assert pipeline_urls.index_url([BASE + "unet/model.safetensors"]) is None
    assert pipeline_urls.index_url([BASE, INDEX]) is None
