"""Reading a checkpoint from a web server by HTTP Range requests: only the header and the sampled
ranges travel, and a server without Range support is refused instead of downloaded."""

import http.server
import threading

import pytest

import tensorloupe
from tensorloupe.errors import UsageError
from tensorloupe.source.remote import HttpSource

import build  # (its Range-capable server is the one the app is served with)


@pytest.fixture(scope="module")
def served(tmp_path_factory, demo_bytes):
    folder = tmp_path_factory.mktemp("site")
    (folder / "demo-moe.safetensors").write_bytes(demo_bytes)
    server = build.make_server(folder, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_open_and_sample_by_range_requests(served, demo_bytes):
    ckpt = tensorloupe.open(f"{served}/demo-moe.safetensors")
    assert ckpt.name == "demo-moe.safetensors" and ckpt.size == len(demo_bytes)
    assert len(ckpt.tensors) == 127
    t = ckpt.tensor("model.layers.2.block_sparse_moe.experts.5.w3.weight")
    local = tensorloupe.open(demo_bytes).tensor(t.name)
    assert tensorloupe.sample(t, 2048).values == tensorloupe.sample(local, 2048).values
    assert ckpt.bytes_read() < len(demo_bytes) / 20 and ckpt.reads() < 40


def test_missing_file_is_a_clear_error(served):
    with pytest.raises(UsageError, match="404"):
        tensorloupe.open(f"{served}/nope.safetensors")


def test_server_without_range_support_is_refused(tmp_path):
    (tmp_path / "m.safetensors").write_bytes(b"x" * 100)
    handler = type("Plain", (http.server.SimpleHTTPRequestHandler,),
                   {"log_message": lambda *a: None})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: handler(*a, directory=str(tmp_path), **k))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(UsageError, match="does not answer HTTP Range"):
            HttpSource(f"http://127.0.0.1:{server.server_address[1]}/m.safetensors")
    finally:
        server.shutdown()


def test_cli_inspects_a_url(served, capsys):
    import json
    from tensorloupe.cli import main
    assert main(["inspect", f"{served}/demo-moe.safetensors", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tensor_count"] == 127
