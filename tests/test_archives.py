"""DDUF and llamafile: ZIPs around safetensors and GGUF, read in place. DDUF files written by
huggingface_hub.export_folder_as_dduf, compared with read_dduf_file + safetensors; llamafile-layout
files (an executable, then a ZIP with a stored .gguf written by gguf-py), compared with
gguf.GGUFReader on the extracted member; attacks on both; the CLI."""

import io
import json
import zipfile

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize
from huggingface_hub import read_dduf_file
from safetensors.numpy import load as load_safetensors

import container_files as fx  # noqa: E402
from inline_bytes import zipped  # noqa: E402

import tensorloupe  # noqa: E402
from tensorloupe import cli  # noqa: E402
from tensorloupe.errors import FormatError, TensorloupeError, UnknownFormatError  # noqa: E402
from tensorloupe.formats.archives import dduf, llamafile  # noqa: E402
from tensorloupe.source.base import MemorySource  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return fx.write_all(tmp_path_factory.mktemp("containers"))


def test_dduf_equals_huggingface_hub_and_safetensors(files):
    entries = read_dduf_file(files["dduf"])
    expected = {}
    for name, entry in entries.items():
        if name.endswith(".safetensors"):
            with entry.as_mmap() as data:
                for key, value in load_safetensors(bytes(data)).items():
                    expected[f"{name.split('/')[0]}.{key}"] = value
    with tensorloupe.open(files["dduf"]) as ckpt:
        assert ckpt.format == "dduf"
        assert {t.name for t in ckpt.tensors} == set(expected)
        for t in ckpt.tensors:
            assert t.dtype == {"float32": "F32", "float16": "F16"}[str(expected[t.name].dtype)]
            assert np.array_equal(np.array(tensorloupe.values(t, 0, t.numel), expected[t.name].dtype)
                                  .reshape(t.shape), expected[t.name])
            # in place: the bytes at its offset in the .dduf are the tensor's
            raw = files["dduf"].read_bytes()
            assert raw[t.known_file_offset:t.known_file_offset + t.nbytes] == expected[t.name].tobytes()
        index = json.loads(entries["model_index.json"].read_text())
        components = ckpt.metadata["components"]
        assert ckpt.metadata["pipeline"] == index["_class_name"]
        assert components["unet"]["class"] == "UNet2DModel"
        assert components["scheduler"]["config"] == {"num_train_timesteps": 10}
        assert components["vae"]["files"] == ["diffusion_pytorch_model.safetensors"]


def test_dduf_open_reads_directory_and_headers_only(files, tmp_path):
    """A DDUF with a 4 MB unet opens reading its directory and the safetensors headers."""
    from safetensors.numpy import save_file
    from huggingface_hub import export_folder_as_dduf
    folder = tmp_path / "pipe"
    (folder / "unet").mkdir(parents=True)
    (folder / "model_index.json").write_text(json.dumps({"unet": ["diffusers", "UNet2DModel"]}))
    (folder / "unet" / "config.json").write_text("{}")
    save_file({"w": np.zeros((1024, 1024), np.float32)}, str(folder / "unet" / "m.safetensors"))
    export_folder_as_dduf(tmp_path / "big.dduf", folder)
    with tensorloupe.open(tmp_path / "big.dduf") as ckpt:
        assert ckpt.bytes_read() <= 3 * (64 << 10)
        assert (tmp_path / "big.dduf").stat().st_size > 4 << 20


def test_llamafile_equals_gguf_reader_on_the_member(files):
    with zipfile.ZipFile(files["llamafile"]) as z:
        member = z.read("tiny.gguf")
    theirs = gguf.GGUFReader(files["llamafile_gguf"])
    assert member == files["llamafile_gguf"].read_bytes()
    with tensorloupe.open(files["llamafile"]) as ckpt:
        assert ckpt.format == "gguf"
        assert ckpt.extras["container"]["format"] == "llamafile"
        assert ckpt.extras["container"]["offset"] % fx.ALIGN == 0
        assert ckpt.metadata["general.architecture"] == "llama"
        by_name = {t.name: t for t in theirs.tensors}
        assert [t.name for t in ckpt.tensors] == [t.name for t in theirs.tensors]
        for t in ckpt.tensors:
            ref = by_name[t.name]
            values = dequantize(ref.data, ref.tensor_type).reshape(-1)
            ours = np.array(tensorloupe.values(t, 0, t.numel), np.float64)
            assert np.array_equal(ours, values.astype(np.float64)), t.name
            # the offset is in the llamafile: the member's data offset plus the GGUF's own
            assert t.known_file_offset == ckpt.extras["container"]["offset"] + ref.data_offset


def test_llamafile_open_never_reads_the_executable(files, tmp_path):
    """A 4 MB executable before the ZIP: opening reads the GGUF header and the directory."""
    path = tmp_path / "big.llamafile"
    model = files["llamafile_gguf"]
    body = fx.EXECUTABLE + b"\0" * (4 << 20)
    with open(path, "wb") as f:
        f.write(body)
        with zipfile.ZipFile(f, "w") as z:
            z.writestr(zipfile.ZipInfo("tiny.gguf"), model.read_bytes())
    with tensorloupe.open(path) as ckpt:
        assert len(ckpt.tensors) == 3
        assert ckpt.bytes_read() <= 3 * (64 << 10)


# --- hostile ---------------------------------------------------------------------------------

def test_dduf_without_model_index():
    with pytest.raises(UnknownFormatError, match="no model_index.json"):
        dduf.read(MemorySource(zipped({"unet/config.json": "{}"}), "x.dduf"))


def test_dduf_compressed_member_is_refused():
    data = zipped({"model_index.json": "{}"}, zipfile.ZIP_DEFLATED)
    with pytest.raises(FormatError, match="compressed or encrypted"):
        dduf.read(MemorySource(data, "x.dduf"))


@pytest.mark.parametrize("name", ["a/b/c.json", "unet\\config.json", "../x.json", "run.py"])
def test_dduf_entry_names_outside_the_rules(name):
    data = zipped({"model_index.json": "{}", name: "{}"})
    with pytest.raises(FormatError, match="not a DDUF entry name"):
        dduf.read(MemorySource(data, "x.dduf"))


def test_dduf_folder_not_in_the_index():
    data = zipped({"model_index.json": "{}", "unet/config.json": "{}"})
    with pytest.raises(FormatError, match="not a component"):
        dduf.read(MemorySource(data, "x.dduf"))


def test_dduf_broken_safetensors_member_names_it(files):
    data = zipped({"model_index.json": json.dumps({"unet": ["d", "U"]}), "unet/config.json": "{}",
                   "unet/m.safetensors": b"\x10\0\0\0\0\0\0\0{broken"})
    with pytest.raises(TensorloupeError, match="member 'unet/m.safetensors'"):
        dduf.read(MemorySource(data, "x.dduf"))


def test_llamafile_without_a_gguf():
    data = zipped({"llamafile/args": "-m"}, prefix=fx.EXECUTABLE)
    with pytest.raises(UnknownFormatError, match="no .gguf member"):
        llamafile.read(MemorySource(data, "x.llamafile"))


def test_llamafile_with_a_deflated_gguf(files):
    data = zipped({"m.gguf": files["llamafile_gguf"].read_bytes()}, zipfile.ZIP_DEFLATED,
                  prefix=fx.EXECUTABLE)
    with pytest.raises(FormatError, match="cannot be read in place"):
        llamafile.read(MemorySource(data, "x.llamafile"))


def test_llamafile_truncated_gguf_names_the_member(files):
    data = zipped({"m.gguf": files["llamafile_gguf"].read_bytes()[:100]}, prefix=fx.EXECUTABLE)
    with pytest.raises(TensorloupeError, match="member 'm.gguf'"):
        llamafile.read(MemorySource(data, "x.llamafile"))


def test_cli_on_both(files, capsys, tmp_path):
    for path in (files["dduf"], files["llamafile"]):
        assert cli.main(["inspect", "--json", str(path)]) == 0
        report = json.loads(capsys.readouterr().out)
        assert len(report["tensors"]) in (3, 4)
        name = report["tensors"][0]["name"]
        for argv in (["values", str(path), name], ["stats", str(path), name], ["health", str(path)],
                     ["diff", str(path), str(path)],
                     ["convert", str(path), str(tmp_path / f"{path.stem}.safetensors")]):
            assert cli.main(argv) == 0, argv
            capsys.readouterr()
