"""Header attacks of issue 10 on safetensors, shard indexes and split GGUF, driven through the CLI:
one line naming the file and exit 3, never a traceback, a hang or gigabytes of memory. The files
come from fixtures/hostile_headers.py."""

import struct
import subprocess
import sys
from pathlib import Path

import pytest

import hostile_headers
import tensorloupe
from tensorloupe.cli import main
from tensorloupe.errors import FormatError, LimitError, TensorloupeError
from tensorloupe.display import human_bytes, human_count

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return hostile_headers.write_all(tmp_path_factory.mktemp("hostile-headers"))


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_exit_3(capsys, *argv) -> str:
    code, out, err = cli(capsys, *argv)
    assert code == 3, (code, out, err[-2000:])
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    return err


def test_json_integer_over_4300_digits(capsys, files):
    # json.loads raises ValueError (not JSONDecodeError) for it: it escaped as a traceback.
    err = one_line_exit_3(capsys, "inspect", files["st_bigint"])
    assert "st-bigint.safetensors: safetensors: the header is not valid JSON" in err
    assert "4300 digits" in err


def test_more_than_64_dims(capsys, files):
    # torch's limit; beyond it no real tensor exists and the arithmetic only costs.
    err = one_line_exit_3(capsys, "inspect", files["st_65_dims"])
    assert "tensor 't' has 65 dimensions (expected at most 64; found 65)" in err


def test_dims_bomb_is_refused_before_any_arithmetic(capsys, files):
    # 100,000 dims of 2: math.prod (quadratic) then str() of a 30,000-digit count raised ValueError.
    with pytest.raises(LimitError, match="100,000 dimensions"):
        tensorloupe.open(files["st_dims_bomb"])
    one_line_exit_3(capsys, "inspect", files["st_dims_bomb"])


@pytest.mark.parametrize("shape, message", [
    ([2**64], "invalid shape"), ([-1], "invalid shape"), ([1.0], "invalid shape")])
def test_dims_beyond_usize(tmp_path, shape, message):
    # The reference reader parses dims as usize; a bigger one was accepted before.
    path = tmp_path / "x.safetensors"
    import json
    path.write_bytes(hostile_headers.safetensors_bytes(
        json.dumps({"t": {"dtype": "F32", "shape": shape, "data_offsets": [0, 4]}}), b"\0" * 4))
    with pytest.raises(FormatError, match=message):
        tensorloupe.open(path)


def test_astronomical_parameter_count_in_the_text_report(capsys, files):
    # An unknown dtype is not checked against data_offsets, so its shape is free: 64 dims of
    # 2**64 - 1. human_count converted that to float: OverflowError.
    code, out, err = cli(capsys, "inspect", files["st_huge_count"])
    assert code == 0 and "Traceback" not in err, err
    assert "1.04e1233" in out  # (2**64 - 1)**64 ~ 1.04e1233, printed by integer arithmetic


def test_human_count_and_bytes_of_any_size():
    assert human_count((2**64 - 1) ** 64) == "1.04e1233"
    assert human_count(10**5000) == "1.00e5000"      # str() of it would raise ValueError
    assert human_bytes(10**5000) == "1.00e5000 B"
    assert human_count(1234) == "1.23K" and human_bytes(1536) == "1.5 KiB"


def test_error_message_with_an_integer_too_long_to_print():
    e = FormatError("bad", file="f", found=10**5000)
    assert str(e) == "f: bad (found an integer of 16,610 bits)"


def test_shard_index_with_an_integer_over_4300_digits(capsys, files):
    err = one_line_exit_3(capsys, "inspect", files["bigint_index"], files["bigint_index_shard"])
    assert "model.safetensors.index.json: shard index: the index is not valid JSON: it holds an " \
        "integer of more than 4,300 digits" in err and "set_int_max_str_digits" not in err


def test_split_gguf_claiming_2_to_the_40_parts_fails_at_once(files):
    # The missing-parts list was built over range(split.count): a 30 s hang past 2.8 GB. In a
    # subprocess so that a regression fails by timeout instead of hanging the suite.
    run = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect",
                          files["split_2e40_1"], files["split_2e40_2"]],
                         capture_output=True, text=True, timeout=20, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT / "pylib"), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 3, run.stderr[-2000:]
    assert run.stderr.strip() == ("tensorloupe: big-00001-of-00002.gguf: gguf: split.count "
                                  "1,099,511,627,776 is more parts than any split model has "
                                  "(expected at most 65,535; found 1,099,511,627,776)")


def test_missing_parts_are_listed_up_to_a_bound_and_counted(tmp_path):
    # 65535 parts (the largest count llama.cpp can write), one given: 20 named, the rest counted.
    path = tmp_path / "big-00001-of-65535.gguf"
    path.write_bytes(hostile_headers.gguf_part(0, 65535, "a"))
    ckpt = tensorloupe.open([path])
    shards = ckpt.extras["shards"]
    assert shards["count"] == 65535 and shards["missing_count"] == 65534
    assert shards["missing"][:2] == ["big-00002-of-65535.gguf", "big-00003-of-65535.gguf"]
    assert len(shards["missing"]) == 20 and len(ckpt.warnings) == 21
    assert ckpt.warnings[-1] == "65,514 more of the 65,535 parts are missing"


def test_a_lone_part_says_so_in_structured_form(files):
    ckpt = tensorloupe.open(files["split_2e40_2"])
    assert ckpt.extras["split"] == {"no": 1, "count": 2**40}
    assert ckpt.warnings == [f"this is part 2 of {2**40:,} of a split model: open all parts "
                             "together to see every tensor"]


def test_every_hostile_header_gives_a_library_error_or_opens(files):
    for name, path in files.items():
        try:
            tensorloupe.open(path).close()
        except TensorloupeError:
            pass


def test_statistics_of_values_near_the_float64_limit():
    # Found by bench/fuzz.py (pytorch-legacy input 161800): math.fsum raised OverflowError
    # ("intermediate overflow in fsum") for two values of 1.7e308.
    from tensorloupe.sampler.stats import compute
    s = compute([1.7e308, 1.7e308, -1e308])
    assert s.mean == pytest.approx(8e307) and s.max == 1.7e308
    assert compute([1.7e308, -1.7e308]).std == float("inf")  # the true spread is beyond float64


def _one_tensor_file(name_json: bytes) -> bytes:
    raw = b'{"' + name_json + b'": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    return struct.pack("<Q", len(raw)) + raw + b"\0" * 4


def test_a_lone_surrogate_in_the_header_is_refused_as_the_rust_reader_refuses_it(tmp_path):
    # "\ud800" decodes to half a UTF-16 pair: no UTF-8 text holds it (printing it was a
    # UnicodeEncodeError traceback); safetensors' Rust reader refuses the header.
    if sys.platform == "emscripten":     # Pyodide runs this file too: our side only there
        safetensors = None
    else:
        import safetensors
    for escaped_name in (rb"\ud800", rb"w\udfff", rb"\ud83dx"):
        path = tmp_path / "s.safetensors"
        path.write_bytes(_one_tensor_file(escaped_name))
        if safetensors:
            with pytest.raises(Exception, match="hex escape"):
                safetensors.safe_open(str(path), "np")
        with pytest.raises(FormatError, match="lone UTF-16 surrogate"):
            tensorloupe.open(path)
    # a pair (a character beyond the BMP) is text, and both readers take it
    path.write_bytes(_one_tensor_file(rb"\ud83d\ude00"))
    if safetensors:
        with safetensors.safe_open(str(path), "np") as f:
            assert list(f.keys()) == ["\U0001F600"]
    assert [t.name for t in tensorloupe.open(path).tensors] == ["\U0001F600"]
