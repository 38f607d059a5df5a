"""Checkpoints opened by URL in the page: `?url=` in the page's address (relative, instead of the
demo), the URL box (another origin, with CORS), and the refusals, worded as the CLI words them:
a server without Range support, a 404, a server that does not allow CORS. The page makes no
request but to its own origin; the worker's only other requests go to the URL the user gave.
Also `python3 build.py serve FILE ...`, run as a user runs it, and the worker's CSP."""

from __future__ import annotations

import http.server
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import tensorloupe
from tensorloupe.errors import UsageError
from tensorloupe.source.remote import HttpSource

from page_checks import assert_heatmap_matches, assert_stats_equal, cli_stats

ROOT = Path(__file__).resolve().parents[2]
import build  # (the app's own server, and `serve FILE` below)
SERVED_NAME = "browser.safetensors"


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def start(server) -> str:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def other_origin(folder: Path, *, cors: str | None = "full", ranges: bool = True):
    """A server on another port (another origin) for `folder`, logging every request it gets.
    cors: "full" (Allow-Origin and Expose-Headers: Content-Range), "origin" (Allow-Origin only:
    Content-Range hidden from the page), None (no CORS). ranges=False: http.server's plain
    handler, which answers 200 with the whole file to a Range request."""
    log: list[tuple[str, str, str | None]] = []
    sent: list[dict] = []         # each whole-file (200) body: bytes that reached the socket
    base = build.Handler if ranges else http.server.SimpleHTTPRequestHandler

    class Other(base):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def copyfile(self, source, outputfile):
            if ranges:
                return super().copyfile(source, outputfile)
            body = {"bytes": 0, "done": threading.Event()}
            sent.append(body)
            try:
                while chunk := source.read(64 << 10):
                    outputfile.write(chunk)
                    body["bytes"] += len(chunk)
            finally:
                body["done"].set()

        def send_head(self):
            log.append((self.command, self.path, self.headers.get("Range")))
            return super().send_head()

        def end_headers(self):
            if cors:
                self.send_header("Access-Control-Allow-Origin", "*")
            if cors == "full":
                self.send_header("Access-Control-Expose-Headers", "Content-Range")
            super().end_headers()

        def handle(self):
            try:
                super().handle()
            except ConnectionError:
                pass     # the page stopped reading a body it does not want (a 200 to a Range)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: Other(*a, directory=str(folder), **k))
    server.daemon_threads = True
    return server, start(server), (log, sent)


@pytest.fixture(scope="module")
def site(dist, files):
    """The app, with one model file served beside it under /files/ (as `build.py serve FILE`)."""
    server = build.make_server(dist, port=0, files={SERVED_NAME: files["safetensors"]})
    base = start(server)
    yield base
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def remote(files, tmp_path_factory):
    """Other origins serving the same model: with CORS, with CORS hiding Content-Range, without
    CORS, and without Range support."""
    folder = tmp_path_factory.mktemp("remote")
    (folder / SERVED_NAME).symlink_to(files["safetensors"])
    servers = {kind: other_origin(folder, **options) for kind, options in {
        "cors": {}, "hidden_range": {"cors": "origin"}, "no_cors": {"cors": None},
        "no_ranges": {"ranges": False}}.items()}
    yield {kind: (base, *logs) for kind, (_, base, logs) in servers.items()}
    for server, _, _ in servers.values():
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def url_page(page_factory, site):
    """A page opened at ?url=files/browser.safetensors (relative): that model, not the demo."""
    context, app, requests, errors = page_factory(site + "/")
    app.page.goto(f"{site}/?url=files/{SERVED_NAME}")
    app.wait_python()
    app.wait_model(SERVED_NAME)
    yield app, requests
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def test_a_relative_url_in_the_address_opens_instead_of_the_demo(url_page, site, files):
    app, requests = url_page
    assert app.opened() == 1                        # the demo was never built
    assert app.fact("tensor_count") == "4" and app.fact("format") == "safetensors"
    assert app.entries()[:2] == ["demo-moe.safetensors", SERVED_NAME]
    name = "wide.weight"                            # 2048 x 4096 F32: 32 MiB of the file
    app.select(name)
    assert_stats_equal(app.stats(), cli_stats(files["safetensors"], name)["stats"])
    assert_heatmap_matches(app, tensorloupe.open(files["safetensors"]))
    # Read by ranges: the header block, the sampled windows (65,536 values) and the whole rows
    # the heatmap's lattice shows (16 KiB each), not the file.
    size, rows = files["safetensors"].stat().st_size, int(app.heatmap()["rows"])
    expected = (256 << 10) + 65536 * 4 + rows * 4096 * 4
    assert app.bytes_read() <= expected and app.bytes_read() < size // 5, (app.bytes_read(), expected, size)
    app.screenshot("tensor-opened-by-url")
    assert all(origin(url) == site for url in requests.urls), \
        [url for url in requests.urls if origin(url) != site]


def test_a_cross_origin_url_typed_in_the_box(url_page, site, remote, files):
    app, requests = url_page
    base, log, _ = remote["cors"]
    url = f"{base}/{SERVED_NAME}"
    seen_before = len(requests.urls)
    before = app.opened()
    app.page.fill("#url-input", url)
    app.page.click("#url-form button[type=submit]")
    app.wait_model(SERVED_NAME, before)
    name = "half.weight"
    app.select(name)
    assert_stats_equal(app.stats(), cli_stats(files["safetensors"], name)["stats"])
    assert app.bytes_read() < files["safetensors"].stat().st_size // 8
    # Privacy: besides the app's own origin, the only URL contacted is the one typed, and the
    # other server saw only range reads of it.
    contacted = requests.urls[seen_before:]
    assert url in contacted
    assert all(u == url or origin(u) == site for u in contacted), contacted
    assert log and all(path == f"/{SERVED_NAME}" and method == "GET" and rng for method, path, rng in log), log
    app.screenshot("summary-cross-origin-url")


def test_content_range_hidden_by_cors_still_opens(url_page, remote):
    """A CORS server that does not expose Content-Range: the size comes from a HEAD request."""
    app, _ = url_page
    base, log, _ = remote["hidden_range"]
    before = app.opened()
    app.page.fill("#url-input", f"{base}/{SERVED_NAME}")
    app.page.press("#url-input", "Enter")
    app.wait_model(SERVED_NAME, before)
    assert app.fact("tensor_count") == "4"
    assert ("HEAD", f"/{SERVED_NAME}", None) in log


def cli_error(url: str) -> str:
    """What the CLI and the API say about `url`."""
    with pytest.raises(UsageError) as e:
        HttpSource(url)
    return str(e.value)


def refused(app, url: str, screenshot: str | None = None) -> str:
    """Type `url`, expect a readable error, and check the previous model is still there."""
    model, tensors, opened = app.page.evaluate("document.body.dataset.model"), app.fact("tensor_count"), app.opened()
    app.page.fill("#url-input", url)
    app.page.click("#url-form button[type=submit]")
    text = app.wait_error()
    assert "is still open" in text
    assert app.page.evaluate("document.body.dataset.model") == model and app.opened() == opened
    assert app.fact("tensor_count") == tensors
    if screenshot:
        app.screenshot(screenshot)
    app.page.click("#error-close")
    return text


def test_a_server_without_range_support_is_refused_in_the_cli_s_words(url_page, remote, files):
    app, _ = url_page
    base, log, sent = remote["no_ranges"]
    url = f"{base}/{SERVED_NAME}"
    text = refused(app, url, "error-no-range-support")
    # One request, stopped at its headers: the 32 MiB body was not downloaded (what reached the
    # socket is at most what the kernel buffers before the browser hung up).
    assert log == [("GET", f"/{SERVED_NAME}", "bytes=0-65535")]   # the probe asks for the header
    assert sent and sent[0]["done"].wait(10)
    assert sent[0]["bytes"] < files["safetensors"].stat().st_size // 2, sent
    expected = cli_error(url)
    assert "does not answer HTTP Range requests" in expected
    # The CLI's words; the file is named once, by the page's title line.
    name, words = expected.split(": ", 1)
    assert text.startswith(f"Could not open {name}.") and words in text and f"{name}: " not in text


def test_a_missing_file_is_a_404(url_page, site):
    app, _ = url_page
    url = f"{site}/files/nope.safetensors"
    text = refused(app, url)
    name, words = cli_error(url).split(": ", 1)    # http.server: "File not found"
    assert "the server answered 404" in text and words in text and text.startswith(f"Could not open {name}.")


def test_a_server_without_cors_is_a_readable_error(url_page, remote):
    app, _ = url_page
    base, log, _ = remote["no_cors"]
    text = refused(app, f"{base}/{SERVED_NAME}", "error-no-cors")
    assert f"cannot fetch {base}/{SERVED_NAME}" in text and "CORS" in text
    # The previous model still reads: select a tensor of it.
    app.select(app.page.eval_on_selector(".tree-row.leaf", "r => r.dataset.name"))


def test_the_worker_s_policy_comes_from_its_own_response(dist, page_factory, remote):
    """Why build.py sends WORKER_CSP with worker.mjs: served with the page's policy instead
    (connect-src 'self'), the worker cannot reach a URL the user typed, whatever the page's
    <meta> says, and no request leaves. (The page's own policy is tested in test_page_offline.)"""
    strict = type("Strict", (build.Handler,), {"end_headers": lambda self: (
        self.send_header("Content-Security-Policy", build.CSP),
        http.server.SimpleHTTPRequestHandler.end_headers(self))})
    server = build.Server(("127.0.0.1", 0), lambda *a, **k: strict(*a, directory=str(dist), **k))
    site = start(server)
    base, log, _ = remote["cors"]
    context, app, _, _ = page_factory(site + "/")
    try:
        app.goto()
        seen = len(log)
        app.page.fill("#url-input", f"{base}/{SERVED_NAME}")
        app.page.click("#url-form button[type=submit]")
        assert "CORS" in app.wait_error()
        assert len(log) == seen, "the request left despite connect-src 'self'"
    finally:
        context.close()
        server.shutdown()
        server.server_close()


def test_build_py_serve_with_files_opens_them(page_factory, dist, shards):
    """`python3 build.py serve FILE ...` as a user runs it: the printed address opens the files
    (here the shards of one model and its config.json) as one checkpoint, not the demo."""
    names = ("shard_1", "shard_2", "shard_3", "shard_index", "shard_config")
    # The request log goes to a file: a pipe nobody reads fills up and blocks the server.
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "build.py"), "serve", *(str(shards[n]) for n in names),
         "--no-build", "--out", str(dist), "--port", "0"],
        stdout=subprocess.PIPE, stderr=log, text=True)
    context = None
    try:
        address = None
        for line in process.stdout:
            if line.startswith("open "):
                address = line.split()[1]
                break
        if not address:
            log.seek(0)
            pytest.fail(f"build.py serve printed no address: {log.read()}")
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?url=files/model-00001-of-00003\.safetensors"
                            r"&url=files/.*&url=files/config\.json", address), address
        context, app, requests, errors = page_factory(address)
        page = app.page
        page.goto(address)
        app.wait_python()
        app.wait_model("model-{00001..00003}-of-00003.safetensors")
        assert app.opened() == 1 and app.fact("tensor_count") == "48"
        assert page.locator("#warnings").count() == 0
        app.tab("moe")
        assert page.inner_text("#panel-moe .fact[data-key=top_k] .fact-value") == "3"
        assert all(origin(url) == origin(address) for url in requests.urls)
        assert not errors
    finally:
        if context is not None:
            context.close()
        process.send_signal(signal.SIGINT)   # Ctrl+C stops the server
        process.wait(timeout=30)
        process.stdout.close()
        log.close()


@pytest.fixture(scope="module")
def remote_shards(shards, tmp_path_factory):
    """The sharded MoE (three shards and their index) on another origin, with CORS, logging."""
    folder = tmp_path_factory.mktemp("remote-shards")
    names = {}
    for key in ("shard_1", "shard_2", "shard_3", "shard_index"):
        (folder / shards[key].name).symlink_to(shards[key])
        names[key] = shards[key].name
    server, base, (log, _) = other_origin(folder)
    yield base, names, log
    server.shutdown()
    server.server_close()


def test_remote_shards_typed_in_the_box_open_with_one_request_each(url_page, site, remote_shards,
                                                                   shards, capsys):
    # The set opens as `tensorloupe inspect --json` opens the local files, with one request per
    # file (a shard's header and all of the index come in its first request); the tree comes
    # first, then the architecture and the Experts tab (model_details).
    from tensorloupe.cli import main
    app, requests = url_page
    base, names, log = remote_shards
    urls = [f"{base}/{names[k]}" for k in ("shard_1", "shard_2", "shard_3", "shard_index")]
    seen_before, logged_before = len(requests.urls), len(log)
    before = app.opened()
    app.page.fill("#url-input", "\n".join(urls))
    app.page.click("#url-form button[type=submit]")
    app.wait_model("model-{00001..00003}-of-00003.safetensors", before)
    assert main(["inspect", "--json", *(str(shards[k]) for k in ("shard_1", "shard_2", "shard_3",
                                                                   "shard_index"))]) == 0
    cli = json.loads(capsys.readouterr().out)
    app.tab("summary")
    assert app.fact("tensor_count") == str(cli["tensor_count"]) == "48"
    assert app.page.inner_text("#tree-count") == f"{cli['tensor_count']} tensors"
    assert app.page.locator("#architecture-pending").count() == 0      # the details came
    assert app.page.locator("#architecture").count() == 1
    assert not app.page.locator("#tab-moe").is_hidden()
    # One ranged GET per file: a shard's first 64 KiB (its header), all of the index. Only the
    # shard of the tensor shown first is read again (its sampled values, after the tree).
    shown = app.page.inner_text("#tensor-name")
    read_again = "/" + next(t["file"] for t in cli["tensors"] if t["name"] == shown)
    opened = log[logged_before:]
    assert all(method == "GET" and rng for method, _, rng in opened), opened
    firsts = {}
    for _, path, rng in opened:
        firsts.setdefault(path, rng)
    assert firsts == {**{f"/{names[k]}": "bytes=0-65535" for k in ("shard_1", "shard_2", "shard_3")},
                      f"/{names['shard_index']}": f"bytes=0-{(16 << 20) - 1}"}
    counts = {path: sum(p == path for _, p, _ in opened) for path in firsts}
    assert all(n == 1 for path, n in counts.items() if path != read_again), counts
    contacted = requests.urls[seen_before:]
    assert all(u in urls or origin(u) == site for u in contacted), contacted
