"""GGUF reader: files written by gguf-py, compared with gguf.GGUFReader (metadata, tensor infos) and
gguf.quants.dequantize (values, through the sampler); hand-packed version 1/2 files; big-endian files;
lazy vocabularies; the model card; the CLI on a quantized model."""

import json
import math
import random
import shutil
import struct
import subprocess
import sys

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFEndian, GGUFValueType, GGUFWriter

import gguf_files as fx  # noqa: E402

import tensorloupe  # noqa: E402
from tensorloupe import cli  # noqa: E402
from tensorloupe.errors import UnsupportedError, UsageError  # noqa: E402
from tensorloupe.formats.gguf import reader as tg  # noqa: E402
from tensorloupe.formats.gguf import metadata as gguf_meta  # noqa: E402
from tensorloupe.source.base import MemorySource  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return fx.write_all(tmp_path_factory.mktemp("gguf"))


def same_f32(a, b) -> bool:
    return struct.pack("<f", a) == struct.pack("<f", b)


def reference(reader_tensor) -> np.ndarray:
    """The oracle's values of a tensor, flat, in storage order."""
    if reader_tensor.tensor_type in (Q.I8, Q.I16, Q.I32, Q.I64, Q.F64):
        return np.asarray(reader_tensor.data).reshape(-1)
    return gguf.quants.dequantize(reader_tensor.data, reader_tensor.tensor_type).reshape(-1)


def assert_same_values(ours: list, ref: np.ndarray) -> None:
    if ref.dtype.kind in "iu":
        assert ours == ref.tolist()
    else:
        got = np.array(ours, dtype=np.float64).astype(ref.dtype)
        np.testing.assert_array_equal(got, ref)


# --- metadata and tensor infos against gguf.GGUFReader ----------------------------------------

def test_every_metadata_type_matches_the_writer_and_reader(files):
    ckpt = tensorloupe.open(files["gguf_every_type"])
    reader = gguf.GGUFReader(files["gguf_every_type"])
    for key, (value, vtype, sub) in fx.EVERY_VALUE.items():
        ours = ckpt.metadata[key]
        if isinstance(ours, dict):  # lazily read: page through all of it
            assert ours == {"array": True, "type": gguf_meta.VALUE_TYPES[sub].name,
                            "length": len(value), "lazy": True}
            ours = tg.read_array(ckpt, key, 0, len(value))
        if vtype == GGUFValueType.FLOAT32:
            assert same_f32(ours, value) and ours == 0.1  # shortest float32 repr, not 0.100000001
        elif sub == GGUFValueType.FLOAT32:
            assert all(same_f32(a, b) for a, b in zip(ours, value)) and len(ours) == len(value)
        else:
            assert ours == value, key
        if sub == GGUFValueType.ARRAY:
            continue  # gguf-py's reader flattens nested arrays
        theirs = reader.get_field(key).contents()
        if GGUFValueType.FLOAT32 in (vtype, sub):
            assert np.array_equal(np.float32(theirs), np.float32(ours))
        else:
            assert theirs == ours, key
    assert type(ckpt.metadata["test.bool"]) is bool
    assert ckpt.metadata["test.array.bool"] == [True, False, True]
    assert list(ckpt.metadata) == [k for k in reader.fields if not k.startswith("GGUF.")]


def test_tensor_infos_match_gguf_reader(files):
    for label in ("gguf_llama", "gguf_moe", "gguf_every_type"):
        ckpt = tensorloupe.open(files[label])
        reader = gguf.GGUFReader(files[label])
        assert [t.name for t in ckpt.tensors] == [t.name for t in reader.tensors]
        assert ckpt.extras["gguf"]["data_offset"] == reader.data_offset
        for ref in reader.tensors:
            t = ckpt.tensor(ref.name)
            assert t.info["ggml_type"] == int(ref.tensor_type)
            assert t.dtype == ref.tensor_type.name
            assert t.info["ne"] == ref.shape.tolist()
            assert t.shape == tuple(reversed(ref.shape.tolist()))
            assert t.offset == ref.data_offset
            assert t.nbytes == ref.n_bytes or ref.tensor_type == Q.Q8_1  # gguf-py sizes Q8_1 as 40 B
            assert t.numel == ref.n_elements


# --- values through the sampler against gguf.quants.dequantize -------------------------------------

@pytest.fixture(scope="module")
def every_type(files):
    return (tensorloupe.open(files["gguf_every_type"]),
            {r.name: r for r in gguf.GGUFReader(files["gguf_every_type"]).tensors})


@pytest.mark.parametrize("qtype", [t for t in fx.EVERY_TYPE if t not in (Q.Q8_1, Q.Q8_K, Q.Q1_0)],
                         ids=lambda t: t.name)
def test_values_of_every_type_match_gguf(every_type, qtype):
    """Q8_1, Q8_K and Q1_0 have no dequantizer in gguf-py; ggml_quants' own tests cover them."""
    ckpt, refs = every_type
    t = ckpt.tensor(f"t.{qtype.name}")
    ref = reference(refs[t.name])
    assert_same_values(tensorloupe.values(t, 0, t.numel), ref)
    # a window straddling a block boundary, as the debugger view asks for it
    boundary = max(t.dtype_info.block_elems, 8)
    assert_same_values(tensorloupe.values(t, boundary - 3, 7), ref[boundary - 3:boundary + 4])


def test_grid_and_sample_map_elements_to_blocks(files):
    ckpt = tensorloupe.open(files["gguf_llama"])
    reader = {r.name: r for r in gguf.GGUFReader(files["gguf_llama"]).tensors}
    for name in ("token_embd.weight", "blk.0.attn_v.weight", "blk.1.ffn_down.weight", "output.weight"):
        t = ckpt.tensor(name)
        ref = reference(reader[name]).reshape(t.shape)  # reversed ne, row-major == ggml order
        g = tensorloupe.grid(t, rows=37, cols=29)
        for i, r in enumerate(g.row_index):
            for j, c in enumerate(g.col_index):
                assert g.at(i, j) == float(ref[r, c]), (name, r, c)
        s = tensorloupe.sample(t, 4096)
        flat = ref.reshape(-1)
        offset = 0
        for start, count in s.windows:
            assert_same_values(s.values[offset:offset + count], flat[start:start + count])
            offset += count
        exact = tensorloupe.exact_stats(t)
        assert exact.mean == pytest.approx(float(flat.astype(np.float64).mean()), rel=1e-9, abs=1e-12)


def test_moe_experts_are_stacked_row_major_and_duplicates_are_exact(files):
    ckpt = tensorloupe.open(files["gguf_moe"])
    reader = {r.name: r for r in gguf.GGUFReader(files["gguf_moe"]).tensors}
    t = ckpt.tensor("blk.1.ffn_down_exps.weight")
    assert t.shape == (8, 64, 128) and t.info["ne"] == [128, 64, 8] and t.dtype == "Q8_0"
    ref = reference(reader[t.name]).reshape(t.shape)
    for expert in (1, 5, 7):
        g = tensorloupe.grid(t, rows=64, cols=128, plane=(1, 2), index={0: expert})
        assert g.exact
        np.testing.assert_array_equal(np.array(g.values, dtype=np.float32), ref[expert].reshape(-1))
    per_expert = 64 * 128
    for copy, original in fx.MOE_COPIES.items():
        assert tensorloupe.values(t, copy * per_expert, per_expert) == \
            tensorloupe.values(t, original * per_expert, per_expert)
    assert tensorloupe.values(t, 3 * per_expert, 64) != tensorloupe.values(t, 1 * per_expert, 64)
    router = ckpt.tensor("blk.0.ffn_gate_inp.weight")
    assert router.shape == (8, 64) and router.dtype == "F32"


# --- lazy metadata arrays ---------------------------------------------------------------------------

def test_vocabulary_is_lazy_and_pages_match_the_reader(files):
    ckpt = tensorloupe.open(files["gguf_llama"])
    field = gguf.GGUFReader(files["gguf_llama"]).get_field("tokenizer.ggml.tokens")
    tokens = field.contents()
    assert ckpt.metadata["tokenizer.ggml.tokens"] == {"array": True, "type": "string",
                                                      "length": 1100, "lazy": True}
    record = ckpt.extras["gguf_arrays"]["tokenizer.ggml.tokens"]
    assert record["end"] - record["offset"] == sum(8 + len(t.encode()) for t in tokens)
    json.dumps(ckpt.extras)  # plain JSON: the worker posts it as it is
    for start, count in ((0, 10), (250, 20), (256, 1), (255, 2), (1090, 50), (0, 1100), (1100, 5)):
        assert tg.read_array(ckpt, "tokenizer.ggml.tokens", start, count) == tokens[start:start + count]
    scores = tg.read_array(ckpt, "tokenizer.ggml.scores", 500, 3)
    assert scores == [-500.0, -501.0, -502.0]
    assert tg.read_array(ckpt, "tokenizer.ggml.token_type", 0, 4) == [2, 3, 3, 6]
    assert ckpt.extras["model_card"]["Vocab size"] == 1100


def test_lazy_paging_rebuilds_a_dropped_index(files):
    ckpt = tensorloupe.open(files["gguf_every_type"])
    gguf_meta._INDEXES.clear()
    value = fx.EVERY_VALUE["test.array.big_strings"][0]
    assert tg.read_array(ckpt, "test.array.big_strings", 2990, 20) == value[2990:]
    nested = fx.EVERY_VALUE["test.array.big_nested"][0]
    assert tg.read_array(ckpt, "test.array.big_nested", 700, 3) == nested[700:703]
    with pytest.raises(UsageError):
        tg.read_array(ckpt, "no.such.key", 0, 1)
    assert tg.read_array(ckpt, "test.array.int32", 1, 5) == [-2, 3]  # small arrays page too


def test_long_string_values_are_left_in_place(tmp_path):
    text = "{% for m in messages %}" + "x" * (gguf_meta.MAX_INLINE_STRING + 10)
    path = tmp_path / "long.gguf"
    w = GGUFWriter(path, "llama")
    w.add_string("tokenizer.chat_template", text)
    w.add_tensor("w", np.ones(4, dtype=np.float32))
    fx.finish(w)
    ckpt = tensorloupe.open(path)
    assert ckpt.metadata["tokenizer.chat_template"] == {"string": True, "length": len(text),
                                                        "lazy": True}
    assert ckpt.bytes_read() < len(text)
    assert tg.read_string(ckpt, "tokenizer.chat_template", 0, 23) == "{% for m in messages %}"
    assert tensorloupe.values(ckpt.tensor("w"), 0, 4) == [1.0] * 4


def test_opening_a_big_vocabulary_takes_a_handful_of_reads(tmp_path):
    """100k tokens: the header is walked through the block cache in a few large reads."""
    rng = random.Random(7)
    tokens = ["".join(rng.choices("abcdefghij▁", k=rng.randint(1, 12))) + str(i) for i in range(100_000)]
    path = tmp_path / "vocab.gguf"
    w = GGUFWriter(path, "llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.5] * len(tokens))
    w.add_tensor("big", np.zeros((1024, 1024), dtype=np.float32))  # 4 MB the opener must not read
    fx.finish(w)
    ckpt = tensorloupe.open(path)
    header = ckpt.extras["gguf"]["data_offset"]
    assert ckpt.reads() <= 6
    assert ckpt.bytes_read() <= header + (4 << 20)
    assert tg.read_array(ckpt, "tokenizer.ggml.tokens", 99_998, 5) == tokens[99_998:]
    assert tg.read_array(ckpt, "tokenizer.ggml.tokens", 51_234, 2) == tokens[51_234:51_236]


# --- versions, byte orders, alignment ---------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("big_endian", [False, True])
def test_hand_packed_versions_and_byte_orders(version, big_endian):
    order = ">" if big_endian else "<"
    values = [1.5, -2.0, 0.25, 8.0, 3.0, -1.0]
    data = struct.pack(f"{order}6f", *values) + bytes(8) + struct.pack(f"{order}4e", 1, 2, 3, 4)
    kvs = [("general.architecture", 8, "llama"), ("llama.block_count", 4, 3),
           ("v.int64", 11, -5), ("v.f64", 12, 0.5), ("v.bool", 7, 1),
           ("v.arr", 9, (8, ["a", "bc"])), ("v.nested", 9, (9, [(0, [1, 2]), (0, [3])]))]
    tensors = [("w", (3, 2), 0, 0), ("h", (4,), 1, 32)]
    raw = fx.raw_gguf(kvs, tensors, data, version=version, big_endian=big_endian)
    ckpt = tensorloupe.open(raw, name="hand.gguf")
    assert ckpt.extras["gguf"]["version"] == version
    assert ckpt.extras["gguf"]["endian"] == ("big" if big_endian else "little")
    assert ckpt.metadata == {"general.architecture": "llama", "llama.block_count": 3,
                             "v.int64": -5, "v.f64": 0.5, "v.bool": True, "v.arr": ["a", "bc"],
                             "v.nested": [[1, 2], [3]]}
    w = ckpt.tensor("w")
    assert w.shape == (2, 3) and w.info["ne"] == [3, 2] and w.big_endian == big_endian
    assert tensorloupe.values(w, 0, 6) == values
    assert tensorloupe.grid(w, 2, 3).values == values
    assert tensorloupe.values(ckpt.tensor("h"), 0, 4) == [1.0, 2.0, 3.0, 4.0]


def test_big_endian_file_from_the_writer_matches_little_endian(tmp_path):
    plain = [Q.F32, Q.F16, Q.F64, Q.I8, Q.I16, Q.I32, Q.I64]
    little = fx.write_every_type(tmp_path / "le.gguf", types=plain)
    big = fx.write_every_type(tmp_path / "be.gguf", big_endian=True, types=plain)
    a, b = tensorloupe.open(little), tensorloupe.open(big)
    assert b.extras["gguf"]["endian"] == "big" and a.extras["gguf"]["endian"] == "little"
    assert a.metadata == b.metadata
    for key in a.extras["gguf_arrays"]:
        assert tg.read_array(a, key, 0, 5000) == tg.read_array(b, key, 0, 5000)
    reader = gguf.GGUFReader(big)
    assert reader.endianess == GGUFEndian.BIG
    for ta, ref in zip(a.tensors, reader.tensors):
        tb = b.tensor(ta.name)
        assert tb.offset == ref.data_offset and tb.shape == ta.shape
        assert tensorloupe.values(tb, 0, tb.numel) == tensorloupe.values(ta, 0, ta.numel)


def test_gguf_convert_endian_script_output_reads_the_same(files, tmp_path):
    """gguf-py's own converter byteswaps the header and the Q4_K/Q6_K/Q8_0 scales."""
    big = tmp_path / "tiny-llama-be.gguf"
    shutil.copy(files["gguf_llama"], big)
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_convert_endian", str(big), "big"],
                   input="YES\n", text=True, check=True, capture_output=True)
    a, b = tensorloupe.open(files["gguf_llama"]), tensorloupe.open(big)
    assert b.extras["gguf"]["endian"] == "big"
    assert a.metadata == b.metadata
    assert tg.read_array(b, "tokenizer.ggml.tokens", 0, 2000) == \
        tg.read_array(a, "tokenizer.ggml.tokens", 0, 2000)
    assert tg.read_array(b, "tokenizer.ggml.scores", 0, 2000) == \
        tg.read_array(a, "tokenizer.ggml.scores", 0, 2000)
    for ta in a.tensors:
        tb = b.tensor(ta.name)
        assert tb.big_endian and tb.dtype == ta.dtype
        assert tensorloupe.sample(tb, 2048).values == tensorloupe.sample(ta, 2048).values, ta.name


def test_custom_alignment(tmp_path):
    path = tmp_path / "align.gguf"
    w = GGUFWriter(path, "llama")
    w.add_custom_alignment(256)
    w.add_tensor("a", np.arange(5, dtype=np.float32))
    w.add_tensor("b", np.arange(7, dtype=np.float16))
    fx.finish(w)
    ckpt = tensorloupe.open(path)
    reader = gguf.GGUFReader(path)
    assert ckpt.extras["gguf"]["alignment"] == 256
    assert ckpt.extras["gguf"]["data_offset"] == reader.data_offset
    assert [t.offset for t in ckpt.tensors] == [t.data_offset for t in reader.tensors]
    assert tensorloupe.values(ckpt.tensor("b"), 0, 7) == [float(i) for i in range(7)]
    assert not ckpt.warnings


def test_unknown_ggml_type_opens_with_a_problem():
    """A type id nobody knows: the file opens, the tensor says why its values are unreadable, its
    bytes are bounded by the next tensor, and the other tensors still work."""
    data = bytes(64) + struct.pack("<4f", 1, 2, 3, 4)
    raw = fx.raw_gguf([], [("mystery", (16,), 99, 0), ("w", (4,), 0, 64)], data)
    ckpt = tensorloupe.open(raw, name="x.gguf")
    t = ckpt.tensor("mystery")
    assert t.dtype == "GGML_TYPE_99" and "unknown" in t.problem
    assert t.nbytes == 64 and t.info["nbytes_inferred"]
    assert any("mystery" in w for w in ckpt.warnings)
    with pytest.raises(UnsupportedError):
        tensorloupe.sample(t)
    assert tensorloupe.values(ckpt.tensor("w"), 0, 4) == [1.0, 2.0, 3.0, 4.0]


# --- model card, detection, CLI -------------------------------------------------------------------

def test_model_cards(files):
    llama = tensorloupe.open(files["gguf_llama"]).extras["model_card"]
    assert list(llama) == ["Architecture", "Name", "Layers", "Embedding length", "Attention heads",
                           "KV heads", "Head dim", "FFN size", "Context length", "RoPE base",
                           "Vocab size", "File size", "Tensors", "Parameters", "Quantization",
                           "File type", "Bits per weight"]
    reader = gguf.GGUFReader(files["gguf_llama"])
    params = sum(int(t.n_elements) for t in reader.tensors)
    nbytes = sum(int(t.n_bytes) for t in reader.tensors)
    assert llama["Architecture"] == "llama" and llama["Name"] == "tiny-llama-test"
    assert (llama["Layers"], llama["Embedding length"], llama["Attention heads"], llama["KV heads"],
            llama["Head dim"], llama["FFN size"], llama["Context length"]) == (2, 256, 4, 2, 64, 512, 2048)
    assert llama["RoPE base"] == 10000.0 and llama["Vocab size"] == 1100
    assert llama["Parameters"] == params and llama["Quantization"] == "Q4_K"
    assert llama["File type"] == "Q4_K_M"
    assert llama["Bits per weight"] == round(nbytes * 8 / params, 2)
    assert llama["File size"].startswith(f"{files['gguf_llama'].stat().st_size:,} bytes")
    moe = tensorloupe.open(files["gguf_moe"]).extras["model_card"]
    assert moe["Experts"] == 8 and moe["Experts used"] == 2 and moe["Quantization"] == "Q8_0"
    assert moe["Bits per weight"] > 8.5  # Q8_0 plus F16/F32 embeddings and norms


def test_sniffed_without_the_extension(files):
    raw = files["gguf_moe"].read_bytes()
    assert tg.sniff(raw[:1024], len(raw), "model.bin")
    ckpt = tensorloupe.open(MemorySource(raw, "model.bin"))
    assert ckpt.format == "gguf" and len(ckpt.tensors) == 23


def test_cli_inspect_and_stats_on_a_quantized_tensor(files, capsys):
    assert cli.main(["inspect", str(files["gguf_llama"])]) == 0
    out = capsys.readouterr().out
    assert "Model card" in out and "Q4_K_M" in out and "Bits per weight" in out
    assert "'length': 1100" in out and "<unk>" not in out  # the vocabulary is summarised
    assert "blk.0.attn_q.weight" in out and "4.5" in out  # Q4_K bits per weight in the table
    assert cli.main(["stats", str(files["gguf_llama"]), "blk.0.attn_q.weight", "--json"]) == 0
    entry = json.loads(capsys.readouterr().out)[0]
    ref = reference(next(r for r in gguf.GGUFReader(files["gguf_llama"]).tensors
                         if r.name == "blk.0.attn_q.weight")).astype(np.float64)
    assert entry["dtype"] == "Q4_K" and entry["exact"]
    assert entry["stats"]["mean"] == pytest.approx(ref.mean(), rel=1e-9, abs=1e-12)
    assert entry["stats"]["max"] == ref.max()
    assert cli.main(["inspect", "--json", str(files["gguf_every_type"])]) == 0
    assert math.isfinite(json.loads(capsys.readouterr().out)["parameters"])
