"""Hostile GGUF headers, one attack per test, each with the exact error and offset it must get; then
a property: random corruption of a valid file raises nothing but tensorloupe's own errors."""

import struct

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gguf_files as fx  # noqa: E402

import tensorloupe  # noqa: E402
from tensorloupe.errors import FormatError, LimitError, TensorloupeError, TruncatedError
from tensorloupe.formats.gguf import reader as tg  # noqa: E402
from tensorloupe.formats.gguf import metadata as gguf_meta  # noqa: E402
from tensorloupe.source.base import MemorySource  # noqa: E402

STRING, ARRAY, U32, F32_T = 8, 9, 4, 6
KV_START = 24  # magic, version, two uint64 counts
F32 = struct.pack("<4f", 1, 2, 3, 4)


def read(raw: bytes):
    return tg.read(MemorySource(raw, "bad.gguf"))


def refused(raw: bytes, cls, fragment: str, offset: int | None):
    with pytest.raises(cls) as caught:
        read(raw)
    e = caught.value
    assert fragment in e.message, e.message
    assert e.offset == offset and e.file == "bad.gguf" and e.format == "gguf"
    return e


def patch(raw: bytes, at: int, fmt: str, value) -> bytes:
    out = bytearray(raw)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


# --- the fixed header -----------------------------------------------------------------------------

def test_wrong_magic():
    refused(b"GGML" + bytes(20), FormatError, "not a GGUF file", 0)


def test_shorter_than_magic_and_version():
    refused(b"GGUF\x03", TruncatedError, "only 5 bytes", 0)


@pytest.mark.parametrize("version", [0, 4, 0x7FFF])
def test_unsupported_version(version):
    e = refused(b"GGUF" + struct.pack("<IQQ", version, 0, 0), FormatError,
                f"version {version} is not supported", 4)
    assert e.found == version


def test_tensor_count_larger_than_the_file():
    # 2^40 tensor infos of at least 24 bytes each cannot fit in a 24-byte file.
    raw = fx.raw_gguf(counts=(1 << 40, 0), pad=False)
    refused(raw, TruncatedError, f"claims {1 << 40:,} tensors", 8)


def test_kv_count_larger_than_the_file():
    raw = fx.raw_gguf([("a", U32, 1)], counts=(0, 1_000_000), pad=False)
    refused(raw, TruncatedError, "claims 1,000,000 metadata key/value pairs", 16)


def test_version_1_counts_are_uint32():
    raw = fx.raw_gguf(version=1, counts=(0, 0xFFFFFFFF), pad=False)
    refused(raw, TruncatedError, "claims 4,294,967,295 metadata", 12)


# --- metadata ---------------------------------------------------------------------------------------

def test_array_length_larger_than_the_file():
    raw = fx.raw_gguf([("a", ARRAY, (U32, [1, 2, 3]))], pad=False)
    length_at = KV_START + 8 + 1 + 4 + 4  # key length, "a", value type, element type
    refused(patch(raw, length_at, "<Q", 1 << 60), TruncatedError, f"claims {1 << 60:,} uint32", length_at)


def test_string_value_of_2_to_the_40_bytes():
    raw = fx.raw_gguf([("s", STRING, "abc")], pad=False)
    length_at = KV_START + 8 + 1 + 4
    refused(patch(raw, length_at, "<Q", 1 << 40), TruncatedError, f"{1 << 40:,}-byte string",
            length_at)


def test_key_of_2_to_the_40_bytes():
    raw = patch(fx.raw_gguf([("k", U32, 1)], pad=False), KV_START, "<Q", 1 << 40)
    e = refused(raw, LimitError, "is 1,099,511,627,776 bytes long", KV_START)
    assert e.expected == f"at most {gguf_meta.MAX_NAME_BYTES:,} bytes"


def test_tensor_name_of_2_to_the_40_bytes():
    raw = patch(fx.raw_gguf([], [("w", (4,), 0, 0)], F32), KV_START, "<Q", 1 << 40)
    refused(raw, LimitError, "the name of tensor 0 is", KV_START)


def test_unknown_value_type():
    raw = fx.raw_gguf([("k", U32, 1)], pad=False)
    type_at = KV_START + 8 + 1
    e = refused(patch(raw, type_at, "<I", 13), FormatError, "unknown metadata value type", type_at)
    assert e.found == 13


def test_unknown_array_element_type():
    raw = fx.raw_gguf([("a", ARRAY, (U32, [1]))], pad=False)
    etype_at = KV_START + 8 + 1 + 4
    refused(patch(raw, etype_at, "<I", 0xFFFFFFFF), FormatError, "the element type of", etype_at)


def test_arrays_nested_too_deep():
    # Each level costs 12 bytes; without a limit 100k levels would exhaust Python's stack.
    value = (U32, [7])
    for _ in range(gguf_meta.MAX_ARRAY_DEPTH + 1):
        value = (ARRAY, [value])
    with pytest.raises(LimitError, match="nests arrays more than 16 deep"):
        read(fx.raw_gguf([("deep", ARRAY, value)], pad=False))


def test_lying_string_length_inside_a_lazy_array():
    tokens = [f"t{i}" for i in range(2000)]
    raw = fx.raw_gguf([("tokenizer.ggml.tokens", ARRAY, (STRING, tokens))], pad=False)
    at = raw.index(b"t1500") - 8  # the length field of string 1500
    e = refused(patch(raw, at, "<Q", 1 << 50), TruncatedError, "string 1,500 of", at)
    assert "runs past the end" in e.message


def test_duplicate_key():
    raw = fx.raw_gguf([("k", U32, 1), ("k", U32, 2)], pad=False)
    second = KV_START + 8 + 1 + 4 + 4
    e = refused(raw, FormatError, "metadata key 'k' appears twice", second)
    assert e.found == f"its first entry at byte {KV_START}"


def test_key_that_is_not_utf8():
    raw = fx.raw_gguf([(b"\xff\xfe", U32, 1)], pad=False)
    refused(raw, FormatError, "is not valid UTF-8", KV_START + 8)


def test_string_value_that_is_not_utf8_is_shown_not_refused():
    raw = fx.raw_gguf([("s", STRING, b"ok\xff")], pad=False)
    assert read(raw).metadata["s"] == "ok\ufffd"


@pytest.mark.parametrize("kv", [("general.alignment", U32, 0), ("general.alignment", U32, 48),
                                ("general.alignment", 5, -32), ("general.alignment", STRING, "32"),
                                ("general.alignment", F32_T, 32.0)])
def test_alignment_must_be_a_power_of_two(kv):
    raw = fx.raw_gguf([("general.name", STRING, "x"), kv], pad=False)
    refused(raw, FormatError, "general.alignment must be a power of two", KV_START + 8 + 12 + 4 + 8 + 1)


def test_alignment_of_another_integer_type_is_a_warning():
    raw = fx.raw_gguf([("general.alignment", 10, 64)], [("w", (4,), 0, 0)], F32, alignment=64)
    ckpt = read(raw)
    assert ckpt.extras["gguf"]["alignment"] == 64 and "uint64" in ckpt.warnings[0]
    assert tensorloupe.values(ckpt.tensor("w"), 0, 4) == [1.0, 2.0, 3.0, 4.0]


# --- tensor infos -----------------------------------------------------------------------------------

def tensor_info_at(raw_kvs=()) -> int:
    return len(fx.raw_gguf(raw_kvs, pad=False))


def test_too_many_dimensions():
    raw = fx.raw_gguf([], [("w", (1, 1, 1, 1, 4), 0, 0)], F32)
    e = refused(raw, FormatError, "has 5 dimensions", KV_START + 8 + 1)
    assert e.expected == "at most 4"


def test_dimensions_whose_product_overflows_int64():
    raw = fx.raw_gguf([], [("w", (1 << 32, 1 << 32), 0, 0)], F32)
    e = refused(raw, FormatError, "overflow ggml's 64-bit element count", KV_START + 8 + 1 + 4)
    assert e.found == 1 << 64


def test_one_dimension_above_int64():
    raw = fx.raw_gguf([], [("w", (1 << 63,), 0, 0)], F32)
    refused(raw, FormatError, "overflow", KV_START + 8 + 1 + 4)


def test_data_offset_past_the_end():
    raw = fx.raw_gguf([], [("w", (4,), 0, 1 << 40)], F32)
    offset_field = KV_START + 8 + 1 + 4 + 8 + 4
    e = refused(raw, TruncatedError, "starts past the end of the file", offset_field)
    assert e.found == f"byte {64 + (1 << 40):,}"


def test_tensor_data_past_the_end():
    raw = fx.raw_gguf([], [("w", (8,), 0, 0)], F32)  # 32 bytes promised, 16 present
    refused(raw, TruncatedError, "ends 16 bytes past the end of the file", KV_START + 8 + 1 + 4 + 8 + 4)


def test_unknown_type_past_the_end_is_refused():
    raw = fx.raw_gguf([], [("w", (4,), 200, 4096)], F32)
    refused(raw, TruncatedError, "starts past the end", KV_START + 8 + 1 + 4 + 8 + 4)


def test_rows_that_are_not_whole_blocks():
    raw = fx.raw_gguf([], [("q", (100, 2), int(Q.Q4_K), 0)], bytes(288))
    e = refused(raw, FormatError, "rows of 100 elements, not whole Q4_K blocks", KV_START)
    assert e.expected == "a multiple of 256"


def test_duplicate_tensor_name():
    raw = fx.raw_gguf([], [("w", (4,), 0, 0), ("w", (4,), 0, 0)], F32)
    refused(raw, FormatError, "tensor 'w' appears twice", KV_START + 8 + 1 + 4 + 8 + 12)


def test_data_section_start_past_the_end():
    raw = fx.raw_gguf([], [("w", (4,), 0, 0)], pad=False)
    refused(raw, TruncatedError, "ends before its data section starts", len(raw))


def test_misaligned_and_overlapping_tensors_are_warnings():
    raw = fx.raw_gguf([], [("a", (4,), 0, 0), ("b", (2,), 0, 4)], F32)
    ckpt = read(raw)
    assert any("not a multiple of the alignment" in w for w in ckpt.warnings)
    assert any("'b' overlaps the bytes of 'a'" in w for w in ckpt.warnings)
    assert tensorloupe.values(ckpt.tensor("b"), 0, 2) == [2.0, 3.0]


def test_every_truncation_of_a_valid_file_is_a_truncated_error():
    raw = fx.raw_gguf([("general.architecture", STRING, "llama"), ("a", ARRAY, (F32_T, [1.0, 2.0]))],
                      [("w", (4,), 0, 0)], F32)
    read(raw)
    for n in range(len(raw)):
        with pytest.raises(TruncatedError):
            read(raw[:n])


# --- random corruption --------------------------------------------------------------------------------

def _victim() -> bytes:
    rng = np.random.default_rng(3)
    q8 = fx.random_blocks(Q.Q8_0, 4, rng).tobytes()
    q4k = fx.random_blocks(Q.Q4_K, 1, rng).tobytes()
    data = F32 + bytes(16) + q8 + bytes(-len(q8) % 32) + q4k
    kvs = [("general.architecture", STRING, "llama"), ("llama.block_count", U32, 2),
           ("general.alignment", U32, 32), ("llama.rope.freq_base", F32_T, 10000.0),
           ("tokenizer.ggml.tokens", ARRAY, (STRING, [f"t{i}" for i in range(1100)])),
           ("tokenizer.ggml.scores", ARRAY, (F32_T, [0.5] * 1100)),
           ("nested", ARRAY, (ARRAY, [(U32, [1, 2]), (STRING, ["x"])]))]
    q8_at = 32
    tensors = [("w", (4,), 0, 0), ("q8", (64, 2), int(Q.Q8_0), q8_at),
               ("q4k", (256,), int(Q.Q4_K), q8_at + len(q8) + (-len(q8) % 32))]
    return fx.raw_gguf(kvs, tensors, data)


VICTIM = _victim()


@st.composite
def corruptions(draw):
    raw = bytearray(VICTIM)
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(raw) - 1))
        if draw(st.booleans()):
            raw[at] = draw(st.integers(0, 255))
        else:  # overwrite a length-sized field with an extreme value
            value = draw(st.sampled_from([0, 1, 0xFF, 0xFFFF, 0xFFFFFFFF, 1 << 40, (1 << 64) - 1]))
            raw[at:at + 8] = value.to_bytes(8, "little")
    if draw(st.booleans()):
        raw = raw[:draw(st.integers(0, len(raw)))]
    return bytes(raw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corruptions())
def test_random_corruption_raises_only_our_errors(raw):
    try:
        ckpt = read(raw)
        for key in ckpt.extras["gguf_arrays"]:
            tg.read_array(ckpt, key, 0, 2000)
        for t in ckpt.tensors:
            if t.problem is None:
                tensorloupe.sample(t, 64)
                tensorloupe.values(t, 0, 8)
        ckpt.extras["model_card"]
    except TensorloupeError:
        pass


def test_the_victim_itself_is_valid():
    ckpt = read(VICTIM)
    assert [t.name for t in ckpt.tensors] == ["w", "q8", "q4k"] and not ckpt.warnings
    assert tg.read_array(ckpt, "tokenizer.ggml.tokens", 1098, 5) == ["t1098", "t1099"]
