"""A DeepSpeed ZeRO-2 checkpoint folder (fixtures/deepspeed_files.py: two gloo ranks, written by
DeepSpeed's own engine) dropped on the page as a folder: it opens as one model with the numbers of
`tensorloupe inspect --json` (format, tensors, parameters, the training parts beside it), and the
parameter whose fp32 master weights straddle the two ranks' flat partitions has the statistics of
`tensorloupe stats --json`, which test_deepspeed.py holds equal to DeepSpeed's zero_to_fp32."""

from __future__ import annotations

from pathlib import Path

import pytest

import deepspeed_files
from conftest import STEP_TIMEOUT_MS
from page_checks import assert_stats_equal, cli_inspect, cli_stats

ROOT = Path(__file__).resolve().parents[2]
STRADDLING = "n.weight"     # 3 elements in rank 0's partition, 4 in rank 1's


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    made = ROOT / "fixtures" / "out" / "deepspeed" / "zero2"
    if (made / "latest").exists():
        return made
    return deepspeed_files.write_all(tmp_path_factory.mktemp("zero-page"))["deepspeed/zero2"]


def test_the_dropped_zero2_folder_has_the_cli_s_numbers(app, folder):
    doc = cli_inspect(folder)
    assert doc["format"] == "deepspeed-zero" and doc["errors"] == []
    before = app.opened()
    app.drop_paths(folder)
    app.wait_model(doc["file"], before)
    app.tab("summary")
    assert app.fact("format") == "deepspeed-zero"
    assert app.fact("tensor_count") == f"{doc['tensor_count']:,}" == "7"
    app.page.wait_for_selector("#training tbody tr", timeout=STEP_TIMEOUT_MS)
    files = app.page.eval_on_selector_all("#training tbody tr", "rows => rows.map(r => r.dataset.file)")
    assert files == [p["file"] for p in doc["extras"]["training"]["parts"]]
    assert {"zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= set(files)
    app.tab("tensor")
    app.select(STRADDLING)
    expected = cli_stats(folder, STRADDLING)
    assert_stats_equal(app.stats(), expected["stats"])
    assert app.page.get_attribute("#stats", "data-samples") == str(expected["samples"]) == "7"
