"""Shared test setup: the fixture generators in fixtures/ are importable, the demo model is cached."""

import sys
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
