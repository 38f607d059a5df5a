"""build.py: what goes into dist/, relative URLs only, the server's MIME types and Range support."""

from __future__ import annotations

import http.client
import json
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP_FILES = ("app.js", "axes.js", "busy.js", "canvas.js", "compute.mjs", "dom.js", "experts.js", "format.js", "heatmap.js",
             "histogram.js", "index.html", "input.js", "layer.js", "manifest.webmanifest", "model.js",
             "moecharts.js", "moegrid.js", "offline.js", "outline.js", "pair.js", "panels.js", "reads.mjs", "runtime.mjs", "slicer.js",
             "style.css",
             "summary.js", "sw.js", "tensor.js", "tree.js", "urls.mjs", "worker-client.js", "worker.mjs")


def get(url: str, headers: dict | None = None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.headers, response.read()


def test_dist_holds_the_app_the_runtime_and_the_wheel(dist):
    build = json.loads((dist / "build.json").read_text())
    on_disk = sorted(p.relative_to(dist).as_posix() for p in dist.rglob("*") if p.is_file())
    assert on_disk == sorted(build["files"])
    for name in APP_FILES + ("pyodide/pyodide.mjs", "pyodide/pyodide.asm.mjs", "pyodide/pyodide.asm.wasm",
                             "pyodide/python_stdlib.zip", "pyodide/pyodide-lock.json", "icons/icon-192.png",
                             "icons/icon-512.png", build["wheel"]):
        assert (dist / name).is_file(), name
    assert build["pyodide"] == json.loads((ROOT / "package.json").read_text())["dependencies"]["pyodide"]
    assert not [n for n in on_disk if n.endswith(".map") or n.startswith("node_modules")]


def test_the_wheel_holds_the_whole_package(dist):
    build = json.loads((dist / "build.json").read_text())
    with zipfile.ZipFile(dist / build["wheel"]) as wheel:
        names = set(wheel.namelist())
    sources = {p.relative_to(ROOT / "pylib").as_posix() for p in (ROOT / "pylib" / "tensorloupe").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert sources <= names
    assert {"tensorloupe/web/handlers.py", "tensorloupe/colormap.py", "tensorloupe/synthetic.py"} <= names
    assert any(n.endswith(".dist-info/RECORD") for n in names)


def test_templates_are_filled_and_the_precache_lists_every_file(dist):
    build = json.loads((dist / "build.json").read_text())
    for name in ("sw.js", "worker.mjs"):
        assert "__TENSORLOUPE_" not in (dist / name).read_text()
    sw = (dist / "sw.js").read_text()
    precache = json.loads(re.search(r"const PRECACHE = (\[.*?\]);", sw, re.S).group(1))
    assert precache[0] == "./"
    assert sorted(precache[1:]) == sorted(f"./{n}" for n in build["files"] if n not in ("sw.js", "build.json"))
    assert f'const VERSION = "{build["version"]}"' in sw
    assert build["wheel"] in (dist / "worker.mjs").read_text()


def test_the_demo_model_is_shipped_and_precached(dist):
    # the page opens these bytes in place instead of building the demo on every visit
    from tensorloupe import synthetic
    assert (dist / synthetic.FILE_NAME).read_bytes() == synthetic.demo_bytes()
    assert f'const DEMO = "{synthetic.FILE_NAME}"' in (dist / "worker.mjs").read_text()
    assert f'"./{synthetic.FILE_NAME}"' in (dist / "sw.js").read_text()


def test_only_relative_urls_and_no_outside_host(dist):
    """dist/ works from any sub-path, and our own files name no other host."""
    html = (dist / "index.html").read_text()
    for url in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert not url.startswith(("/", "http:", "https:", "//")), url
    for name in APP_FILES:
        text = (dist / name).read_text()
        assert not re.search(r"https?://", text), f"{name} names a URL"
        assert not re.search(r"""(?:import|fetch|new URL)\(\s*["']/""", text), f"{name} uses a root-relative URL"
    manifest = json.loads((dist / "manifest.webmanifest").read_text())
    assert manifest["start_url"] == "./" and all(not i["src"].startswith("/") for i in manifest["icons"])


def test_build_is_reproducible(tmp_path):
    """The same sources give the same bytes, so the service worker's cache version only changes
    when something served changes."""
    build_module = _build()
    first = build_module.build(tmp_path / "one")
    second = build_module.build(tmp_path / "two")
    assert first == second
    assert (tmp_path / "one" / first["wheel"]).read_bytes() == (tmp_path / "two" / first["wheel"]).read_bytes()


@pytest.mark.parametrize("name, mime", [
    ("pyodide/pyodide.asm.wasm", "application/wasm"),
    ("pyodide/pyodide.mjs", "text/javascript"),
    ("worker.mjs", "text/javascript"),
    ("manifest.webmanifest", "application/manifest+json"),
    ("index.html", "text/html"),
])
def test_server_mime_types(server, name, mime):
    status, headers, _ = get(server + name)
    assert status == 200 and headers["Content-Type"].split(";")[0] == mime
    assert "default-src 'self'" in headers["Content-Security-Policy"]


def test_server_answers_range_requests(server, dist):
    whole = (dist / "pyodide" / "pyodide.asm.wasm").read_bytes()
    status, headers, body = get(server + "pyodide/pyodide.asm.wasm", {"Range": "bytes=100-163"})
    assert status == 206 and body == whole[100:164]
    assert headers["Content-Range"] == f"bytes 100-163/{len(whole)}"
    status, _, body = get(server + "pyodide/pyodide.asm.wasm", {"Range": "bytes=-10"})
    assert status == 206 and body == whole[-10:]
    with pytest.raises(urllib.error.HTTPError) as e:
        get(server + "index.html", {"Range": f"bytes={10**9}-"})
    assert e.value.code == 416
    status, _, body = get(server + "index.html", {"Range": "bytes=0-1,5-9"})   # ignored: whole file
    assert status == 200 and body == (dist / "index.html").read_bytes()
    # A HEAD with a range leaves no state behind on the kept-alive connection.
    connection = http.client.HTTPConnection(*urllib.parse.urlsplit(server).netloc.split(":"))
    connection.request("HEAD", "/index.html", headers={"Range": "bytes=0-3"})
    connection.getresponse().read()
    connection.request("GET", "/index.html")
    assert connection.getresponse().read() == (dist / "index.html").read_bytes()
    connection.close()


def _build():
    import build
    return build


def _directives(policy: str) -> dict[str, str]:
    return dict((part.strip().split(" ", 1) + [""])[:2] for part in policy.split(";") if part.strip())


def test_the_worker_script_carries_its_own_policy(server):
    """A same-origin module worker takes its CSP from its own response, not from the page's
    <meta> (test_page_urls shows it in Chromium): worker.mjs is sent with WORKER_CSP, which only
    widens connect-src (to the URLs a user may type); every other file gets the page's CSP."""
    build = _build()
    _, headers, _ = get(server + "worker.mjs")
    assert headers["Content-Security-Policy"] == build.WORKER_CSP
    page, worker = _directives(build.CSP), _directives(build.WORKER_CSP)
    assert page.keys() == worker.keys()
    assert {k for k in page if page[k] != worker[k]} == {"connect-src"}
    assert page["connect-src"] == "'self'" and worker["connect-src"] == "'self' https: http:"
    for name in ("", "index.html?url=files/x.safetensors", "app.js", "pyodide/pyodide.mjs"):
        _, headers, _ = get(server + name)
        assert headers["Content-Security-Policy"] == build.CSP, name


def test_serve_files_are_under_files_with_range_support(dist, tmp_path):
    """`build.py serve FILE`: the files given are served under /files/<name>, by ranges, and the
    printed address opens them."""
    build = _build()
    model = tmp_path / "a b.safetensors"
    model.write_bytes(bytes(range(256)) * 4)
    httpd = build.make_server(dist, port=0, files={model.name: model})
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        status, headers, body = get(f"{base}/files/a%20b.safetensors", {"Range": "bytes=10-19"})
        assert status == 206 and body == bytes(range(10, 20))
        assert headers["Content-Range"] == "bytes 10-19/1024"
        with pytest.raises(urllib.error.HTTPError) as e:
            get(f"{base}/files/other.safetensors")
        assert e.value.code == 404
        status, _, body = get(f"{base}/index.html")
        assert status == 200 and body == (dist / "index.html").read_bytes()
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert build.app_address("127.0.0.1", 8000, {}) == "http://127.0.0.1:8000/"
    assert build.app_address("0.0.0.0", 9000, {model.name: model, "b.gguf": model}) == \
        "http://127.0.0.1:9000/?url=files/a%20b.safetensors&url=files/b.gguf"


def test_serve_gives_unrelated_files_an_address_each(tmp_path):
    # `build.py serve A B C`: shards (with their index and config.json) are one checkpoint and
    # one address; unrelated files are not shards of one, so each gets its own address
    build = _build()
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
             "model.safetensors.index.json", "config.json", "other.gguf", "third.pt"]
    files = {n: tmp_path / n for n in names}
    found = build.checkpoints_among(files)
    assert [sorted(members) for _, members in found] == [
        ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"],
        ["other.gguf"], ["third.pt"]]     # config.json: in no address (main says so)
    shards = {n: files[n] for n in names[:3]}
    assert [sorted(m) for _, m in build.checkpoints_among(shards)] == [sorted(shards)]
