"""A diffusers folder by URL in the CLI (issue 26): `inspect https://host/path/model_index.json`
and the folder URL `https://host/path/` open the folder as one model with its components, as the
local folder opens (opening/pipeline_urls.py, the page's rule too), reading only headers and
the JSON files by Range; a PEFT adapter's URL finds its adapter_config.json beside it. A local
server started here (build.py's Range server) records every request.

Fixtures: fixtures/diffusers_files.py (a tiny StableDiffusionPipeline's save_pretrained, and an
fp16 unet variant beside it), fixtures/adapter_files.py (peft's save_pretrained)."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

import build
import diffusers_files

from tensorloupe.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "out"
SD = FIXTURES / "diffusers" / "tiny-sd"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(base URL, request log, served folder): tiny-sd/ and a copy of it to break, adapters/."""
    if not (SD / "model_index.json").exists():
        diffusers_files.write_all(FIXTURES)
    root = tmp_path_factory.mktemp("site")
    shutil.copytree(SD, root / "tiny-sd")
    shutil.copytree(SD, root / "broken")
    (root / "broken" / "vae" / "diffusion_pytorch_model.safetensors").unlink()
    shutil.copytree(FIXTURES / "adapters" / "lora", root / "lora")
    log: list = []

    class Logged(build.Handler):
        def send_head(self):
            log.append((self.command, self.path, self.headers.get("Range")))
            return super().send_head()
    server = build.Server(("127.0.0.1", 0), lambda *a, **k: Logged(*a, directory=str(root), **k))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", log, root
    server.shutdown()


def inspect_json(capsys, target) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["inspect", str(target), "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def comparable(doc: dict) -> dict:
    """What a folder and its URL must agree on: the components, every tensor, the counts."""
    pipeline = doc["extras"]["pipeline"]
    return {"format": doc["format"], "parameters": doc.get("parameters"),
            "components": pipeline["components"], "class": pipeline["class"],
            "tensors": [{k: t[k] for k in ("name", "dtype", "shape") if k in t} for t in doc["tensors"]],
            "counts": {k: doc[k] for k in ("tensor_count", "parameter_count") if k in doc}}


@pytest.mark.parametrize("suffix", ["tiny-sd/model_index.json", "tiny-sd/"])
def test_a_diffusers_url_opens_as_its_local_folder(site, capsys, suffix):
    base, log, root = site
    code, local = inspect_json(capsys, root / "tiny-sd")
    assert code == 0 and local["format"] == "diffusers"
    del log[:]
    code, remote = inspect_json(capsys, f"{base}/{suffix}")
    assert code == 0
    assert comparable(remote) == comparable(local)
    assert {c["name"] for c in remote["extras"]["pipeline"]["components"] if c.get("tensors")} == \
        {"unet", "vae", "text_encoder"}
    # every request a Range GET of a file's first 64 KiB, each file asked once (the probe that
    # found it is the read its header comes from): the unet's 228 KB are never all asked for
    assert log and all(cmd == "GET" and rng == "bytes=0-65535" for cmd, _, rng in log)
    asked = [path for _, path, _ in log]
    assert len(asked) == len(set(asked))
    served = {p for p in asked if (root / p.lstrip("/")).is_file()}
    assert served == {f"/tiny-sd/{n}" for n in (
        "model_index.json", "unet/config.json", "unet/diffusion_pytorch_model.safetensors",
        "vae/config.json", "vae/diffusion_pytorch_model.safetensors", "text_encoder/config.json",
        "text_encoder/model.safetensors")}
    assert (root / "tiny-sd/unet/diffusion_pytorch_model.safetensors").stat().st_size > 3 * 65536
    assert not [p for p in asked if ".fp16." in p]               # the variant is never asked for


def test_a_missing_component_file_is_a_clear_error(site, capsys):
    base, log, _ = site
    capsys.readouterr()
    code = main(["inspect", f"{base}/broken/"])
    err = capsys.readouterr().err
    assert code != 0
    assert "vae/" in err and "diffusion_pytorch_model.safetensors" in err and "config.json" in err


def test_a_peft_adapter_url_reads_its_config_beside_it(site, capsys):
    base, log, root = site
    code, local = inspect_json(capsys, root / "lora" / "adapter_model.safetensors")
    del log[:]
    code, remote = inspect_json(capsys, f"{base}/lora/adapter_model.safetensors")
    assert code == 0 and remote["extras"]["adapter"]["scales"] == local["extras"]["adapter"]["scales"]
    assert remote["extras"]["adapter"]["source"] == "adapter_config.json" and remote["extras"]["adapter"]["delta"] > 0
    assert ("GET", "/lora/adapter_config.json") in {(c, p) for c, p, _ in log}
