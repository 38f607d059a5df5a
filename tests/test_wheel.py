"""The built wheel is the CLI (issue 27): `python -m build` makes a wheel from a copy of the
sources, `pip install` puts it into a fresh venv that holds nothing else, and the `tensorloupe`
command there runs: --help, then the demo model written and inspected.

`python -m build` is run outside the checkout: at its root `-m build` finds our own build.py
(the app builder) first. `--no-isolation` builds with this environment's setuptools, so the
test needs no network; the wheel has no dependencies to fetch either."""

import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*argv, cwd=None) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_cli(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "pylib", src / "pylib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp_path / "dist", src,
        cwd=tmp_path)
    [wheel] = (tmp_path / "dist").glob("tensorloupe-*.whl")
    venv.create(tmp_path / "venv")   # without pip of its own: this pip installs into it (--python)
    bin_dir = tmp_path / "venv" / "bin"
    run(sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "--no-index",
        "--no-deps", "-q", wheel)
    assert "Look inside model checkpoints" in run(bin_dir / "tensorloupe", "--help", cwd=tmp_path)
    run(bin_dir / "tensorloupe", "demo", "--out", tmp_path / "demo.safetensors", cwd=tmp_path)
    report = run(bin_dir / "tensorloupe", "inspect", tmp_path / "demo.safetensors", cwd=tmp_path)
    assert "MixtralForCausalLM" in report and "127" in report
    # the installed package is the wheel's, not this checkout's
    where = run(bin_dir / "python", "-c", "import tensorloupe; print(tensorloupe.__file__)", cwd=tmp_path)
    assert where.startswith(str(tmp_path / "venv"))
