"""`build.py serve` against hostile clients (issue 25): a malformed request line and a path with a
NUL get a 400 (they killed the handler with no reply and a traceback), an idle connection is
closed after the handler's timeout, and the threads are capped. Loopback only, bounded loops."""

import socket
import threading
import time

import build


def start(tmp_path, monkeypatch, **limits):
    for name, value in limits.items():
        monkeypatch.setattr(build, name, value)
    (tmp_path / "index.html").write_text("hi")
    (tmp_path / "model.bin").write_bytes(b"x" * 10)
    handler_timeout = limits.get("IDLE_SECONDS")
    if handler_timeout is not None:
        monkeypatch.setattr(build.Handler, "timeout", handler_timeout)
    server = build.make_server(tmp_path, port=0, files={"model.bin": tmp_path / "model.bin"})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def ask(port, request: bytes, wait: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(request)
        reply = b""
        while chunk := s.recv(4096):     # to the end: the server closes after an error
            reply += chunk
            if b"\r\n\r\n" in reply and b" 206 " in reply[:20] or len(reply) > 65536:
                break
        return reply


def test_malformed_requests_get_a_400_not_a_dead_handler(tmp_path, monkeypatch, capsys):
    server = start(tmp_path, monkeypatch)
    port = server.server_address[1]
    try:
        for request in (b"GET /files/%00 HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"GET /%00 HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"\xff\xfe garbage\r\n\r\n",
                        b"GET / HTTP/1.1 extra\r\n\r\n"):
            reply = ask(port, request)
            # (a request line that is not HTTP/1.x is answered as HTTP/0.9: the body alone)
            assert reply.startswith(b"HTTP/1.1 400 ") or b"Error code: 400" in reply, (request, reply)
        # and it still serves
        assert b" 206 " in ask(port, b"GET /files/model.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=0-3\r\n\r\n")
    finally:
        server.shutdown()
        server.server_close()
    assert "Traceback" not in capsys.readouterr().err


def test_idle_connections_are_closed_and_threads_are_capped(tmp_path, monkeypatch):
    server = start(tmp_path, monkeypatch, IDLE_SECONDS=0.5, MAX_THREADS=4)
    port = server.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(8)]
    try:
        time.sleep(0.2)
        handlers = [t for t in threading.enumerate() if t.name.startswith("Thread-") and t.daemon]
        assert len([t for t in handlers if "process_request_thread" in repr(t._target)]) <= 4
        for s in idle:            # each is closed by the server: the 4 served, then the 4 queued
            s.settimeout(5)
            assert s.recv(10) == b""
        assert b" 200 " in ask(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    finally:
        for s in idle:
            s.close()
        server.shutdown()
        server.server_close()
