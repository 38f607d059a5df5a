"""What the page is given, in CPython: dropped files, folders and URLs grouped into checkpoints
(tensorloupe.web.files), URLs read through the browser's byte source (tensorloupe.web.remote)
with a urllib transport standing in for synchronous XHR, and the handlers that open them."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

import tensorloupe
from tensorloupe.errors import FormatError, UsageError
from tensorloupe.source.remote import HttpSource
from tensorloupe.source.http_reply import range_refused
from tensorloupe.web import remote
from tensorloupe.web.files import given, group
from tensorloupe.web.handlers import Session

import build  # (the app's Range-capable server)


def entries(*specs, folder=False):
    """group() of files given as rel paths (mounted under /mnt/1)."""
    files = [{"rel": rel, "path": f"/mnt/1/{rel.lstrip('/')}", "size": 10, "folder": folder}
             for rel in specs]
    return [(e["kind"], e["name"], e["files"], e["config"]) for e in group(given(files))]


# --- grouping ----------------------------------------------------------------------------------

def test_shards_index_and_config_picked_together_are_one_entry():
    got = entries("model-00002-of-00003.safetensors", "config.json", "model-00001-of-00003.safetensors",
                  "model.safetensors.index.json", "model-00003-of-00003.safetensors")
    assert got == [("set", "model-*-of-00003.safetensors",
                    ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                     "model-00003-of-00003.safetensors", "model.safetensors.index.json"],
                    "/mnt/1/config.json")]


def test_a_folder_lists_only_what_can_be_a_checkpoint():
    got = entries("/m/README.md", "/m/config.json", "/m/model-00001-of-00002.safetensors",
                  "/m/model-00002-of-00002.safetensors", "/m/tokenizer.json", "/m/.cache/x.bin",
                  "/m/training_args.bin", "/m/sub/other.gguf", folder=True)
    # training_args.bin is the training state of the folder's one model: it goes with it
    # (opening/training.py); the set opens as the model plus its training state
    assert got == [("set", "model-*-of-00002.safetensors + training state",
                    ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                     "training_args.bin"], "/mnt/1/m/config.json"),
                   ("file", "other.gguf", ["other.gguf"], None)]    # another folder: not its config


def test_tokenizer_files_picked_with_a_model_go_with_it():
    # Picked together (no folder): the tokenizer files are not entries; the worker finds them
    # beside the model (tokens.available). Alone, they are listed (and refused when opened).
    assert entries("model.safetensors", "tokenizer.json", "tokenizer_config.json", "config.json") == [
        ("file", "model.safetensors", ["model.safetensors"], "/mnt/1/config.json")]
    assert entries("a/tokenizer.json", "b/model.gguf") == [
        ("file", "tokenizer.json", ["tokenizer.json"], None), ("file", "model.gguf", ["model.gguf"], None)]


def test_hidden_files_and_folders_in_a_folder_are_skipped():
    assert entries("/m/.model.safetensors", "/m/.git/lfs/x.bin", "/m/a.safetensors", folder=True) == [
        ("file", "a.safetensors", ["a.safetensors"], None)]
    # The dropped folder's own name may be hidden (~/.cache/huggingface/.../snapshots/<hash>).
    assert entries("/.snap/a.safetensors", folder=True) == [("file", "a.safetensors", ["a.safetensors"], None)]


def test_unrelated_files_stay_separate_in_their_order():
    got = entries("model.pt", "model-00002-of-00003.safetensors", "tiny.gguf", "notes.dat")
    assert [(kind, name) for kind, name, _, _ in got] == [
        ("file", "model.pt"), ("file", "model-00002-of-00003.safetensors"), ("file", "tiny.gguf"),
        ("file", "notes.dat")]


def test_split_gguf_and_two_sets_at_once():
    got = entries("a-00002-of-00002.gguf", "b-00001-of-00002.safetensors", "a-00001-of-00002.gguf",
                  "b-00002-of-00002.safetensors")
    assert [(kind, name, len(files)) for kind, name, files, _ in got] == [
        ("set", "a-*-of-00002.gguf", 2), ("set", "b-*-of-00002.safetensors", 2)]


def test_a_config_json_alone_is_listed_as_before():
    assert entries("config.json") == [("file", "config.json", ["config.json"], None)]
    assert entries("/m/config.json", "/m/README.md", folder=True) == []


def test_urls_group_by_their_folder():
    base = "https://host/org/model/resolve/main"
    urls = [f"{base}/model-0000{i}-of-00002.safetensors?download=true" for i in (1, 2)] + [f"{base}/config.json"]
    got = group(given([{"rel": u, "path": u} for u in urls]))
    assert [(e["name"], e["paths"], e["config"]) for e in got] == [
        ("model-*-of-00002.safetensors", urls[:2], urls[2])]


# --- the browser's URL source, judged on the worker's probe -------------------------------------

def fake(status=206, reason="Partial Content", content_range="bytes 0-0/100", data=b"x" * 100):
    def transport(url, first, last):
        return remote.Reply(status, reason, content_range and f"bytes {first}-{last}/100", data[first:last + 1])
    return transport


def test_the_probe_decides_like_the_cli():
    url = "https://host/m.safetensors"
    with pytest.raises(UsageError) as e:
        remote.XhrSource(url, {"status": 200, "reason": "OK"})
    assert str(e.value) == str(range_refused("m.safetensors", 200))
    assert "does not answer HTTP Range requests" in str(e.value)
    with pytest.raises(UsageError, match="the server answered 404 Not Found"):
        remote.XhrSource(url, {"status": 404, "reason": ""})      # HTTP/2: no reason phrase
    with pytest.raises(UsageError, match=r"cannot fetch https://host/m.safetensors: .*CORS"):
        remote.XhrSource(url, {"error": "Failed to fetch"})
    with pytest.raises(UsageError, match="Access-Control-Expose-Headers"):
        remote.XhrSource(url, {"status": 206, "total": None})
    assert remote.XhrSource(url, {"status": 416}).size == 0
    source = remote.XhrSource(url, {"status": 206, "total": 100}, transport=fake())
    assert source.size == 100 and source.read(10, 5) == b"xxxxx" and source.reads == 1


def test_reads_refuse_what_the_probe_would_have_refused():
    url = "https://host/m.safetensors"
    with pytest.raises(UsageError, match="does not answer HTTP Range"):
        remote.XhrSource(url, {"status": 206, "total": 100}, transport=fake(status=200)).read(0, 4)
    with pytest.raises(UsageError, match="the server answered 503"):
        remote.XhrSource(url, {"status": 206, "total": 100}, transport=fake(status=503, reason="")).read(0, 4)

    def shifted(url, first, last):
        return remote.Reply(206, "", f"bytes {first + 1}-{last + 1}/100", b"y" * (last - first + 1))
    with pytest.raises(FormatError, match="another range"):
        remote.XhrSource(url, {"status": 206, "total": 100}, transport=shifted).read(0, 4)

    def offline(url, first, last):
        raise remote.NetworkFailure("NetworkError")
    with pytest.raises(UsageError, match="cannot fetch .*CORS"):
        remote.XhrSource(url, {"status": 206, "total": 100}, transport=offline).read(0, 4)
    hidden = remote.XhrSource(url, {"status": 206, "total": 100}, transport=fake(content_range=None))
    assert hidden.read(0, 3) == b"xxx"       # CORS may hide Content-Range: then only the length


DATA = bytes(range(100))
URL = "https://host/m.safetensors"


def replying(how):
    """A transport answering bytes first..last with how(first, last) -> (Content-Range, bytes)."""
    def transport(url, first, last):
        return remote.Reply(206, "", *how(first, last))
    return transport


PAGE_LIARS = {
    # Issue 25: the right start, the wrong length, were taken as the asked bytes (cut to length,
    # or short); bytes from the start said to be so were already refused, and still are.
    "from the start": lambda a, b: (f"bytes 0-{b - a}/100", DATA[:b - a + 1]),
    "to the end": lambda a, b: (f"bytes {a}-99/100", DATA[a:]),
    "short": lambda a, b: (f"bytes {a}-{b - 1}/100", DATA[a:b]),
    "more bytes than said": lambda a, b: (f"bytes {a}-{b}/100", DATA[a:b + 4]),
    "another size": lambda a, b: (f"bytes {a}-{b}/200", DATA[a:b + 1]),
    "hidden and longer": lambda a, b: (None, DATA[a:b + 4]),
}


@pytest.mark.parametrize("liar", sorted(PAGE_LIARS))
def test_every_page_read_is_checked_against_the_range_asked(liar):
    probe = {"status": 206, "total": 100}
    source = remote.XhrSource(URL, probe, transport=replying(PAGE_LIARS[liar]))
    with pytest.raises(FormatError, match="another range than the one asked for by "
                       "https://host/m.safetensors|the file changed on the server") as e:
        source.read(40, 8)
    assert "bytes 40-47" in str(e.value) or "200 bytes" in str(e.value)

    def at_once(url, ranges):      # the JSPI path: every range fetched together
        return [replying(PAGE_LIARS[liar])(url, a, b) for a, b in ranges]
    source = remote.XhrSource(URL, probe, many=at_once)
    with pytest.raises(FormatError, match="another range|the file changed"):
        source.read_many([(10, 4), (40, 8)])
    honest = remote.XhrSource(URL, probe, transport=replying(lambda a, b: (f"bytes {a}-{b}/100", DATA[a:b + 1])))
    assert honest.read(40, 8) == DATA[40:48]


@pytest.mark.parametrize("claimed, head", [
    ("bytes 10-59/100", DATA[10:60]),      # the probe's bytes from byte 10 taken as the file's start
    ("bytes 0-49/100", DATA[:40]),         # fewer bytes than its Content-Range says
    ("bytes 0-39/200", DATA[:40]),         # another file size than the probe's
])
def test_the_probes_bytes_are_checked_against_its_content_range(claimed, head):
    probe = {"status": 206, "total": 100, "contentRange": claimed, "head": head}
    with pytest.raises(FormatError, match="another range than the one asked for by "
                       "https://host/m.safetensors|the file changed"):
        remote.XhrSource(URL, probe)
    good = remote.XhrSource(URL, {**probe, "contentRange": "bytes 0-49/100", "head": DATA[:50]})
    assert good.read(0, 50) == DATA[:50] and good.reads == 1
    # a size given as * (the worker then asked HEAD for it): the head's bytes are still checked
    unsized = remote.XhrSource(URL, {**probe, "contentRange": "bytes 0-49/*", "head": DATA[:50]})
    assert unsized.read(0, 50) == DATA[:50]


# --- the handlers, with urllib standing in for synchronous XHR ----------------------------------

def urllib_range(url, first, last):
    request = urllib.request.Request(url, headers={"Range": f"bytes={first}-{last}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return remote.Reply(response.status, response.reason, response.headers.get("Content-Range"),
                                response.read())
    except urllib.error.HTTPError as e:
        return remote.Reply(e.code, e.reason, None, b"")


def probe(url):
    """What worker.mjs's probe reports, made with urllib."""
    reply = urllib_range(url, 0, 0)
    total = remote.CONTENT_RANGE.match(reply.content_range or "")
    return {"status": reply.status, "reason": reply.reason, "total": int(total[3]) if total else None}


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    import shard_files
    return shard_files.write_all(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def served(model_folder):
    server = build.make_server(model_folder["sharded_folder"], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_open_paths_with_a_config(model_folder):
    s = Session()
    paths = [str(model_folder[k]) for k in ("shard_2", "shard_1", "shard_3", "shard_index")]
    result, _ = s.handle("open", {"paths": paths, "config": str(model_folder["shard_config"])})
    assert result["tensor_count"] == 48 and result["warnings"] == []
    found = s.handle("model_details", {})[0]["moe"]
    assert (found["top_k"], found["top_k_source"]) == (3, "config.json num_experts_per_tok")
    result, _ = s.handle("open", {"paths": paths[:1]})
    assert result["warnings"][0].startswith("part 1 of 3 (model-00001-of-00003.safetensors) is missing")


def test_a_broken_config_is_a_warning_not_a_failure(model_folder, tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    s = Session()
    result, _ = s.handle("open", {"paths": [str(model_folder["shard_1"])],
                                  "config": str(tmp_path / "config.json")})
    assert any("config.json" in w and "not valid JSON" in w and "top-k is not taken from it" in w
               for w in result["warnings"])
    assert s.handle("model_details", {})[0]["moe"]["top_k"] is None


def test_open_url_reads_shards_by_ranges(served, model_folder, monkeypatch):
    monkeypatch.setattr(remote, "xhr_range", urllib_range)
    names = ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
             "model-00003-of-00003.safetensors", "model.safetensors.index.json"]
    urls = [f"{served}/{n}" for n in names]
    config = f"{served}/config.json"
    s = Session()
    result, _ = s.handle("open_url", {"urls": urls, "config": config,
                                      "probes": {u: probe(u) for u in urls + [config]}})
    assert result["tensor_count"] == 48 and s.handle("model_details", {})[0]["moe"]["top_k"] == 3
    name = "model.layers.2.mlp.experts.3.down_proj.weight"
    local = tensorloupe.open([str(model_folder[k]) for k in ("shard_1", "shard_2", "shard_3")])
    got, _ = s.handle("tensor", {"name": name})
    assert got["sample"]["stats"] == tensorloupe.sample(local.tensor(name)).stats.to_json()
    # The same refusal as the CLI for a missing file.
    missing = f"{served}/nope.safetensors"
    with pytest.raises(UsageError) as e:
        s.handle("open_url", {"urls": [missing], "probes": {missing: probe(missing)}})
    with pytest.raises(UsageError) as cli:
        HttpSource(missing)
    assert str(e.value) == str(cli.value)
    assert s.checkpoint.name == "model-{00001..00003}-of-00003.safetensors"      # still open


def test_group_op():
    result, _ = Session().handle("group", {"files": [{"rel": "a-00001-of-00002.gguf", "path": "/x/a1"},
                                                     {"rel": "a-00002-of-00002.gguf", "path": "/x/a2"}]})
    assert json.loads(json.dumps(result))["entries"][0]["paths"] == ["/x/a1", "/x/a2"]


def test_compare_open_url_reads_b_by_ranges_and_needs_its_probes(served, model_folder, monkeypatch):
    monkeypatch.setattr(remote, "xhr_range", urllib_range)
    urls = [f"{served}/model-0000{n}-of-00003.safetensors" for n in (1, 2, 3)]
    s = Session()
    s.handle("open", {"paths": [str(model_folder[k]) for k in ("shard_1", "shard_2", "shard_3")]})
    other, _ = s.handle("compare_open_url", {"urls": urls, "probes": {u: probe(u) for u in urls}})
    assert other["file"] == "model-{00001..00003}-of-00003.safetensors"
    # Without the probes (and no JSPI to await them, as here in CPython) a URL is refused readably.
    with pytest.raises(UsageError, match="the worker did not probe this URL"):
        s.handle("compare_open_url", {"urls": urls, "probes": None})
    assert s.other.name == other["file"]      # B is unchanged
