"""NeMo .nemo files (fixtures/nemo_files.py: NeMo's tar layout around torch.save of a tiny
state_dict and an OmegaConf-style model_config.yaml). Oracles: torch.load of the extracted
member (every tensor, every element) and PyYAML's safe_load of the config."""

import io
import sys
import tarfile
from pathlib import Path

import pytest
import torch
import yaml

import nemo_files

import tensorloupe
from tensorloupe.errors import FormatError, LimitError, TruncatedError, UnknownFormatError
from tensorloupe.formats import nemo
from tensorloupe.source import FileSource

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures" / "out" / "nemo"


@pytest.fixture(scope="module")
def files():
    if not (OUT / "tiny.nemo").exists():
        nemo_files.write_all(OUT.parent)
    return {"plain": OUT / "tiny.nemo", "gz": OUT / "tiny-gz.nemo", "ckpt": OUT / "model_weights.ckpt"}


def expected_config():
    config = yaml.safe_load(nemo_files.CONFIG)
    # PyYAML is YAML 1.1: "1.0e-03" without a sign after e is a string there; OmegaConf (what
    # NeMo reads configs with) resolves it as a float, and so does yamlish (YAML 1.2 core)
    config["optim"]["lr"] = float(config["optim"]["lr"])
    config["optim"]["sched"]["min_lr"] = float(config["optim"]["sched"]["min_lr"])
    return config


@pytest.mark.parametrize("key", ["plain", "gz"])
def test_tensors_equal_torch_load_of_the_member(files, key):
    ck = tensorloupe.open(files[key])
    assert ck.format == "nemo"
    ref = torch.load(files["ckpt"], weights_only=True)
    assert [t.name for t in ck.tensors] == list(ref)
    for t in ck.tensors:
        assert torch.equal(torch.from_numpy(t.numpy()), ref[t.name]), t.name
    assert ck.metadata["nemo.model_config"] == expected_config()
    assert ck.extras["nemo"]["target"] == "nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE"
    assert ck.extras["safety"]["dangerous"] == []
    assert ck.extras["nemo"]["gzipped"] is (key == "gz")
    assert any("gzipped" in w for w in ck.warnings) is (key == "gz")


def test_plain_nemo_is_read_in_place(tmp_path):
    """A 16 MB .nemo (bench/open_hdf5.py's) opens reading at most 64 KiB, and every
    tensor's bytes are inside the tar member, in the file itself."""
    sys.path.insert(0, str(ROOT / "bench"))
    import open_hdf5
    path = open_hdf5.write_nemo(tmp_path / "big.nemo")
    source = FileSource(path)
    ck = tensorloupe.open(source)
    ck.locate_all()
    assert source.bytes_read <= 64 << 10, source.bytes_read
    with tarfile.open(path) as tar:
        member = tar.getmember("./model_weights.ckpt")
    for t in ck.tensors:
        assert member.offset_data < t.locate() < member.offset_data + member.size
    ref = torch.load(io.BytesIO(tar_member(path)), weights_only=True)
    for t in ck.tensors:
        assert torch.equal(torch.from_numpy(t.numpy()), ref[t.name])


def tar_member(path) -> bytes:
    with tarfile.open(path) as tar:
        return tar.extractfile("./model_weights.ckpt").read()


def tar_of(*members):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:", format=tarfile.GNU_FORMAT) as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            info.type = kind
            if kind != tarfile.REGTYPE:
                info.linkname = "/etc/passwd"
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return buffer.getvalue()


def ckpt_bytes(files):
    return files["ckpt"].read_bytes()


def test_a_member_escaping_the_folder_is_refused(files, tmp_path):
    path = tmp_path / "escape.nemo"
    path.write_bytes(tar_of(("./model_config.yaml", b"a: 1\n", tarfile.REGTYPE),
                            ("../../outside.sh", b"rm -rf ~", tarfile.REGTYPE),
                            ("./model_weights.ckpt", ckpt_bytes(files), tarfile.REGTYPE)))
    with pytest.raises(FormatError, match=r"the tar member '../../outside.sh' escapes the archive"):
        tensorloupe.open(path)


def test_weights_that_are_a_link_are_refused(tmp_path):
    path = tmp_path / "link.nemo"
    path.write_bytes(tar_of(("./model_config.yaml", b"a: 1\n", tarfile.REGTYPE),
                            ("./model_weights.ckpt", b"", tarfile.SYMTYPE)))
    with pytest.raises(FormatError, match=r"is a link \(to '/etc/passwd'\)"):
        tensorloupe.open(path)


def test_truncated_nemo(files, tmp_path):
    data = files["plain"].read_bytes()
    path = tmp_path / "cut.nemo"
    path.write_bytes(data[:len(data) - 4096])
    with pytest.raises((TruncatedError, FormatError)):
        tensorloupe.open(path)


def test_no_weights_member(tmp_path):
    path = tmp_path / "empty.nemo"
    path.write_bytes(tar_of(("./model_config.yaml", b"a: 1\n", tarfile.REGTYPE)))
    with pytest.raises(UnknownFormatError, match="has no model_weights.ckpt"):
        tensorloupe.open(path)


def test_a_config_with_a_tag_is_not_shown_and_the_model_still_opens(files, tmp_path):
    path = tmp_path / "tagged.nemo"
    path.write_bytes(tar_of(("./model_config.yaml", b"a: !!python/object/apply:os.system [ls]\n",
                             tarfile.REGTYPE),
                            ("./model_weights.ckpt", ckpt_bytes(files), tarfile.REGTYPE)))
    ck = tensorloupe.open(path)
    assert "nemo.model_config" not in ck.metadata
    assert any("model_config.yaml is not shown: line 1: a YAML tag" in w for w in ck.warnings)
    assert len(ck.tensors) == len(torch.load(files["ckpt"], weights_only=True))


def test_a_gzip_bomb_is_refused_at_the_cap(files, tmp_path, monkeypatch):
    monkeypatch.setattr(nemo, "MAX_INFLATED", 4096)
    with pytest.raises(LimitError, match="inflates to more than 4,096 bytes"):
        tensorloupe.open(files["gz"])
