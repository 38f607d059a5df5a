"""A TorchScript archive (torch.jit.save) is named TorchScript and gets one verdict: its classes,
the distinct `__torch__` globals its data and constants pickles name (read by torch's own archive
reader, listed by pickletools), folded into one line, and its code files, the archive's `code/`
members, listed with their sizes; never run. --strict still fails on it."""

import io
import pickletools
import zipfile

import pytest
import torch

import tensorloupe
from tensorloupe.cli import main


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        return x * self.scale


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.proj = torch.nn.Linear(3, 2)
        self.register_buffer("table", torch.arange(6.0).reshape(2, 3))

    def forward(self, x):
        return self.proj(self.inner(x)) + self.table.sum()


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    path = tmp_path_factory.mktemp("jit") / "outer.pt"
    with pytest.warns(DeprecationWarning):
        torch.jit.save(torch.jit.script(Outer()), str(path))
    return path


def torch_classes(path) -> set[str]:
    """The __torch__ globals of data.pkl and constants.pkl, as torch's archive reader gives them."""
    reader = torch._C.PyTorchFileReader(str(path))
    names = set()
    for record in ("data.pkl", "constants.pkl"):
        strings: list[str] = []
        for op, arg, _ in pickletools.genops(io.BytesIO(reader.get_record(record))):
            if op.name == "GLOBAL":
                names.add(arg.replace(" ", "."))
            elif op.name == "STACK_GLOBAL":
                names.add(".".join(strings[-2:]))
            elif isinstance(arg, str):
                strings.append(arg)
    return {n for n in names if n.startswith("__torch__.")}


def test_classes_and_code_files_are_torch_s(archive):
    with zipfile.ZipFile(archive) as z:
        root = z.namelist()[0].split("/")[0] + "/"
        code = {i.filename[len(root):]: i.file_size for i in z.infolist()
                if i.filename.startswith(root + "code/")}
    classes = torch_classes(archive)
    assert len(classes) >= 2 and code
    with tensorloupe.open(archive) as ckpt:
        script = ckpt.extras["torchscript"]
        assert script["format"] == "TorchScript"
        assert {f["name"]: f["size"] for f in script["code"]} == code and script["code_files"] == len(code)
        assert set(script["classes"]) == classes
        assert script["headline"] == (f"loading runs its TorchScript code (torch.jit.load): "
                                      f"{len(classes)} classes, {len(code)} code files")
        assert ckpt.extras["safety"]["torchscript"] is script
        assert set(classes) <= set(ckpt.extras["safety"]["dangerous"])   # still dangerous data


def test_inspect_says_it_once_and_strict_fails(archive, capsys):
    assert main(["inspect", str(archive)]) == 0
    out = capsys.readouterr().out
    classes = sorted(torch_classes(archive))
    assert "  format      TorchScript (a pytorch-zip archive)" in out
    report = out.split("Pickle safety report", 1)[1].split("\nWarnings", 1)[0]
    assert report.count("DANGEROUS") == 1 and "loading runs its TorchScript code (torch.jit.load)" in report
    assert f"    classes ({len(classes)}): {', '.join(classes)}" in report
    for name in classes:    # the class names once, on the one line
        assert report.count(name) == 1, name
    assert main(["inspect", "--strict", str(archive)]) != 0
