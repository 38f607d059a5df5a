"""The unpickler's object count on a real torch.save state_dict (CPython only: torch is the
oracle, and Pyodide runs test_unpickle.py without it)."""

import io
import tracemalloc
import zipfile

import torch

from tensorloupe.formats.pytorch import allowlist
from tensorloupe.formats.pytorch.common import storage_loader
from tensorloupe.unpickling.machine import unpickle


def test_the_count_of_a_real_state_dict_is_close_to_its_memory():
    # the budget is stated in tensors (values.Limits): a torch.save state_dict must cost what it
    # takes, within a factor 2 (the count never refunds what is freed: MARK lists, call args)
    state = {f"layers.{i // 10}.block.{i % 10}.weight": torch.zeros(2, 2) for i in range(5000)}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with zipfile.ZipFile(buffer) as archive:
        data = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
    tracemalloc.start()
    try:
        result = unpickle(data, allowlist.resolve, storage_loader())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= result.cost <= 2 * peak
    per_tensor = result.cost / len(state)
    assert 1000 < per_tensor < 2000  # so 80 MiB is ~40,000-80,000 tensors (values.Limits)
