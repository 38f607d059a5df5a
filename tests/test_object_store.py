"""Checkpoints in object storage (s3://, and the routing of gs://, az://, hf://) through fsspec.

A local S3 server (moto, fixtures/object_store.py) started here holds the fixtures; the client is
pointed at it the way a user points tensorloupe at MinIO or R2, by AWS_ENDPOINT_URL, and every
name lookup of the process is checked to be 127.0.0.1's (no request leaves the machine). The
answers are compared with the same files opened locally, and with safetensors' own reading.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.errors import (FetchError, FormatError, TensorloupeError, UnreadableError,
                                UsageError)
from tensorloupe.source import objectstore

from object_store import S3Server

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "out"
BUCKET = "models"
DEMO_TENSOR = "model.layers.2.block_sparse_moe.experts.5.w3.weight"


@pytest.fixture(scope="module", autouse=True)
def no_network():
    """Every name lookup this module's tests make must be the local server's: nothing leaves the
    machine (not the real S3, not the instance metadata service, not the Hub)."""
    lookups = []
    real = socket.getaddrinfo

    def local_only(host, *args, **kw):
        lookups.append(host)
        if host not in ("127.0.0.1", "localhost"):
            raise OSError(f"test: a lookup of {host!r} would leave the machine")
        return real(host, *args, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket, "getaddrinfo", local_only)
        yield lookups
    assert set(lookups) <= {"127.0.0.1"}, lookups


@pytest.fixture(scope="module")
def s3(no_network):
    """The server with the fixtures uploaded, and the environment pointing at it."""
    import s3fs
    server = S3Server()
    demo = (OUT / "demo-moe.safetensors").read_bytes()
    files = {"one/small.safetensors": (OUT / "small.safetensors").read_bytes(),
             "one/tiny-llama.gguf": (OUT / "tiny-llama.gguf").read_bytes(),
             "demo/demo-moe.safetensors": demo, "lying/demo-moe.safetensors": demo,
             "empty/empty.safetensors": b""}
    files.update({f"sharded/{p.name}": p.read_bytes()
                  for p in (OUT / "sharded-moe").iterdir() if p.is_file()})
    server.upload(BUCKET, files)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in server.env.items():
            mp.setenv(key, value)
        s3fs.S3FileSystem.clear_instance_cache()   # made with this environment from here on
        yield server
        s3fs.S3FileSystem.clear_instance_cache()
    server.stop()
    assert "127.0.0.1" in no_network   # the client did go by name lookups, all of them local


def url(key: str) -> str:
    return f"s3://{BUCKET}/{key}"


def cli_json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def same_apart_from_where(remote: dict, local: dict, remote_dir: str, local_dir: Path) -> None:
    """Equal once the folder each was read from is taken out of every string (the file's name and
    the config.json each read are said with their folder or URL)."""
    def placed(value, where):
        text = json.dumps(value, sort_keys=True)
        return json.loads(text.replace(where.rstrip("/") + "/", "<folder>/"))
    assert placed(remote, remote_dir) == placed(local, str(local_dir.resolve()))


@pytest.mark.parametrize("key, local", [("one/small.safetensors", OUT / "small.safetensors"),
                                        ("one/tiny-llama.gguf", OUT / "tiny-llama.gguf")])
def test_inspect_json_of_an_object_equals_the_local_file(s3, capsys, key, local):
    remote = cli_json(capsys, "inspect", url(key))
    assert remote["tensor_count"] > 0 and not remote["errors"]
    same_apart_from_where(remote, cli_json(capsys, "inspect", str(local)), url(key.split("/")[0]),
                          local.parent)


@pytest.mark.parametrize("target", ["sharded/", "sharded/model.safetensors.index.json"])
def test_a_shard_set_by_its_prefix_or_its_index_equals_the_local_folder(s3, capsys, target):
    remote = cli_json(capsys, "inspect", url(target))
    local = cli_json(capsys, "inspect", str(OUT / "sharded-moe"))
    assert len(remote["files"]) == 3 and remote["tensor_count"] == local["tensor_count"]
    # config.json is read from beside the shards in the bucket, as from beside them on disk
    assert [s.rsplit("/", 1)[-1] for s in remote["architecture"]["sources"]] == \
        [s.rsplit("/", 1)[-1] for s in local["architecture"]["sources"]]
    same_apart_from_where(remote, local, url("sharded"), OUT / "sharded-moe")
    with tensorloupe.open(url(target)) as ckpt:     # the Python API takes the same URLs
        assert len(ckpt.tensors) == local["tensor_count"] and len(ckpt.sources) == 3


def test_values_of_a_tensor_equal_safetensors_reading(s3, capsys):
    with safe_open(OUT / "demo-moe.safetensors", framework="np") as f:
        expected = f.get_tensor(DEMO_TENSOR).ravel()
    start, count = 1000, 3000
    got = cli_json(capsys, "values", url("demo/demo-moe.safetensors"), DEMO_TENSOR,
                   "--start", str(start), "--count", str(count))
    assert got["values"] == expected[start:start + count].astype("float64").tolist()


def test_stats_health_diff_and_tokens_take_the_url(s3, capsys):
    demo, small = "demo/demo-moe.safetensors", "one/small.safetensors"
    for key, argv in ((demo, ["stats", "{}", DEMO_TENSOR]), (small, ["health", "{}"])):
        remote = cli_json(capsys, *[a.format(url(key)) for a in argv])
        local = cli_json(capsys, *[a.format(OUT / key.split("/")[1]) for a in argv])
        same_apart_from_where(remote, local, url(key.split("/")[0]), OUT)
    diff = cli_json(capsys, "diff", url(small), str(OUT / "small.safetensors"))
    assert diff == cli_json(capsys, "diff", str(OUT / "small.safetensors"),
                            str(OUT / "small.safetensors"))
    remote = cli_json(capsys, "tokens", url("one/tiny-llama.gguf"))
    assert remote == cli_json(capsys, "tokens", str(OUT / "tiny-llama.gguf"))
    # a quantised GGUF tensor's values (the local reading is gguf-py's, tests/test_gguf.py)
    argv = ["values", "{}", "blk.0.attn_q.weight", "--start", "4000", "--count", "600"]
    remote = cli_json(capsys, *[a.format(url("one/tiny-llama.gguf")) for a in argv])
    assert remote == cli_json(capsys, *[a.format(OUT / "tiny-llama.gguf") for a in argv])


def test_the_api_opens_an_object_reading_its_header_only(s3):
    size = (OUT / "demo-moe.safetensors").stat().st_size
    mark = s3.counter.mark()
    with tensorloupe.open(url("demo/demo-moe.safetensors")) as ckpt:
        requests, sent = s3.counter.since(mark)
        assert ckpt.name == "demo-moe.safetensors" and ckpt.size == size
        assert len(ckpt.tensors) == 127
        # one HEAD for the size, one 64 KiB ranged GET for the header
        assert requests <= 3 and sent <= 1 << 16 and ckpt.bytes_read() <= 1 << 16
        local = tensorloupe.open(OUT / "demo-moe.safetensors")
        mark = s3.counter.mark()
        remote_sample = tensorloupe.sample(ckpt.tensor(DEMO_TENSOR), 4096)
        requests, sent = s3.counter.since(mark)
        assert remote_sample.values == tensorloupe.sample(local.tensor(DEMO_TENSOR), 4096).values
        assert remote_sample.stats == tensorloupe.sample(local.tensor(DEMO_TENSOR), 4096).stats
        # the sample's windows are ranged reads side by side: bounded, never the whole object
        assert 1 <= requests <= 64 and sent < size / 20
        local.close()


def test_a_vectored_read_runs_side_by_side_at_most_concurrency_at_once(s3):
    data = (OUT / "demo-moe.safetensors").read_bytes()
    ranges = [(200_000 + i * 100_000, 4096 + i) for i in range(32)]   # far apart: 32 requests
    mark = s3.counter.mark()
    source = objectstore.ObjectStoreSource(url("demo/demo-moe.safetensors"))
    # opening: the size (HEAD) and the first 64 KiB, asked side by side
    assert s3.counter.since(mark) == (2, 1 << 16) and source.reads == 1
    s3.counter.most_in_flight = 0
    mark = s3.counter.mark()
    assert source.read_many(ranges) == [data[o:o + n] for o, n in ranges]
    assert s3.counter.since(mark) == (32, sum(n for _, n in ranges))
    assert 2 <= s3.counter.most_in_flight <= objectstore.CONCURRENCY
    assert (source.reads, source.bytes_read) == (33, (1 << 16) + sum(n for _, n in ranges))
    # ranges that touch are one request; empty ones none; the first 64 KiB are known already
    mark = s3.counter.mark()
    assert source.read_many([(300_000, 10), (300_010, 10), (50, 0), (10, 5)]) == \
        [data[300_000:300_010], data[300_010:300_020], b"", data[10:15]]
    assert s3.counter.since(mark) == (1, 20)


@pytest.mark.parametrize("lie, found", [("short", "65,526 bytes"), ("whole", "7,403,624 bytes")])
def test_a_reply_of_another_length_is_refused_naming_the_url_and_the_range(s3, lie, found):
    key = f"/{BUCKET}/lying/demo-moe.safetensors"
    if lie == "short":
        s3.counter.short[key] = 10
    else:
        s3.counter.whole.add(key)
    try:
        with pytest.raises(FormatError, match="another range than the one asked for by "
                           r"s3://models/lying/demo-moe\.safetensors") as caught:
            tensorloupe.open(url("lying/demo-moe.safetensors"))
    finally:
        s3.counter.short.clear()
        s3.counter.whole.clear()
    assert f"expected bytes 0-65,535; found {found}" in str(caught.value)


def test_a_store_that_never_answers_fails_within_the_deadline(s3):
    import time
    key = f"/{BUCKET}/lying/demo-moe.safetensors"
    source = objectstore.ObjectStoreSource(url("lying/demo-moe.safetensors"), timeout=1)
    s3.counter.stall.add(key)
    start = time.monotonic()
    try:
        with pytest.raises(FetchError, match=r"^s3://models/lying/demo-moe\.safetensors: the "
                           "store did not answer within 1 s$"):
            source.read(100_000, 100)     # (the first 64 KiB came with the size, at open)
    finally:
        s3.counter.stall.clear()
        s3.counter.release.set()
    assert time.monotonic() - start < 5


def test_a_missing_object_a_prefix_without_slash_and_an_empty_prefix(s3, capsys):
    with pytest.raises(UnreadableError, match="no such object in the store"):
        tensorloupe.open(url("one/nope.safetensors"))
    with pytest.raises(UnreadableError, match="end it with '/'"):
        tensorloupe.open(url("sharded"))
    with pytest.raises(UsageError, match="several checkpoints"):
        tensorloupe.open(url("one/"))
    with pytest.raises(UnreadableError, match="nothing is stored under this prefix"):
        tensorloupe.open(url("nothing-here/"))
    assert main(["inspect", url("one/nope.safetensors")]) == 3
    assert "s3://models/one/nope.safetensors: no such object" in capsys.readouterr().err


def test_an_empty_object_is_the_readers_error_as_an_empty_file_is(s3, tmp_path):
    (tmp_path / "empty.safetensors").write_bytes(b"")
    with pytest.raises(TensorloupeError) as local:
        tensorloupe.open(tmp_path / "empty.safetensors")
    with pytest.raises(TensorloupeError) as remote:
        tensorloupe.open(url("empty/empty.safetensors"))
    assert type(remote.value) is type(local.value)
    assert str(remote.value) == str(local.value).replace(str(tmp_path / "empty.safetensors"),
                                                          url("empty/empty.safetensors"))


def test_a_bucket_that_does_not_exist(s3):
    with pytest.raises(UnreadableError, match="no such object"):
        tensorloupe.open("s3://no-such-bucket/model.safetensors")


@pytest.mark.parametrize("given, protocol, package", [
    ("s3://b/k/m.safetensors", "s3", "s3fs"), ("gs://b/k/m.safetensors", "gcs", "gcsfs"),
    ("gcs://b/m.gguf", "gcs", "gcsfs"), ("az://container/m.gguf", "abfs", "adlfs"),
    ("abfs://container/m.gguf", "abfs", "adlfs"),
    ("hf://org/model/m.safetensors", "hf", "huggingface_hub")])
def test_each_scheme_routes_to_its_fsspec_protocol(given, protocol, package):
    from fsspec.registry import known_implementations
    backend = objectstore.backend_of(given)
    assert (backend.protocol, backend.package) == (protocol, package)
    assert tensorloupe.source.is_url(given)
    assert known_implementations[protocol]["class"].startswith(package + ".")


def test_hf_urls_use_huggingface_hubs_filesystem_without_a_request():
    from huggingface_hub import HfFileSystem
    fs, path = objectstore.filesystem("hf://org/model/model.safetensors")
    assert isinstance(fs, HfFileSystem) and path == "org/model/model.safetensors"


@pytest.mark.parametrize("given, command", [
    ("gs://bucket/m.safetensors", "pip install fsspec gcsfs"),
    ("az://container/m.safetensors", "pip install fsspec adlfs")])
def test_a_missing_backend_says_which_pip_install(given, command, capsys):
    assert main(["inspect", given]) == 3
    err = capsys.readouterr().err
    assert f"needs the {objectstore.backend_of(given).package} package, which is not installed: " \
           f"{command}" in err
    assert "Traceback" not in err


def test_without_fsspec_the_extra_to_install_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)   # `import fsspec` raises ImportError
    with pytest.raises(UnreadableError, match=r"needs the fsspec package, which is not installed: "
                       r"pip install 'tensorloupe\[remote\]'"):
        tensorloupe.open("s3://bucket/m.safetensors")


def test_an_anonymous_client_of_a_private_bucket_is_refused_access(s3):
    with pytest.raises(FetchError, match=r"^s3://models/one/small\.safetensors: the store "
                       "refuses access"):
        objectstore.ObjectStoreSource(url("one/small.safetensors"), storage_options={"anon": True})


def test_a_store_error_is_one_line_naming_the_url_and_what_failed():
    error = objectstore.failed("s3://b/m.gguf", RuntimeError("boom"))
    assert str(error) == "s3://b/m.gguf: the store failed to read the object: RuntimeError: boom"


def test_local_files_and_http_urls_never_import_fsspec(demo_path):
    # fsspec and the backends cost an import only when an object URL is opened
    script = (f"import tensorloupe, sys\ntensorloupe.open({str(demo_path)!r}).close()\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in "
              "('fsspec', 's3fs', 'aiobotocore', 'botocore', 'huggingface_hub')))")
    pylib = Path(__file__).resolve().parent.parent / "pylib"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(pylib)}, check=True)
    assert done.stdout.strip() == "[]"
