"""Issue 27: every number a person reads is grouped ("12,345 bytes", not "12345 bytes").

Each test meets a message the way a user would (tensorloupe.open, a byte source, the CLI) and
checks that its sizes, counts and offsets are grouped, and that no run of four or more digits is
left ungrouped outside the names the message quotes (file names, tensor names, quoted header
text)."""

import json
import re
import struct

import pytest

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.errors import TruncatedError, UsageError
from tensorloupe.source import open_source

UNGROUPED = re.compile(r"(?<![\d,.])\d{4,}")


def ungrouped(text: str, *names: str) -> list[str]:
    """The runs of 4+ digits in `text` once the quoted parts and the given names are taken out."""
    for name in names:
        text = text.replace(name, "")
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "", text)
    return UNGROUPED.findall(text)


def safetensors_bytes(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def gguf_bytes(kv_count: int, tensors=(), data: bytes = b"") -> bytes:
    """A GGUF v3 file by hand: no metadata written (kv_count is what the header claims), the
    given (name, ne, ggml type, offset) tensor infos, padded to 32, then `data`."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), kv_count))
    for name, ne, ggml_type, offset in tensors:
        out += struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", ggml_type, offset)
    out += bytes(-len(out) % 32)
    return bytes(out + data)


def test_a_truncated_safetensors_file_says_its_sizes_grouped(tmp_path, capsys):
    # the header says 5,000 F32 values (20,000 bytes); the file holds 12,000 of them
    path = tmp_path / "short.safetensors"
    path.write_bytes(safetensors_bytes(
        {"weight": {"dtype": "F32", "shape": [5000], "data_offsets": [0, 20000]}}, bytes(12000)))
    assert path.stat().st_size > 10_000
    with pytest.raises(TruncatedError) as caught:
        tensorloupe.open(path)
    text = str(caught.value)
    assert "the file is 8,000 bytes shorter than its header says" in text, text
    assert "expected 20,000 data bytes; found 12,000" in text, text
    assert not ungrouped(text, path.name), text
    # the CLI prints the same message, grouped
    assert main(["inspect", str(path)]) == 3
    err = capsys.readouterr().err
    assert "8,000 bytes shorter" in err and "found 12,000" in err, err
    assert not ungrouped(err, path.name), err


def test_a_gguf_file_too_short_for_its_header_says_the_counts_grouped(tmp_path):
    path = tmp_path / "short.gguf"
    path.write_bytes(gguf_bytes(1_000_000))
    with pytest.raises(TruncatedError) as caught:
        tensorloupe.open(path)
    text = str(caught.value)
    assert "the header claims 1,000,000 metadata key/value pairs" in text, text
    assert re.search(r"expected at least \d{1,3}(,\d{3})+ bytes", text), text
    assert not ungrouped(text, path.name), text


def test_a_gguf_tensor_past_the_end_of_the_file_says_its_bytes_grouped(tmp_path):
    # tensor 'w' is 5,000 F32 values (20,000 bytes) but only 12,000 data bytes follow the header
    path = tmp_path / "cut.gguf"
    path.write_bytes(gguf_bytes(0, [("w", (5000,), 0, 0)], bytes(12000)))
    size = path.stat().st_size
    with pytest.raises(TruncatedError) as caught:
        tensorloupe.open(path)
    text = str(caught.value)
    start = size - 12000
    assert f"tensor 'w' ends {start + 20000 - size:,} bytes past the end of the file" in text, text
    assert f"expected bytes {start:,}..{start + 20000:,}; found file size {size:,}" in text, text
    assert not ungrouped(text, path.name), text


def test_an_npy_array_shorter_than_its_shape_says_its_bytes_grouped(tmp_path):
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000,), }"
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    path = tmp_path / "x.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(16))
    with pytest.raises(TruncatedError) as caught:
        tensorloupe.open(path)
    text = str(caught.value)
    assert "needs 8,000 bytes after its header, the file holds 16" in text, text
    # a shape is said as the list it is, [1000], like every shape
    assert not ungrouped(text, path.name, "shape [1000]"), text


def test_reads_outside_a_file_say_their_offsets_and_sizes_grouped(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(10_240))
    source = open_source(str(path))
    try:
        with pytest.raises(UsageError) as caught:
            source.read(-1, 12_345)
        text = str(caught.value)
        assert "invalid read of 12,345 bytes at offset -1" in text, text
        assert not ungrouped(text, path.name), text

        with pytest.raises(TruncatedError) as caught:
            source.read(10_200, 5_000)
        text = str(caught.value)
        assert "the file ends 4,960 bytes short of a 5,000-byte read" in text, text
        # the error's own offset, expected and found (errors.py) are grouped as well
        assert "at byte 10,200; expected 5,000 bytes; found 40 bytes (file size 10,240)" in text, text
        assert not ungrouped(text, path.name), text
    finally:
        source.close()


def test_a_shard_index_whose_total_size_lies_warns_with_grouped_sizes(tmp_path):
    weight_map = {}
    for no in (1, 2):
        name = f"model-0000{no}-of-00002.safetensors"
        tensor = f"layer{no}.weight"
        (tmp_path / name).write_bytes(safetensors_bytes(
            {tensor: {"dtype": "F32", "shape": [5000], "data_offsets": [0, 20000]}}, bytes(20000)))
        weight_map[tensor] = name
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 123_456_789}, "weight_map": weight_map}))
    with tensorloupe.open(index) as ckpt:
        warnings = [w for w in ckpt.warnings if "total_size" in w]
    assert warnings == ["the index's total_size is 123,456,789 bytes but the tensors hold 40,000"]
    assert not ungrouped(warnings[0]), warnings[0]
