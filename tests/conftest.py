"""Shared test setup: the fixture generators in fixtures/ and build.py are importable, the demo
model is cached, and the app is built once per session (dist) and served on 127.0.0.1 (server)
for the tests of the build (tests/web) and of the page (tests/browser)."""

import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures"))
sys.path.insert(0, str(ROOT))  # `import build`: the app's builder and server, used by several tests


@pytest.fixture(scope="session")
def demo_bytes():
    from tensorloupe.synthetic import demo_bytes as build
    return build()


@pytest.fixture(scope="session")
def demo_path(tmp_path_factory, demo_bytes):
    path = tmp_path_factory.mktemp("demo") / "demo-moe.safetensors"
    path.write_bytes(demo_bytes)
    return path


@pytest.fixture(scope="session")
def dist(tmp_path_factory) -> Path:
    """The app built into a temporary folder (dist/ is left alone)."""
    import build
    out = tmp_path_factory.mktemp("site") / "dist"
    build.build(out)
    return out


def serve(directory: Path):
    """build.py's own Range-capable threaded server for `directory`, on a free port."""
    import build
    server = build.make_server(directory, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


@pytest.fixture(scope="session")
def serve_directory():
    """serve(directory) -> (server, url): a server of one's own (which a test may shut down)."""
    return serve


@pytest.fixture(scope="session")
def server(dist):
    httpd, url = serve(dist)
    yield url
    httpd.shutdown()
    httpd.server_close()
