"""`tensorloupe convert|extract` and `tensorloupe.write_safetensors`: checkpoints written as
safetensors without running their pickle. The reference readers decide: every output is read by
`safetensors.safe_open` and compared, tensor by tensor and bit for bit (dtypes included), with
`torch.load(weights_only=True)` of the source, with gguf-py's values for GGUF, and with
transformers' logits for a tiny Llama loaded by `from_pretrained` from the converted file."""

import json
import os
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

import bin_shard_files
import gguf_files
import torch_files

import tensorloupe
from tensorloupe.cli import EXIT_DANGEROUS, EXIT_OK, EXIT_USAGE, main
from tensorloupe.writing import safetensors as writer

ROOT = Path(__file__).resolve().parent.parent


def convert(*args) -> int:
    return main(["convert", *map(str, args)])


def loaded(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want) or sorted(got) == sorted(want)
    for name, ref in want.items():
        out = got[name]
        assert out.dtype == ref.dtype, name
        assert tuple(out.shape) == tuple(ref.shape), name
        # bit for bit: the bytes, so NaNs and -0.0 count too
        a, b = out.contiguous().reshape(-1), ref.contiguous().reshape(-1)
        if a.numel():
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name


# torch 2.13's torch.load of a legacy file fails on these (UntypedStorage has no dtype)
NO_LEGACY_LOAD = (torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn,
                  torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)


def own_dtypes() -> dict[str, torch.Tensor]:
    tensors = torch_files.dtype_tensors()
    del tensors["complex128"]          # safetensors has no complex128 (refused: see below)
    return tensors


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_a_pt_file_converts_bit_for_bit(tmp_path, legacy):
    tensors = own_dtypes()
    if legacy:   # torch.load cannot read its own legacy uint16/32/64 and float8 storages
        tensors = {k: v for k, v in tensors.items() if v.dtype not in NO_LEGACY_LOAD}
    src = tmp_path / "m.pt"
    torch.save(tensors, src, _use_new_zipfile_serialization=not legacy)
    out = tmp_path / "m.safetensors"
    assert convert(src, out) == EXIT_OK
    got, meta = loaded(out)
    assert_same(got, torch.load(src, weights_only=True))
    assert {torch.bfloat16, torch.float16, torch.int8, torch.bool} <= {t.dtype for t in got.values()}
    assert meta["format"] == "pt" and meta["source"] == "m.pt"
    assert "without executing the pickle" in meta["converted_by"]
    assert meta["source_format"] == ("pytorch-legacy" if legacy else "pytorch-zip")
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_a_pre_0_4_tar_checkpoint_converts(tmp_path):
    # torch.load refuses the tar format with weights_only=True; this hand-built file is ours,
    # so weights_only=False is safe here and is the reference
    src = torch_files.write_legacy_tar(tmp_path / "old.tar", torch_files.tar_tensors())
    out = tmp_path / "old.safetensors"
    assert convert(src, out) == EXIT_OK
    got, meta = loaded(out)
    assert meta["source_format"] == "pytorch-tar"
    assert_same(got, torch_files.expected_tensors(torch.load(src, weights_only=False)))


def test_views_and_shared_storages_are_written_as_copies(tmp_path):
    src = torch_files.save(torch_files.view_tensors(), tmp_path / "views.pt")
    out = tmp_path / "views.safetensors"
    assert convert(src, out) == EXIT_OK
    got, meta = loaded(out)
    assert_same(got, torch.load(src, weights_only=True))
    # tied_a and tied_b were one torch tensor: both names are written, and the metadata says so
    assert json.loads(meta["shared"].split(" (")[0]) == {"tied_b": "tied_a"}


def test_a_big_endian_pt_file_is_written_little_endian(tmp_path):
    tensors = {k: v for k, v in own_dtypes().items() if v.dtype != torch.complex64}
    src = torch_files.big_endian_copy(tensors, tmp_path / "be.pt")
    out = tmp_path / "be.safetensors"
    assert convert(src, out) == EXIT_OK
    assert_same(loaded(out)[0], tensors)


def test_complex128_is_refused_by_name_and_nothing_is_written(tmp_path, capsys):
    src = torch_files.save({"z": torch.zeros(2, dtype=torch.complex128)}, tmp_path / "z.pt")
    assert convert(src, tmp_path / "z.safetensors") == 3
    assert "dtype C128, which safetensors cannot hold" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["z.pt"]


@pytest.fixture(scope="module")
def bin_sets(tmp_path_factory):
    return bin_shard_files.write_all(tmp_path_factory.mktemp("bin"))


@pytest.mark.parametrize("label", ["bin_shards_folder", "bin_shards_legacy_folder"])
def test_a_bin_shard_set_converts_to_one_file(tmp_path, bin_sets, label):
    folder = bin_sets[label]
    out = tmp_path / "model.safetensors"
    assert convert(folder, out) == EXIT_OK
    want = {}
    for shard in sorted(Path(folder).glob("pytorch_model-*.bin")):
        want.update(torch.load(shard, weights_only=True))
    got, meta = loaded(out)
    assert_same(got, want)
    assert meta["source"].count("pytorch_model-") == len(list(Path(folder).glob("*.bin")))


# --- a tiny transformers model: the converted file gives the same logits -------------------------

def tiny_llama():
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.for_model("llama", hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, vocab_size=256)
    torch.manual_seed(28)
    return AutoModelForCausalLM.from_config(config).eval()


def logits(model) -> torch.Tensor:
    ids = torch.tensor([[1, 7, 42, 200, 3, 99, 5]])
    with torch.no_grad():
        return model(ids).logits


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    model = tiny_llama()
    torch.save(model.state_dict(), folder / "pytorch_model.pt")
    return model, folder / "pytorch_model.pt"


@pytest.mark.parametrize("shard_size", [None, "60KB"], ids=["one-file", "sharded"])
def test_from_pretrained_of_the_converted_model_gives_the_same_logits(tmp_path, llama, shard_size):
    from transformers import AutoModelForCausalLM
    model, src = llama
    out = tmp_path / "converted"
    if shard_size is None:
        out.mkdir()
        assert convert(src, out / "model.safetensors") == EXIT_OK
    else:
        assert convert(src, out, "--max-shard-size", shard_size) == EXIT_OK
        index = json.loads((out / "model.safetensors.index.json").read_text())
        shards = sorted(p.name for p in out.glob("model-*-of-*.safetensors"))
        assert len(shards) > 2 and set(index["weight_map"].values()) == set(shards)
        assert shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
        assert index["metadata"]["total_size"] == sum(
            t.numel() * t.element_size() for t in model.state_dict().values())
        for shard in shards:    # each at most the limit, unless one tensor alone is bigger
            tensors, _ = loaded(out / shard)
            size = sum(t.numel() * t.element_size() for t in tensors.values())
            assert size <= 60_000 or len(tensors) == 1
    model.config.save_pretrained(out)
    again = AutoModelForCausalLM.from_pretrained(out).eval()
    assert torch.equal(logits(again), logits(model))
    assert_same(dict(again.state_dict()), dict(model.state_dict()))


def test_dry_run_says_what_and_writes_nothing(tmp_path, llama, capsys):
    model, src = llama
    out = tmp_path / "shards"
    assert convert(src, out, "--max-shard-size", "60KB", "--dry-run") == EXIT_OK
    text = capsys.readouterr().out
    total = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert f"would write {len(model.state_dict())} tensors, {total:,} bytes" in text
    assert "model-00001-of-" in text and "model.safetensors.index.json" in text
    assert "model.embed_tokens.weight  F32[256, 64]  65,536 bytes" in text
    assert not out.exists()


# --- GGUF: unquantised types as they are, quantised ones as gguf-py's dequantised values --------

def test_a_gguf_file_converts_to_gguf_py_values(tmp_path):
    import gguf
    src = gguf_files.write_llama(tmp_path / "tiny.gguf")
    out = tmp_path / "tiny.safetensors"
    assert convert(src, out) == EXIT_OK
    got, meta = loaded(out)
    reader = gguf.GGUFReader(src)
    assert sorted(got) == sorted(t.name for t in reader.tensors)
    kinds = set()
    for t in reader.tensors:
        shape = tuple(int(n) for n in reversed(t.shape))
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            want = torch.from_numpy(np.array(t.data).reshape(shape))
        else:   # quantised: float32 values, exactly gguf-py's dequantisation
            want = torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape))
            assert got[t.name].dtype == torch.float32
        kinds.add(t.tensor_type.name)
        assert_same({t.name: got[t.name]}, {t.name: want})
    assert {"F32", "F16", "Q4_K", "Q6_K", "Q8_0"} <= kinds
    assert "token_embd.weight" in json.loads(meta["dequantised"].split(" (")[0])


def test_a_big_endian_gguf_file_is_written_little_endian(tmp_path):
    plain = [gguf_files.Q.F32, gguf_files.Q.F16, gguf_files.Q.F64, gguf_files.Q.I8,
             gguf_files.Q.I16, gguf_files.Q.I32, gguf_files.Q.I64]
    little = gguf_files.write_every_type(tmp_path / "le.gguf", types=plain)
    big = gguf_files.write_every_type(tmp_path / "be.gguf", big_endian=True, types=plain)
    assert convert(little, tmp_path / "le.safetensors") == EXIT_OK
    assert convert(big, tmp_path / "be.safetensors") == EXIT_OK
    a, b = loaded(tmp_path / "le.safetensors")[0], loaded(tmp_path / "be.safetensors")[0]
    assert len(a) == len(plain)
    assert_same(b, a)


# --- extract ---------------------------------------------------------------------------------

def test_extract_by_names_and_by_regex(tmp_path, llama):
    model, src = llama
    want = model.state_dict()
    out = tmp_path / "two.safetensors"
    names = ["model.norm.weight", "model.layers.1.self_attn.k_proj.weight"]
    assert main(["extract", str(src), str(out), "--names", ",".join(names)]) == EXIT_OK
    assert_same(loaded(out)[0], {n: want[n] for n in names})
    out = tmp_path / "layer0.safetensors"
    assert main(["extract", str(src), str(out), "--match", r"^model\.layers\.0\."]) == EXIT_OK
    got = loaded(out)[0]
    assert len(got) == 9
    assert_same(got, {n: t for n, t in want.items() if n.startswith("model.layers.0.")})


def test_extract_of_an_unknown_name_or_no_match_writes_nothing(tmp_path, llama, capsys):
    _, src = llama
    assert main(["extract", str(src), str(tmp_path / "x.safetensors"), "--names", "nope"]) == EXIT_USAGE
    assert "no tensor named 'nope'" in capsys.readouterr().err
    assert main(["extract", str(src), str(tmp_path / "x.safetensors"), "--match", "^zzz"]) == EXIT_USAGE
    assert "no tensor name matches '^zzz'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# --- the Python API ----------------------------------------------------------------------------

def test_write_safetensors_from_a_path_and_from_a_checkpoint(tmp_path, llama):
    model, src = llama
    want = model.state_dict()
    [path] = tensorloupe.write_safetensors(src, tmp_path / "all.safetensors")
    assert_same(loaded(path)[0], dict(want))
    with tensorloupe.open(src) as ckpt:
        written = tensorloupe.write_safetensors(ckpt, tmp_path / "set", names=["model.norm.weight",
                                                "lm_head.weight"], max_shard_size=40_000)
    assert [Path(p).name for p in written] == ["model-00001-of-00002.safetensors",
                                               "model-00002-of-00002.safetensors",
                                               "model.safetensors.index.json"]
    got = {**loaded(written[0])[0], **loaded(written[1])[0]}
    assert_same(got, {n: want[n] for n in ["lm_head.weight", "model.norm.weight"]})


# --- hostile and failing inputs -----------------------------------------------------------------

def test_a_dangerous_pickle_writes_nothing_without_the_flag(tmp_path, capsys):
    src = torch_files.save(torch_files.hostile_object(), tmp_path / "evil.pt")
    out = tmp_path / "evil.safetensors"
    assert convert(src, out) == EXIT_DANGEROUS
    err = capsys.readouterr().err
    assert "dangerous global(s): posix.system, builtins.exec; nothing written" in err
    assert "entry 'payload': not a tensor, not written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.pt"]
    assert not (Path.cwd() / torch_files.CANARY_NAME).exists()
    # with the flag: the tensors, and a report of what was left out; the pickle still never runs
    assert convert(src, out, "--allow-dangerous-file") == EXIT_OK
    assert "call of posix.system (dangerous, never run): not written" in capsys.readouterr().out
    assert_same(loaded(out)[0], {"weight": torch.arange(4.0)})
    assert not (Path.cwd() / torch_files.CANARY_NAME).exists()


def test_an_input_is_never_overwritten(tmp_path, bin_sets, capsys):
    src = torch_files.save({"w": torch.ones(3)}, tmp_path / "m.pt")
    before = src.read_bytes()
    assert convert(src, src) == EXIT_USAGE
    assert "it is an input of the conversion" in capsys.readouterr().err
    link = tmp_path / "link.safetensors"
    link.symlink_to(src)
    assert convert(src, link) == EXIT_USAGE
    assert src.read_bytes() == before
    # a shard set written into the folder it is read from, over one of its parts' names
    folder = tmp_path / "set"
    shutil.copytree(bin_sets["bin_shards_folder"], folder)
    (folder / "model.safetensors").symlink_to(folder / "pytorch_model-00001-of-00003.bin")
    assert convert(folder / "pytorch_model.bin.index.json", folder / "model.safetensors") == EXIT_USAGE
    assert [p.name for p in folder.iterdir() if ".tmp-" in p.name] == []


def test_an_interrupted_write_leaves_no_file_under_the_final_name(tmp_path, llama, monkeypatch):
    _, src = llama
    real = writer.tensor_chunks
    seen, temporaries = [], []

    def failing(entry, chunk_bytes=writer.CHUNK_BYTES):
        seen.append(entry.tensor.name)
        for i, data in enumerate(real(entry, 1024)):
            if len(seen) == 5 and i == 3:   # the fifth tensor's read fails part-way through it
                temporaries.extend(p for p in tmp_path.rglob("*.tmp-*"))
                raise OSError("the disk went away")
            yield data

    monkeypatch.setattr(writer, "tensor_chunks", failing)
    out = tmp_path / "one.safetensors"
    with pytest.raises(OSError, match="the disk went away"):
        tensorloupe.write_safetensors(src, out)
    assert [p.name.split(".tmp-")[0] for p in temporaries] == ["one.safetensors"]  # it was writing
    assert list(tmp_path.iterdir()) == []
    seen.clear()
    temporaries.clear()
    with pytest.raises(OSError, match="the disk went away"):
        tensorloupe.write_safetensors(src, tmp_path / "set", max_shard_size="60KB")
    assert len(temporaries) >= 2       # shards already complete, not yet renamed, and removed
    assert list((tmp_path / "set").iterdir()) == []
    # the CLI says it in a sentence and exits 3, nothing written
    monkeypatch.setattr(writer, "tensor_chunks", lambda entry: (_ for _ in ()).throw(
        tensorloupe.TensorloupeError("a read failed")))
    assert convert(src, out) == 3
    assert list(tmp_path.glob("one.safetensors*")) == []


# --- a quantised safetensors with its config: the dequantised values tensorloupe shows ----------

@pytest.mark.parametrize("preset", ["w4a16", "fp8_block", "nvfp4"])
def test_a_quantised_model_converts_to_its_dequantised_float32_values(tmp_path, preset):
    import quant_files
    quant_files.write_models(tmp_path / "q")
    folder = tmp_path / "q" / "quant" / f"model_{preset}"
    out = tmp_path / "out.safetensors"
    assert convert(folder / "model.safetensors", out) == EXIT_OK
    got, meta = loaded(out)
    # the reference: compressed-tensors' own compressor decompressing each weight
    weights, plain = quant_files.decompressed(folder)
    assert len(weights) == 14
    assert_same({k: got[k] for k in weights}, weights)
    for name in weights:
        assert not [k for k in got if k.startswith(name + "_")]   # no packed parts
    assert_same({k: got[k] for k in plain}, plain)
    assert len(json.loads(meta["dequantised"].split(" (")[0])) == 14


def test_progress_says_bytes_written_of_the_total(tmp_path, llama):
    import io
    from tensorloupe.progress import Meter
    _, src = llama
    stream = io.StringIO()
    with Meter(stream, "convert", delay=0) as meter:
        tensorloupe.write_safetensors(src, tmp_path / "m.safetensors", progress=meter)
        assert stream.getvalue().startswith("\rconvert: 0.") and " of 0.4 MB, " in stream.getvalue()
    assert stream.getvalue().endswith("\r") and "\n" not in stream.getvalue()   # cleared


def test_an_output_that_cannot_be_written_is_said_in_a_sentence(tmp_path, capsys):
    src = torch_files.save({"w": torch.ones(3)}, tmp_path / "m.pt")
    (tmp_path / "taken").mkdir()
    assert convert(src, tmp_path / "taken") == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"tensorloupe: cannot write {tmp_path / 'taken'}: ") and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt", "taken"]
    assert list((tmp_path / "taken").iterdir()) == []


def test_a_dangerous_file_is_refused_before_its_tensors_are_looked_at(tmp_path, capsys):
    obj = torch_files.hostile_object()
    obj["z"] = torch.zeros(2, dtype=torch.complex128)   # would be refused too, but later
    src = torch_files.save(obj, tmp_path / "evil.pt")
    assert convert(src, tmp_path / "x.safetensors", "--dry-run") == EXIT_DANGEROUS
    assert "nothing written" in capsys.readouterr().err


def test_the_header_is_padded_with_spaces_to_8_bytes(tmp_path):
    src = torch_files.save({"a": torch.ones(3), "bb": torch.zeros(1, dtype=torch.int8)}, tmp_path / "m.pt")
    out = tmp_path / "m.safetensors"
    assert convert(src, out) == EXIT_OK
    data = out.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0
    head = data[8:8 + n]
    assert head == head.rstrip(b" ") + b" " * (len(head) - len(head.rstrip(b" ")))
    doc = json.loads(head)
    assert doc["a"] == {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}
    assert doc["bb"] == {"dtype": "I8", "shape": [1], "data_offsets": [12, 13]}
    assert len(data) == 8 + n + 13


# --- memory: a conversion holds one chunk, not the file ------------------------------------------

# The child's peak RSS. Linux carries ru_maxrss across exec (a child of this torch-laden pytest
# starts with pytest's peak), so the figure is the new image's own high-water mark, VmHWM.
CHILD = """
import sys, time
sys.path.insert(0, {pylib!r})
import tensorloupe

def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

base = peak()
start = time.perf_counter()
tensorloupe.write_safetensors({src!r}, {out!r})
print(base, peak(), time.perf_counter() - start)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="VmHWM is Linux's")
def test_peak_memory_of_converting_a_200_mb_file_is_far_below_its_size(tmp_path):
    import subprocess
    torch.manual_seed(0)
    tensors = {f"layer.{i}.weight": torch.randn(1024, 6400) for i in range(8)}   # 8 x 26 MB
    src = tmp_path / "big.pt"
    torch.save(tensors, src)
    size = src.stat().st_size
    assert size > 200e6
    out = tmp_path / "big.safetensors"
    run = subprocess.run([sys.executable, "-c", CHILD.format(pylib=str(ROOT / "pylib"), src=str(src),
                                                             out=str(out))],
                         capture_output=True, text=True, check=True)
    base_kb, peak_kb, seconds = run.stdout.split()
    peak = int(peak_kb) * 1024
    print(f"converted {size / 1e6:.0f} MB in {float(seconds):.2f} s, peak RSS {peak / 1e6:.0f} MB "
          f"(after import {int(base_kb) * 1024 / 1e6:.0f} MB)")
    assert peak < size / 3
    assert peak - int(base_kb) * 1024 < 3 * writer.CHUNK_BYTES    # a chunk or two, not a tensor
    with safe_open(str(out), "pt") as f:
        for name in ("layer.0.weight", "layer.7.weight"):
            assert torch.equal(f.get_tensor(name), tensors[name])
