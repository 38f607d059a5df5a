"""A TorchScript archive (torch.jit.save) as what it is: code that torch.jit.load runs.

torch.load refuses such an archive with weights_only=True and hands it to torch.jit.load, which
compiles and runs the Python-like source under `code/` and builds an object of each `__torch__`
class its pickles name. So a TorchScript archive gets one verdict, not one DANGEROUS row per
class: "loading runs its TorchScript code (torch.jit.load): N classes, M code files", with the
class names folded into one line and the code files listed (names and sizes; never executed,
never shown as trusted). Its globals stay in the safety report's data, so --strict still fails.
"""

from __future__ import annotations

from ...errors import TensorloupeError
from ...unpickling.objects import LIMITS

CLASS_PREFIX = "__torch__."       # TorchScript's namespace for the classes the archive compiles
FORMAT_NAME = "TorchScript"
MAX_CODE_FILES = 2000             # listed; a count says how many more


def summary(archive, root: str, pickles: list, load) -> dict:
    """extras["torchscript"]: the classes named by data.pkl (`pickles`) and constants.pkl (read
    here with `load`, the archive's allow-list unpickler), and the members under code/."""
    classes = {n for p in pickles for n in p.globals if n.startswith(CLASS_PREFIX)}
    notes = []
    member = archive.find(root + "constants.pkl")
    if member is not None:
        try:
            classes.update(n for n in load(archive.read(member, LIMITS.max_bytes, verify=False)).globals
                           if n.startswith(CLASS_PREFIX))
        except TensorloupeError as e:
            notes.append(f"{member}: {e.message}")
    code = sorted((name, info.file_size) for name, info in archive.members.items()
                  if name.startswith(root + "code/") and not name.endswith("/"))
    out = {"format": FORMAT_NAME, "classes": sorted(classes), "code_files": len(code),
           "code": [{"name": name[len(root):], "size": size} for name, size in code[:MAX_CODE_FILES]],
           "headline": headline(len(classes), len(code))}
    if notes:
        out["notes"] = notes
    return out


def headline(classes: int, code_files: int) -> str:
    return (f"loading runs its TorchScript code (torch.jit.load): {classes:,} "
            f"{'class' if classes == 1 else 'classes'}, {code_files:,} code "
            f"{'file' if code_files == 1 else 'files'}")


def folded(name: str) -> bool:
    """Whether a global is one of the TorchScript classes the headline stands for."""
    return name.startswith(CLASS_PREFIX)
