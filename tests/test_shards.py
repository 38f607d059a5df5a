"""Several files opened as one checkpoint: split GGUF and sharded safetensors, in any order, with
missing parts named."""

import json
import threading
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from safetensors.numpy import save_file

import gguf_files as fx  # noqa: E402

import tensorloupe  # noqa: E402
import tensorloupe.source  # noqa: E402
from tensorloupe.opening import shards  # noqa: E402
from tensorloupe.errors import FormatError, UsageError  # noqa: E402
from tensorloupe.formats.gguf import reader as tg  # noqa: E402

N_PARTS = 3


def write_split(directory: Path, stem: str = "tiny") -> tuple[list[Path], dict[str, np.ndarray]]:
    """A 7-tensor model split 3 ways by gguf-py (split.* keys written by GGUFWriter itself)."""
    rng = np.random.default_rng(11)
    w = GGUFWriter(directory / f"{stem}.gguf", "llama", split_max_tensors=3)
    w.add_name("split-test")
    w.add_block_count(2)
    w.add_token_list([f"tok{i}" for i in range(1500)])
    arrays = {}
    for name, qtype, shape in (("token_embd.weight", Q.F16, (16, 32)),
                               ("blk.0.attn_q.weight", Q.Q8_0, (32, 32)),
                               ("blk.0.ffn_norm.weight", Q.F32, (32,)),
                               ("blk.1.attn_q.weight", Q.Q8_0, (32, 32)),
                               ("blk.1.ffn_norm.weight", Q.F32, (32,)),
                               ("output_norm.weight", Q.F32, (32,)),
                               ("output.weight", Q.Q4_0, (16, 32))):
        arrays[name] = fx.quantized(qtype, shape, rng)
        w.add_tensor(name, arrays[name], raw_dtype=None if qtype in fx.PLAIN_NUMPY else qtype)
    fx.finish(w)
    paths = [directory / f"{stem}-{i:05d}-of-{N_PARTS:05d}.gguf" for i in range(1, N_PARTS + 1)]
    assert all(p.exists() for p in paths)
    return paths, arrays


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    return write_split(tmp_path_factory.mktemp("split"))


def test_all_parts_in_shuffled_order_make_one_checkpoint(split):
    paths, _ = split
    ckpt = tensorloupe.open([str(paths[2]), str(paths[0]), str(paths[1])])
    stem = paths[0].name.split("-00001-of-")[0]
    assert ckpt.format == "gguf" and ckpt.name == f"{stem}-{{00001..00003}}-of-00003.gguf"
    assert ckpt.files == [p.name for p in paths] and not ckpt.warnings
    readers = [gguf.GGUFReader(p) for p in paths]
    expected = [(path, t) for path, r in zip(paths, readers) for t in r.tensors]
    assert [t.name for t in ckpt.tensors] == [t.name for _, t in expected]
    for path, ref in expected:
        t = ckpt.tensor(ref.name)
        assert t.source.name == path.name and t.offset == ref.data_offset
        flat = gguf.quants.dequantize(ref.data, ref.tensor_type).reshape(-1)
        np.testing.assert_array_equal(np.float32(tensorloupe.values(t, 0, t.numel)), flat)
    assert len({id(t.source) for t in ckpt.tensors}) == N_PARTS
    assert ckpt.size == sum(p.stat().st_size for p in paths)
    shards = ckpt.extras["shards"]
    assert shards["count"] == N_PARTS and shards["missing"] == []
    assert [p["name"] for p in shards["parts"]] == [p.name for p in paths]
    assert [p["no"] for p in shards["parts"]] == [1, 2, 3]
    assert ckpt.metadata["general.name"] == "split-test"
    card = ckpt.extras["model_card"]
    assert card["Parameters"] == sum(int(t.n_elements) for _, t in expected) and card["Tensors"] == 7
    # the vocabulary lives in part 1, whatever position it was given in
    assert tg.read_array(ckpt, "tokenizer.ggml.tokens", 1498, 5) == ["tok1498", "tok1499"]


def test_a_missing_part_is_named(split):
    paths, arrays = split
    ckpt = tensorloupe.open([str(paths[2]), str(paths[0])])
    assert ckpt.warnings == [f"part 2 of 3 ({paths[1].name}) is missing: its tensors are not shown"]
    assert ckpt.extras["shards"]["missing"] == [paths[1].name]
    assert [p["no"] for p in ckpt.extras["shards"]["parts"]] == [1, 3]
    assert len(ckpt.tensors) == 4
    out = ckpt.tensor("output.weight")
    assert out.source.name == paths[2].name and out.dtype == "Q4_0"


def test_missing_first_part_still_opens(split):
    paths, _ = split
    ckpt = tensorloupe.open([str(paths[1]), str(paths[2])])
    assert f"part 1 of 3 ({paths[0].name}) is missing" in ckpt.warnings[0]
    assert "general.name" not in ckpt.metadata and ckpt.metadata["split.count"] == 3


def test_one_part_alone_says_it_is_one_of_several(split):
    paths, _ = split
    ckpt = tensorloupe.open(paths[1])
    assert ckpt.warnings == ["this is part 2 of 3 of a split model: open all parts together to see "
                             "every tensor"]


def test_the_same_part_twice(split):
    paths, _ = split
    with pytest.raises(UsageError, match="part 1 of 3 was given twice"):
        tensorloupe.open([str(paths[0]), str(paths[0]), str(paths[1])])


def test_parts_of_different_splits(split, tmp_path):
    paths, _ = split
    w = GGUFWriter(tmp_path / "other.gguf", "llama", split_max_tensors=1)
    for i in range(2):
        w.add_tensor(f"t{i}", np.ones(4, dtype=np.float32))
    fx.finish(w)
    with pytest.raises(FormatError, match="disagree on split.count"):
        tensorloupe.open([str(paths[0]), str(tmp_path / "other-00002-of-00002.gguf")])


def test_a_plain_gguf_among_parts(split, tmp_path):
    paths, _ = split
    plain = tmp_path / "plain.gguf"
    w = GGUFWriter(plain, "llama")
    w.add_tensor("x", np.ones(4, dtype=np.float32))
    fx.finish(w)
    with pytest.raises(FormatError, match="not part of a split GGUF"):
        tensorloupe.open([str(paths[0]), str(plain)])
    assert tensorloupe.open([str(plain)]).tensor("x").numel == 4


def test_one_tensor_in_two_parts(tmp_path):
    parts = []
    for no in range(2):
        path = tmp_path / f"dup-{no + 1:05d}-of-00002.gguf"
        w = GGUFWriter(path, "llama")
        w.add_uint16("split.no", no)
        w.add_uint16("split.count", 2)
        w.add_tensor("same", np.ones(4, dtype=np.float32))
        fx.finish(w)
        parts.append(str(path))
    with pytest.raises(FormatError, match="tensor 'same' is in two parts"):
        tensorloupe.open(parts)


# --- sharded safetensors ------------------------------------------------------------------------------

def write_shards(directory: Path, with_index: bool = True):
    rng = np.random.default_rng(3)
    shards = {}
    weight_map = {}
    for no in range(1, 4):
        name = f"model-{no:05d}-of-00003.safetensors"
        tensors = {f"layer{no}.{k}": rng.standard_normal((4, 8)).astype(np.float32) for k in "ab"}
        save_file(tensors, directory / name, metadata={"format": "pt"})
        shards[name] = tensors
        weight_map.update({k: name for k in tensors})
    total = sum(v.nbytes for t in shards.values() for v in t.values())
    index = directory / "model.safetensors.index.json"
    if with_index:
        index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return [directory / n for n in shards], index, shards


def test_sharded_safetensors_with_index_in_any_order(tmp_path):
    paths, index, shards = write_shards(tmp_path)
    ckpt = tensorloupe.open([str(paths[2]), str(index), str(paths[0]), str(paths[1])])
    assert ckpt.format == "safetensors" and not ckpt.warnings
    assert [t.name for t in ckpt.tensors] == [k for s in shards.values() for k in s]
    for tensors in shards.values():
        for name, array in tensors.items():
            assert tensorloupe.values(ckpt.tensor(name), 0, 32) == array.reshape(-1).tolist()
    assert ckpt.extras["shards"]["count"] == 3 and ckpt.extras["index"]["name"] == index.name
    assert ckpt.metadata == {"format": "pt"}


def test_sharded_safetensors_missing_shard_named_by_the_index(tmp_path):
    paths, index, _ = write_shards(tmp_path)
    ckpt = tensorloupe.open([str(index), str(paths[0]), str(paths[2])])
    assert ckpt.warnings == ["part 2 of 3 (model-00002-of-00003.safetensors) is missing: its "
                             "tensors are not shown"]
    assert ckpt.extras["shards"]["missing"] == ["model-00002-of-00003.safetensors"]
    assert len(ckpt.tensors) == 4


def test_sharded_safetensors_missing_shard_named_by_the_file_names(tmp_path):
    paths, _, _ = write_shards(tmp_path, with_index=False)
    ckpt = tensorloupe.open([str(paths[2]), str(paths[1])])
    assert ckpt.warnings == ["part 1 of 3 (model-00001-of-00003.safetensors) is missing: its "
                             "tensors are not shown"]
    assert [p["no"] for p in ckpt.extras["shards"]["parts"]] == [2, 3]


def test_index_that_disagrees_with_the_shards(tmp_path):
    paths, index, _ = write_shards(tmp_path)
    data = json.loads(index.read_text())
    data["weight_map"]["layer1.a"] = "model-00002-of-00003.safetensors"
    data["weight_map"]["ghost"] = "model-00003-of-00003.safetensors"
    index.write_text(json.dumps(data))
    ckpt = tensorloupe.open([str(index)] + [str(p) for p in paths])
    assert "tensor 'layer1.a' is in model-00001-of-00003.safetensors but the index says " \
           "model-00002-of-00003.safetensors" in ckpt.warnings
    assert any("1 tensor the index lists is in none of the shards, e.g. 'ghost'" in w
               for w in ckpt.warnings)


def test_broken_index_and_mixed_formats(tmp_path, split):
    paths, index, _ = write_shards(tmp_path)
    index.write_text("{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        tensorloupe.open([str(index), str(paths[0])])
    with pytest.raises(FormatError, match="different formats"):
        tensorloupe.open([str(paths[0]), str(split[0][0])])


def test_index_warnings_in_tensor_order(tmp_path):
    # The names are compared as sets; the warnings still come in the shards' tensor order.
    paths, index, _ = write_shards(tmp_path)
    data = json.loads(index.read_text())
    del data["weight_map"]["layer1.b"]
    data["weight_map"]["layer3.a"] = "model-00001-of-00003.safetensors"
    del data["weight_map"]["layer1.a"]
    data["metadata"]["total_size"] += 1
    index.write_text(json.dumps(data))
    ckpt = tensorloupe.open([str(index)] + [str(p) for p in paths])
    assert ckpt.warnings == [
        "tensor 'layer1.a' in model-00001-of-00003.safetensors is not in the index",
        "tensor 'layer1.b' in model-00001-of-00003.safetensors is not in the index",
        "tensor 'layer3.a' is in model-00003-of-00003.safetensors but the index says "
        "model-00001-of-00003.safetensors",
        f"the index's total_size is {data['metadata']['total_size']} bytes but the tensors hold "
        f"{data['metadata']['total_size'] - 1}"]


def test_one_tensor_in_two_shards(tmp_path):
    for no in (1, 2):
        save_file({"same": np.ones(4, dtype=np.float32), f"own{no}": np.ones(2, dtype=np.float32)},
                  tmp_path / f"model-{no:05d}-of-00002.safetensors")
    with pytest.raises(FormatError, match="tensor 'same' is in two parts") as e:
        tensorloupe.open(sorted(str(p) for p in tmp_path.iterdir()))
    assert e.value.found == "model-00001-of-00002.safetensors and model-00002-of-00002.safetensors"


# --- opening and reading each part in one task (shards.open_each) --------------------------------

def test_each_part_is_read_as_soon_as_it_is_open(tmp_path):
    # Part 2 cannot open until part 1's header has been read: opening every part first and
    # reading them after would never get there (the wait gives up after 30 s).
    paths, _, _ = write_shards(tmp_path, with_index=False)
    urls = [f"http://example.test/{p.name}" for p in paths[:2]]
    first_read = threading.Event()

    class Watched(tensorloupe.source.base.MemorySource):
        def _read(self, offset, n):
            first_read.set()
            return super()._read(offset, n)

    def open_one(url):
        name = url.rsplit("/", 1)[1]
        if name == paths[1].name:
            assert first_read.wait(30), "part 1 was not read before part 2 was opened"
            return tensorloupe.source.base.MemorySource((tmp_path / name).read_bytes(), name)
        return Watched((tmp_path / name).read_bytes(), name)
    ckpt = shards.open_each(urls, open_one)
    assert [p["name"] for p in ckpt.extras["shards"]["parts"]] == [p.name for p in paths[:2]]


def test_open_errors_come_before_read_errors_and_every_source_is_closed(tmp_path):
    paths, index, _ = write_shards(tmp_path)
    index.write_text("{not json")
    opened = []

    class Closing(tensorloupe.source.base.MemorySource):
        closed = False

        def close(self):
            self.closed = True

    def open_one(target):
        if target.endswith("00003-of-00003.safetensors"):
            raise UsageError("cannot open the third", file=target)
        opened.append(Closing(Path(target).read_bytes(), Path(target).name))
        return opened[-1]
    with pytest.raises(UsageError, match="cannot open the third"):
        shards.open_each([str(index)] + [str(p) for p in paths], open_one)
    assert len(opened) == 3 and all(s.closed for s in opened)
    # Without the open error, the broken index is open_all's error, and again all are closed.
    opened.clear()
    with pytest.raises(FormatError, match="not valid JSON"):
        shards.open_each([str(index), str(paths[0])], open_one)
    assert len(opened) == 2 and all(s.closed for s in opened)
