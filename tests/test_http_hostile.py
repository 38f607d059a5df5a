"""Misbehaving web servers (issue 10): each gives one clear error within its deadline, never a
traceback, a hang, or another range's bytes shown as the file's. The servers are raw sockets on
127.0.0.1 that answer exactly as written here."""

import socket
import threading
import time

import pytest

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.errors import FormatError, UsageError
from tensorloupe.source.remote import HttpSource

BODY = bytes(range(256)) * 4  # the file every honest answer serves (1024 bytes)
BIG = bytes(range(256)) * 512  # 128 KiB: reads past the first request's 64 KiB go to the server


class RawServer:
    """Accepts connections and hands each request (bytes up to the blank line) to `answer`,
    which writes whatever it likes to the socket."""

    def __init__(self, answer):
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/m.safetensors"
        self.requests: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            request = data.decode("latin-1")
            self.requests.append(request)
            try:
                self.answer(conn, request)
            except OSError:
                pass

    def close(self):
        self.sock.close()


@pytest.fixture
def server():
    made = []

    def make(answer):
        made.append(RawServer(answer))
        return made[-1]
    yield make
    for s in made:
        s.close()


def asked_range(request: str) -> tuple[int, int]:
    line = next(l for l in request.split("\r\n") if l.lower().startswith("range:"))
    first, last = line.split("=", 1)[1].split("-")
    return int(first), int(last)


def partial(conn, first, last, body=BODY, claimed=None, extra=b""):
    last = min(last, len(body) - 1)  # a range past the end is answered up to the end
    data = body[first:last + 1]
    claimed = claimed or f"bytes {first}-{last}/{len(body)}"
    conn.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Range: " + claimed.encode() +
                 b"\r\nContent-Length: " + str(len(data) + len(extra)).encode() +
                 b"\r\nConnection: close\r\n\r\n" + data + extra)


def honest(conn, request):
    partial(conn, *asked_range(request))


def test_honest_raw_server_is_read(server):
    s = server(honest)
    src = HttpSource(s.url)
    assert src.size == 1024 and src.read(300, 5) == BODY[300:305]


def test_another_range_than_asked_is_refused(server):
    # Always answers from byte 0 while saying so: the CLI used to show those bytes as the tensor's.
    def wrong(conn, request):
        first, last = asked_range(request)
        partial(conn, 0, last - first, body=BIG)
    s = server(wrong)
    src = HttpSource(s.url)  # the first request asks for the bytes from 0: right by chance
    with pytest.raises(FormatError, match="another range than the one asked for") as e:
        src.read(70_000, 8)  # past the first request's bytes
    assert "bytes 70,000-70,007" in str(e.value) and "bytes 0-7/131072" in str(e.value)


def test_a_range_that_lies_about_its_bytes_is_refused(server):
    # Says bytes 512-519 but sends the bytes of 0-7.
    def lying(conn, request):
        first, last = asked_range(request)
        data = BODY[:last - first + 1]
        conn.sendall(f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {first}-{last}/1024\r\n"
                     f"Content-Length: {len(data) + 3}\r\nConnection: close\r\n\r\n".encode()
                     + data + b"xyz")
    s = server(lying)
    with pytest.raises(FormatError, match="another range"):
        HttpSource(s.url)  # one byte asked, four sent


def test_no_content_range_is_refused(server):
    def bare(conn, request):
        conn.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Length: 1\r\n"
                     b"Connection: close\r\n\r\nx")
    s = server(bare)
    with pytest.raises(FormatError, match="another range"):
        HttpSource(s.url)


@pytest.mark.parametrize("reply, words", [
    (b"HTTP/1.1 abc\r\n\r\n", "BadStatusLine"),
    (b"HTTP/1.1 206 OK\r\nX: " + b"a" * 70000 + b"\r\n\r\n", "LineTooLong"),
    (b"HTTP/1.1 206 OK\r\n" + b"".join(b"X%d: y\r\n" % i for i in range(150)) + b"\r\n",
     "got more than 100 headers"),
    (b"garbage\r\n\r\n", "BadStatusLine"),
])
def test_malformed_responses_are_one_clear_error(server, capsys, reply, words):
    # http.client raises these (HTTPException, not OSError): they escaped as tracebacks.
    s = server(lambda conn, request: conn.sendall(reply))
    with pytest.raises(UsageError, match=f"cannot fetch .*{words}"):
        HttpSource(s.url)
    assert main(["inspect", s.url]) == 3  # the file cannot be read (issue 10: one line and exit 3)
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_dripping_server_meets_the_total_deadline(server):
    # One byte every 0.5 s: each receive succeeds, so a per-receive timeout never fires.
    def drip(conn, request):
        for byte in b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-0/1024\r\n" * 100:
            conn.sendall(bytes([byte]))
            time.sleep(0.5)
    s = server(drip)
    start = time.monotonic()
    with pytest.raises(UsageError, match="did not answer .* within 2 s"):
        HttpSource(s.url, timeout=2.0)
    assert time.monotonic() - start < 10


def test_a_server_that_never_answers_fails_within_the_deadline(server):
    s = server(lambda conn, request: time.sleep(60))
    start = time.monotonic()
    with pytest.raises(UsageError, match="did not answer"):
        HttpSource(s.url, timeout=2.0)
    assert time.monotonic() - start < 10


def test_default_deadline_is_seconds_not_thirty():
    assert HttpSource.__init__.__defaults__[1] <= 10


def test_redirect_to_another_site_is_not_followed_unless_asked(server, capsys):
    target = server(honest)
    s = server(lambda conn, request: conn.sendall(
        f"HTTP/1.1 302 Found\r\nLocation: {target.url}\r\nContent-Length: 0\r\n\r\n".encode()))
    with pytest.raises(UsageError, match="redirects to another site"):
        HttpSource(s.url)
    assert not target.requests  # nothing was asked of the other site
    assert main(["inspect", s.url]) == 3
    assert "redirects to another site" in capsys.readouterr().err
    src = HttpSource(s.url, follow_redirects=True)
    assert src.redirected_to == target.url and src.read(1, 3) == BODY[1:4]


def test_same_site_redirect_is_followed_and_said(server, tmp_path, demo_bytes):
    def answer(conn, request):
        if request.startswith("GET /old"):
            conn.sendall(b"HTTP/1.1 301 Moved\r\nLocation: /m.safetensors\r\nContent-Length: 0\r\n\r\n")
        else:
            partial(conn, *asked_range(request), body=demo_bytes)
    s = server(answer)
    ckpt = tensorloupe.open(s.url.replace("/m.safetensors", "/old"))
    assert len(ckpt.tensors) == 127
    assert ckpt.warnings[0] == (f"http://127.0.0.1:{s.port}/old was redirected to {s.url}; the "
                                "file was read from there")


def test_cli_follows_another_site_when_asked(server, capsys, demo_bytes):
    target = server(lambda conn, request: partial(conn, *asked_range(request), body=demo_bytes))
    s = server(lambda conn, request: conn.sendall(
        f"HTTP/1.1 307 Temporary\r\nLocation: {target.url}\r\nContent-Length: 0\r\n\r\n".encode()))
    assert main(["inspect", s.url, "--follow-redirects"]) == 0
    out = capsys.readouterr().out
    assert f"was redirected to {target.url}" in out


def test_redirect_to_another_scheme_is_refused(server):
    s = server(lambda conn, request: conn.sendall(
        b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\n\r\n"))
    with pytest.raises(UsageError, match="not an http"):
        HttpSource(s.url, follow_redirects=True)


def test_content_range_total_of_5000_digits(server):
    s = server(lambda conn, request: conn.sendall(
        b"HTTP/1.1 206 OK\r\nContent-Range: bytes 0-0/1" + b"0" * 5000 +
        b"\r\nContent-Length: 1\r\n\r\nx"))
    with pytest.raises(FormatError, match="another range"):
        HttpSource(s.url)


# --- vectored reads (read_many): concurrent requests on kept connections, checked the same way --

FAR = [(70_000, 8), (100_000, 8), (120_000, 16)]


def honest_first(then):
    """A server whose first reply (the header bytes, from 0) is honest and whose later replies
    are `then(conn, first, last)`."""
    def answer(conn, request):
        first, last = asked_range(request)
        if first == 0:
            partial(conn, first, last, body=BIG)
        else:
            then(conn, first, last)
    return answer


def test_read_many_refuses_another_range_than_asked(server):
    # Says what it sends, but sends the range one byte later: the pool used to trust any 206.
    s = server(honest_first(lambda conn, first, last: partial(conn, first + 1, last + 1, body=BIG)))
    src = HttpSource(s.url)
    with pytest.raises(FormatError, match="another range than the one asked for") as e:
        src.read_many(FAR)
    assert "bytes 70,000-70,007" in str(e.value) and "bytes 70001-70008/131072" in str(e.value)


def test_read_many_refuses_a_range_that_lies_about_its_bytes(server):
    # The right Content-Range with three bytes more than it covers.
    s = server(honest_first(lambda conn, first, last: partial(conn, first, last, body=BIG,
                                                              extra=b"xyz")))
    with pytest.raises(FormatError, match="another range"):
        HttpSource(s.url).read_many(FAR)


def test_read_many_meets_each_requests_deadline(server):
    # Later replies drip one byte every 0.5 s: every pooled request is bounded as a single one.
    def drip(conn, first, last):
        for byte in b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-0/1024\r\n" * 100:
            conn.sendall(bytes([byte]))
            time.sleep(0.5)
    s = server(honest_first(drip))
    src = HttpSource(s.url, timeout=2.0)
    start = time.monotonic()
    with pytest.raises(UsageError, match="did not answer .* within 2 s"):
        src.read_many(FAR)
    assert time.monotonic() - start < 10
    src.close()


def test_read_many_does_not_follow_a_redirect_to_another_site_unless_asked(server):
    target = server(honest_first(lambda conn, first, last: partial(conn, first, last, body=BIG)))
    s = server(honest_first(lambda conn, first, last: conn.sendall(
        f"HTTP/1.1 302 Found\r\nLocation: {target.url}\r\nContent-Length: 0\r\n\r\n".encode())))
    with pytest.raises(UsageError, match="redirects to another site"):
        HttpSource(s.url).read_many(FAR)
    assert not target.requests  # nothing was asked of the other site
    src = HttpSource(s.url, follow_redirects=True)
    assert src.read_many(FAR) == [BIG[o:o + n] for o, n in FAR]
    assert src.redirected_to == target.url and len(target.requests) == len(FAR)
    src.close()


def test_read_many_malformed_reply_is_one_clear_error(server, capsys):
    s = server(honest_first(lambda conn, first, last: conn.sendall(b"HTTP/1.1 abc\r\n\r\n")))
    with pytest.raises(UsageError, match="cannot fetch .*BadStatusLine"):
        HttpSource(s.url).read_many(FAR)


def test_read_many_reopens_connections_the_server_closed(server):
    # Replies say nothing of closing (HTTP/1.1 keeps the connection), but the server closes each
    # connection after one reply: the next request on it finds it closed and is sent again once.
    def keep_alive_then_close(conn, first, last):
        data = BIG[first:last + 1]
        conn.sendall(f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {first}-{last}/"
                     f"{len(BIG)}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    s = server(honest_first(keep_alive_then_close))
    src = HttpSource(s.url)
    many = [(65_536 + 1_000 * i, 10) for i in range(24)]
    assert src.read_many(many) == [BIG[o:o + n] for o, n in many]
    assert src.read_many(many[:6]) == [BIG[o:o + n] for o, n in many[:6]]
    src.close()


def test_cli_stats_over_a_lying_server_is_one_line(server, capsys, demo_bytes):
    # The sampler's vectored reads through the CLI: one line, no traceback, nothing shown.
    def answer(conn, request):
        first, last = asked_range(request)
        if first == 0:
            partial(conn, first, last, body=demo_bytes)
        else:
            partial(conn, first + 4, last + 4, body=demo_bytes)
    s = server(answer)
    ckpt = tensorloupe.open(s.url)
    name = max(ckpt.tensors, key=lambda t: t.nbytes).name
    ckpt.close()
    assert main(["stats", s.url, name]) == 3  # a format error
    captured = capsys.readouterr()
    assert "another range" in captured.err and len(captured.err.strip().splitlines()) == 1
    assert "Traceback" not in captured.err


# --- a server that answers another range than asked, on every read path (issue 25) --------------

def far_tensor_file() -> bytes:
    """A safetensors file whose tensor `t` = [0, 1, 2, 3] (F32) lies past the first request's
    64 KiB, between filler tensors of ones: its values must come from a later request."""
    import json
    import struct
    header = json.dumps({"fill": {"dtype": "F32", "shape": [20000], "data_offsets": [0, 80000]},
                         "t": {"dtype": "F32", "shape": [4], "data_offsets": [80000, 80016]},
                         "tail": {"dtype": "F32", "shape": [16], "data_offsets": [80016, 80080]}})
    header += " " * (-len(header) % 8)
    return (struct.pack("<Q", len(header)) + header.encode() + struct.pack("<20000f", *[1.0] * 20000)
            + struct.pack("<4f", 0, 1, 2, 3) + struct.pack("<16f", *[1.0] * 16))


FAR_FILE = far_tensor_file()


def lying_server(server, how):
    """Honest for the first request (the header); `how(first, last)` answers every later one:
    (claimed Content-Range first, last, the bytes sent)."""
    def answer(conn, request):
        first, last = asked_range(request)
        if first == 0:
            return partial(conn, first, last, body=FAR_FILE)
        claimed_first, claimed_last, data = how(first, last)
        conn.sendall(f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {claimed_first}-"
                     f"{claimed_last}/{len(FAR_FILE)}\r\nContent-Length: {len(data)}\r\n"
                     "Connection: close\r\n\r\n".encode() + data)
    return server(answer)


LIARS = {
    # The bytes of the file's start, said to be so: shown as [2.8e-43, 0.0, ...] if accepted.
    "from the start": lambda first, last: (0, last - first, FAR_FILE[:last - first + 1]),
    # The asked start, but up to the end of the file.
    "to the end": lambda first, last: (first, len(FAR_FILE) - 1, FAR_FILE[first:]),
    # The asked start, fewer bytes than asked, Content-Range matching them.
    "short": lambda first, last: (first, last - 1, FAR_FILE[first:last]),
    # One byte further on, as many bytes as asked.
    "shifted": lambda first, last: (first + 1, last + 1, FAR_FILE[first + 1:last + 2]),
}


@pytest.mark.parametrize("liar", sorted(LIARS))
@pytest.mark.parametrize("command", [["values"], ["stats"], ["stats", "--exact"]])
def test_cli_refuses_another_range_than_asked(server, capsys, liar, command):
    s = lying_server(server, LIARS[liar])
    assert main([*command, s.url, "t"]) == 3
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err   # no value was shown
    assert f"another range than the one asked for by {s.url}" in err
    # The range asked: t's 16 bytes, or a window of them and the filler's (the sampler's plan).
    assert "expected bytes " in err and "found Content-Range 'bytes " in err


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_read_many_refuses_another_range_than_asked_on_every_request(server, liar):
    s = lying_server(server, LIARS[liar])
    source = HttpSource(s.url)
    ranges = [(70_000, 16), (75_000, 8), (len(FAR_FILE) - 100, 16)]
    with pytest.raises(FormatError) as e:
        source.read_many(ranges)
    assert f"by {s.url}" in str(e.value) and "expected bytes 70,000-70,015" in str(e.value)
    honest_server = server(lambda conn, request: partial(conn, *asked_range(request), body=FAR_FILE))
    assert HttpSource(honest_server.url).read_many(ranges) == [FAR_FILE[o:o + n] for o, n in ranges]
