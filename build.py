"""Build the tensorloupe browser app into dist/, and serve it.

    python build.py                 # assemble dist/ (runs `npm ci` first if node_modules is missing)
    python build.py serve           # build, then serve dist/ on http://127.0.0.1:8000 (the demo opens)
    python build.py serve FILE ...  # the same, and serve the files under /files/<name>; the printed
                                    # address (?url=files/<name>...) opens them (several: as shards)
    python build.py serve --port 9000 --no-build --open

dist/ is a static site with relative URLs only, so it works from any sub-path (a GitHub Pages
project site, a folder on a USB stick served by anything):

    index.html style.css *.js worker.mjs manifest.webmanifest icons/     our page (web/)
    sw.js                                  the service worker, with the precache list and version
    tensorloupe-<version>-py3-none-any.whl our library (pylib/), imported by Pyodide in the worker
                                           straight from the zip, with bytecode compiled by
                                           Pyodide's interpreter next to each source (zipimport
                                           loads the .pyc: no compiling, no unpacking at boot)
    pyodide/                               the Pyodide runtime from the pinned npm package
    build.json                             version, wheel name and file list (for tests and tools)

Nothing is ever fetched from a CDN: the Pyodide files come from node_modules (package.json pins
the version, package-lock.json its integrity hash), and the page's Content-Security-Policy only
allows its own origin. The worker's requests are governed by another policy (see WORKER_CSP).

The server here is also the one the browser tests and the benchmark use: threaded, with HTTP Range
support (Python's http.server has none) and Nagle's algorithm off (else ~40 ms stalls per request).
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import tomllib
import urllib.parse
import zipfile
from base64 import b64decode, urlsafe_b64encode
from pathlib import Path

ROOT = Path(__file__).resolve().parent
WEB = ROOT / "web"
PYLIB = ROOT / "pylib"
PACKAGE = PYLIB / "tensorloupe"
NODE_PYODIDE = ROOT / "node_modules" / "pyodide"
DEFAULT_OUT = ROOT / "dist"

# The runtime files a browser needs; the npm package also holds Node-only and source-map files.
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip",
                 "pyodide-lock.json")
# Placeholders in web/ files, filled in at build time.
VERSION_MARK = "__TENSORLOUPE_BUILD__"
WHEEL_MARK = "__TENSORLOUPE_WHEEL__"
DEMO_MARK = "__TENSORLOUPE_DEMO__"
PRECACHE_MARK = '"__TENSORLOUPE_PRECACHE__"'
TEMPLATED = ("sw.js", "worker.mjs")
# Fixed timestamp for archive members: the same sources give the same wheel bytes (and version).
ZIP_EPOCH = (2020, 1, 1, 0, 0, 0)

# One policy for every page: scripts, styles, workers, fetches and images from our origin only.
# 'wasm-unsafe-eval' lets the worker compile Pyodide's WebAssembly; nothing else is evaluated.
CSP = ("default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; "
       "img-src 'self' data: blob:; connect-src 'self'; worker-src 'self'; manifest-src 'self'; "
       "font-src 'self'; object-src 'none'; base-uri 'self'; form-action 'none'")

# The worker's policy. A same-origin module worker does not get the page's policy (the <meta> in
# index.html covers the page only): Chromium gives it the policy of worker.mjs's own response
# headers, which is this one when this server serves the app. Verified in Chromium 156: with
# connect-src 'self' in worker.mjs's headers, the worker's XHR to another origin fails before any
# request leaves; with no header (a static host such as GitHub Pages), the worker may connect
# anywhere whatever the page's <meta> says. It differs from CSP in connect-src only, relaxed
# because the user may type the URL of a checkpoint on any server and the worker reads it by Range
# requests: https: for any server, http: for plain-http ones (local servers; an https page cannot
# reach those anyway, mixed content). That the worker contacts nothing but the typed URL is then
# the code's doing (web/remote.py, worker.mjs probe), and the browser tests record every request.
# The page itself keeps connect-src 'self'.
WORKER_CSP = CSP.replace("connect-src 'self'", "connect-src 'self' https: http:")
WORKER_SCRIPT = "/worker.mjs"
# `serve FILE ...` serves the files given under this path, and opens the app on them.
FILES_PREFIX = "/files/"

MIME_TYPES = {
    ".wasm": "application/wasm",
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".json": "application/json",
    ".webmanifest": "application/manifest+json",
    ".whl": "application/zip",
    ".zip": "application/zip",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".css": "text/css",
    ".html": "text/html",
    ".safetensors": "application/octet-stream",
    ".gguf": "application/octet-stream",
}


# --- building ------------------------------------------------------------------------------------

def project_version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def ensure_pyodide() -> Path:
    """node_modules/pyodide at the version the lock pins, installed with `npm ci` if needed."""
    wanted = json.loads((ROOT / "package.json").read_text())["dependencies"]["pyodide"]
    installed = NODE_PYODIDE / "package.json"
    if not installed.exists() or json.loads(installed.read_text())["version"] != wanted:
        npm = shutil.which("npm")
        if npm is None:
            sys.exit("build.py: npm is needed to install the Pyodide runtime (npm ci); install Node.js 20+")
        print(f"build.py: installing pyodide {wanted} with npm ci", file=sys.stderr)
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=ROOT, check=True)
    missing = [name for name in PYODIDE_FILES if not (NODE_PYODIDE / name).exists()]
    if missing:
        sys.exit(f"build.py: node_modules/pyodide lacks {', '.join(missing)}")
    return NODE_PYODIDE


def package_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def build_wheel(out_dir: Path) -> str:
    """A wheel of pylib/tensorloupe, sources and Pyodide bytecode, byte-for-byte reproducible;
    returns its file name. The bytecode sits beside each source (`x.pyc` next to `x.py`), where
    zipimport looks first; a CPython installing the wheel would use the sources (its loaders
    prefer a source to a bytecode file beside it), but the wheel is for the browser app."""
    version = project_version()
    dist_info = f"tensorloupe-{version}.dist-info"
    sources = {p.relative_to(PYLIB).as_posix(): p.read_bytes() for p in package_files()}
    members: list[tuple[str, bytes]] = []
    for name, pyc in zip(sources, pyodide_bytecode(sources)):
        members += [(name, sources[name]), (name[:-3] + ".pyc", pyc)]
    members.append((f"{dist_info}/METADATA", (
        "Metadata-Version: 2.1\nName: tensorloupe\n"
        f"Version: {version}\nSummary: Look inside model checkpoints.\n").encode()))
    members.append((f"{dist_info}/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: tensorloupe build.py\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n").encode()))
    record = [f"{name},sha256={_digest(data)},{len(data)}" for name, data in members]
    record.append(f"{dist_info}/RECORD,,")
    members.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    name = f"tensorloupe-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out_dir / name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for member, data in members:
            info = zipfile.ZipInfo(member, ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            wheel.writestr(info, data)
    return name


def pyodide_bytecode(sources: dict[str, bytes]) -> list[bytes]:
    """Each source compiled by Pyodide's interpreter under Node (tools/pyodide_compile.mjs), in
    order: bytecode is specific to a Python version, and the host's is not Pyodide's."""
    node = shutil.which("node")
    if node is None:
        sys.exit("build.py: node is needed to compile the library for Pyodide; install Node.js 20+")
    request = json.dumps({"files": {name: data.decode("utf-8") for name, data in sources.items()}})
    done = subprocess.run([node, str(ROOT / "tools" / "pyodide_compile.mjs")], input=request.encode(),
                          capture_output=True, check=False)
    if done.returncode != 0:
        sys.exit(f"build.py: compiling for Pyodide failed:\n{done.stderr.decode(errors='replace')}")
    pycs = json.loads(done.stdout)["pycs"]
    return [b64decode(pycs[name]) for name in sources]


def _digest(data: bytes) -> str:
    return urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(out: Path = DEFAULT_OUT) -> dict:
    """Assemble the static site in `out` (replaced whole); returns the build description."""
    pyodide = ensure_pyodide()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for source in sorted(WEB.rglob("*")):
        if source.is_file():
            target = out / source.relative_to(WEB)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    (out / "pyodide").mkdir()
    for name in PYODIDE_FILES:
        shutil.copyfile(pyodide / name, out / "pyodide" / name)
    wheel = build_wheel(out)
    demo = write_demo(out)

    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    # The version names the service worker's cache: any change to any served byte makes a new one.
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (out / name).read_bytes() + b"\0")
    version = f"{project_version()}-{digest.hexdigest()[:12]}"
    precache = ["./"] + [f"./{name}" for name in files if name != "sw.js"]
    for name in TEMPLATED:
        path = out / name
        text = path.read_text()
        text = text.replace(VERSION_MARK, version).replace(WHEEL_MARK, wheel).replace(DEMO_MARK, demo)
        text = text.replace(PRECACHE_MARK, json.dumps(precache, indent=2))
        path.write_text(text)
    description = {"version": version, "wheel": wheel, "pyodide": _pyodide_version(pyodide),
                   "files": files + ["build.json"]}
    (out / "build.json").write_text(json.dumps(description, indent=2) + "\n")
    return description


def write_demo(out: Path) -> str:
    """The demo model's bytes (tensorloupe.synthetic) as a file of the site: the page opens it
    in place instead of building it in the browser on every visit. Returns its name."""
    sys.path.insert(0, str(PYLIB))
    from tensorloupe import synthetic
    (out / synthetic.FILE_NAME).write_bytes(synthetic.demo_bytes())
    return synthetic.FILE_NAME


def _pyodide_version(pyodide: Path) -> str:
    return json.loads((pyodide / "package.json").read_text())["version"]


# --- serving -------------------------------------------------------------------------------------

IDLE_SECONDS = 20      # `serve`: an idle connection is closed after this (a page's keep-alive reopens)
MAX_THREADS = 64       # `serve`: connections served at once


class Handler(http.server.SimpleHTTPRequestHandler):
    """Static files with the right MIME types, single-range requests, the CSP, no caching surprises.

    Range matters: the app and the benchmark can read model files over HTTP by range, and the
    browser tests check that a view only fetches the bytes it shows. `files` maps names to local
    files served under /files/<name> (`serve FILE ...`).
    """

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **MIME_TYPES}
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    quiet = True
    files: dict[str, Path] = {}
    # A connection that sends nothing for this long is closed: a trickling client would otherwise
    # hold its thread for ever (StreamRequestHandler applies it to the socket).
    timeout = IDLE_SECONDS

    def end_headers(self) -> None:
        # A request line too malformed to parse leaves no self.path: its 400 gets the page's CSP.
        path = urllib.parse.urlsplit(getattr(self, "path", "/")).path
        self.send_header("Content-Security-Policy", WORKER_CSP if path.endswith(WORKER_SCRIPT) else CSP)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def translate_path(self, path: str) -> str:
        route = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
        if route.startswith(FILES_PREFIX) and route[len(FILES_PREFIX):] in self.files:
            return str(self.files[route[len(FILES_PREFIX):]])
        return super().translate_path(path)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        if not self.quiet:
            super().log_message(format, *args)

    def send_head(self):
        self._remaining = None
        if "\0" in urllib.parse.unquote(urllib.parse.urlsplit(self.path).path):
            # No file name holds a NUL; os.stat would raise ValueError and kill the handler.
            self.send_error(400, "the path holds a NUL byte")
            return None
        spec = self.headers.get("Range")
        path = self.translate_path(self.path)
        if spec is None or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        try:
            span = _parse_range(spec, size)
        except ValueError:
            return super().send_head()
        if span is None:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        start, end = span
        f = open(path, "rb")
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self._remaining = end - start + 1
        return f

    def copyfile(self, source, outputfile) -> None:
        remaining = getattr(self, "_remaining", None)
        if remaining is None:
            return super().copyfile(source, outputfile)
        while remaining:
            chunk = source.read(min(remaining, 1 << 20))
            if not chunk:
                break
            outputfile.write(chunk)
            remaining -= len(chunk)


def _parse_range(spec: str, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a single `bytes=a-b`, `bytes=a-` or `bytes=-n` range, or None when
    it cannot be satisfied. Raises ValueError for ranges we ignore (other units, several ranges):
    the whole file is served then, as RFC 9110 allows."""
    unit, _, ranges = spec.partition("=")
    if unit.strip() != "bytes" or "," in ranges:
        raise ValueError(spec)
    first, _, last = ranges.strip().partition("-")
    if first == "":
        n = int(last)
        start, end = max(0, size - n), size - 1
    else:
        start = int(first)
        end = min(int(last), size - 1) if last else size - 1
    if start > end or start >= size:
        return None
    return start, end


class Server(http.server.ThreadingHTTPServer):
    """One thread per connection, at most MAX_THREADS at once: a connection beyond them waits in
    the listen queue (and is served when one ends) instead of starting one more thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args, **kwargs):
        self._slots = threading.BoundedSemaphore(MAX_THREADS)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address):
        self._slots.acquire()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def handle_error(self, request, client_address):
        # A client that hangs up mid-reply is not the server's error: no traceback for it.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def make_server(directory: Path, host: str = "127.0.0.1", port: int = 8000,
                quiet: bool = True, files: dict[str, Path] | None = None) -> Server:
    """A server for `directory` (port 0 picks a free port: see server.server_address), and for
    `files` ({name: path}) under /files/<name>."""
    handler = type("DistHandler", (Handler,), {"quiet": quiet, "files": dict(files or {})})

    def factory(*args, **kwargs):
        return handler(*args, directory=str(directory), **kwargs)

    return Server((host, port), factory)


def served_files(paths: list[Path]) -> dict[str, Path]:
    """{name: path} for `serve FILE ...`; refuses missing files and two files of one name."""
    files: dict[str, Path] = {}
    for path in paths:
        if not path.is_file():
            sys.exit(f"build.py: {path} is not a file")
        if path.name in files:
            sys.exit(f"build.py: two files are named {path.name} ({files[path.name]} and {path})")
        files[path.name] = path.resolve()
    return files


def app_address(host: str, port: int, files: dict[str, Path]) -> str:
    """The app's address; with files, ?url=files/<name> for each, which the page opens (as one
    checkpoint when they are shards) instead of the demo."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    base = f"http://{host}:{port}/"
    if not files:
        return base
    query = "&".join("url=" + urllib.parse.quote(f"{FILES_PREFIX[1:]}{name}") for name in files)
    return f"{base}?{query}"


def checkpoints_among(files: dict[str, Path]) -> list[tuple[str, dict[str, Path]]]:
    """(label, files) for each checkpoint among the served files, by tensorloupe's own rule of
    which files form one (opening/grouping.py: shards with their index and config.json): unrelated
    files get an address each, instead of one address that would open them as shards of one."""
    sys.path.insert(0, str(PYLIB))
    from tensorloupe.opening.grouping import group
    groups = group(list(files), name=lambda n: n, directory=lambda n: "", listed=lambda n: True)
    if len(groups) <= 1:
        return [(groups[0].name if groups else "", files)]
    # config.json and the like go with one model, which several cannot say: left out (main says so)
    return [(g.name, {n: files[n] for n in g.members}) for g in groups]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=("build", "serve"), default="build")
    parser.add_argument("files", nargs="*", type=Path, metavar="FILE",
                        help="serve: checkpoint files to serve and open (shards open as one)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default dist/)")
    parser.add_argument("--host", default="127.0.0.1", help="serve: address to listen on "
                        "(default %(default)s)")
    parser.add_argument("--port", type=int, default=8000,
                        help="serve: port (default %(default)s; 0 picks a free port)")
    parser.add_argument("--no-build", action="store_true", help="serve the existing dist/")
    parser.add_argument("--open", action="store_true", help="serve: open the app in a browser")
    # Intermixed: options may come anywhere (`serve --port 8001 model.safetensors`).
    args = parser.parse_intermixed_args(argv)
    if args.files and args.command != "serve":
        parser.error("files are only for `serve`")
    files = served_files(args.files)
    if not (args.command == "serve" and args.no_build):
        description = build(args.out)
        print(f"built {args.out} ({len(description['files'])} files, version {description['version']})")
    if args.command == "serve":
        server = make_server(args.out, args.host, args.port, quiet=False, files=files)
        host, port = server.server_address[:2]
        print(f"serving {args.out} on http://{host}:{port}/  (Ctrl+C stops)", flush=True)
        for name, path in files.items():
            print(f"serving {path} as {FILES_PREFIX}{name}", flush=True)
        found = checkpoints_among(files) if files else [("", {})]
        address = app_address(host, port, found[0][1])
        if len(found) > 1:
            print(f"these files are {len(found)} checkpoints, not the shards of one: an address each", flush=True)
            for label, members in found:
                print(f"open {app_address(host, port, members)}  ({label})", flush=True)
            beside = sorted(set(files) - {n for _, members in found for n in members})
            if beside:
                print(f"not in any address: {', '.join(beside)} (it goes with one model: serve that "
                      "model's files alone to open it with them)", flush=True)
        elif files:
            print(f"open {address}", flush=True)
        if args.open:
            import webbrowser
            webbrowser.open(address)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()


if __name__ == "__main__":
    main()
