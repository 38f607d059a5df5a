"""A local server that imitates the Hugging Face Hub's file URLs and headers (no network in the
tests): the page's Hub shortcut (tests/browser/test_page_hub.py) and the CLI's `org/model` when it
is not in the cache (tests/test_hub_remote.py) read from it."""

import contextlib
import http.server
import threading
import urllib.parse
from pathlib import Path
from urllib.parse import urlsplit

import build


class HubHandler(build.Handler):
    """/<org>/<model>/resolve/<rev>/<file>: small files answered directly, large ones (LFS on the
    Hub) by a 302 to a CDN-like path, as huggingface.co does; 404 with X-Error-Code otherwise.
    CORS as the Hub sends it (any origin; Content-Range and friends exposed)."""

    folder: Path = Path(".")
    repo, revision = "org/model", "main"
    log: list = []

    def route(self):
        path = urllib.parse.unquote(urlsplit(self.path).path)
        prefix = f"/{self.repo}/resolve/"
        if path.startswith("/cdn/"):
            return self.folder / path[len("/cdn/"):], None
        if path.startswith(prefix):
            revision, _, name = path[len(prefix):].partition("/")
            if revision == self.revision and (self.folder / name).is_file():
                lfs = name.endswith(".safetensors")
                return self.folder / name, (f"/cdn/{name}" if lfs else None)
        return None, None

    def translate_path(self, path):
        found, _ = self.route()
        return str(found) if found else str(self.folder / "__missing__")

    def send_head(self):
        self.log.append((self.command, self.path, self.headers.get("Range")))
        found, redirect = self.route()
        if found is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if redirect:
            self.send_response(302)
            self.send_header("Location", redirect)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return super().send_head()

    def end_headers(self):
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Expose-Headers", "Content-Range, Content-Length, ETag, X-Repo-Commit")
        self.send_header("X-Repo-Commit", "0" * 40)
        super().end_headers()

    def do_OPTIONS(self):
        self.send_response(204)
        self.send_header("Access-Control-Allow-Headers", "Range")
        self.send_header("Content-Length", "0")
        self.end_headers()


@contextlib.contextmanager
def serve_hub(folder: Path, repo: str, revision: str = "main"):
    """(base URL, request log) of a Hub serving `folder`'s files as `repo`@`revision`."""
    handler = type("Hub", (HubHandler,), {"folder": Path(folder), "repo": repo,
                                          "revision": revision, "log": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.log
    finally:
        server.shutdown()
        server.server_close()
