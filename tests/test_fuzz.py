"""A short pass of the fuzz harness (bench/fuzz.py) over every format: 2,000 mutated inputs each
(500 for ONNX, NumPy, DDUF and llamafile),
in one worker under an address-space limit, with no exception but the library's own, no input
over its time limit and none over 200 MB of RSS. docs/development.md says how to run the long pass."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import container_files  # noqa: E402
import fuzz  # noqa: E402
import fuzz_containers  # noqa: E402
import numpy_files  # noqa: E402
import onnx_files  # noqa: E402
import torch_files  # noqa: E402


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz-seeds")
    torch_files.write_all(out)
    for more in (onnx_files, numpy_files, container_files):   # fuzz_containers.py's seeds
        more.write_all(out)
    return out


# NeMo inputs are a tar around a torch ZIP (~50/s): fewer, so the pass stays a few seconds
INPUTS = {"nemo": 400}


@pytest.mark.parametrize("fmt", fuzz.FORMATS)
def test_short_fuzz_pass(fmt, seeds):
    # the container formats (ONNX, NumPy, DDUF, llamafile; HDF5, Keras, NeMo) are 7 more: a
    # shorter pass each (NeMo's inputs, tars of torch files, are the slowest)
    inputs = INPUTS.get(fmt, 500 if fmt in fuzz_containers.CONTAINER_FORMATS else 2000)
    result = fuzz.run(fmt, seconds=600, inputs=inputs, run_seed=1, timeout=20, rss_mb=200,
                      as_mb=1024, seeds_dir=seeds, save=None, log=lambda line: None)
    assert result["inputs"] == inputs
    assert result["findings"] == {} and result["hangs"] == 0, result
    assert result["opened"] > 100  # the mutators keep enough inputs valid to reach the sampler


def _spin_then_sleep(ready):
    import time
    while time.process_time() < 0.5:
        pass
    ready.set()
    time.sleep(30)


def test_hangs_are_measured_in_the_worker_cpu_time():
    """A hang is an input that used --timeout seconds of the worker's CPU, read from /proc: a
    process that spun for 0.5 s of CPU and then sleeps shows 0.5 s, however long it has existed
    and however loaded the machine is (wall time would count the other jobs)."""
    import multiprocessing
    import time
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_spin_then_sleep, args=(ready,))
    proc.start()
    try:
        assert ready.wait(60)
        first = fuzz.cpu_seconds(proc.pid)
        time.sleep(0.5)
        assert 0.5 <= first <= fuzz.cpu_seconds(proc.pid) < first + 0.1
    finally:
        proc.kill()
        proc.join()
