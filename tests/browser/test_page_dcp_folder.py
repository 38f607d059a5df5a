"""Folders and counts on the page. A torch.distributed.checkpoint folder (fixtures/dcp_files.py: two gloo ranks sharding DTensors,
written by dcp.save) dropped on the page as a folder: it opens as one checkpoint with the numbers
of `tensorloupe inspect --json` (tensors, parameters), and the safety card says what
torch.load(weights_only=True) does with the .metadata, as the CLI does. A training dict
(fixtures/count_files.py) stores more values than its model has parameters: the Summary's header
says "values stored" and the model's parameters, as `inspect`'s does."""

from __future__ import annotations

import pytest

import count_files
import dcp_files
from page_checks import cli_inspect


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return dcp_files.write_sharded(tmp_path_factory.mktemp("dcp-page") / "dcp-sharded")


def test_the_dropped_dcp_folder_has_the_cli_s_numbers_and_verdict(app, folder):
    doc = cli_inspect(folder)
    assert doc["format"] == "torch-dcp" and doc["errors"] == []
    before = app.opened()
    app.drop_paths(folder)
    app.wait_model(doc["file"], before)
    app.tab("summary")
    assert app.fact("format") == "torch-dcp"
    detail = app.page.inner_text("#panel-summary .fact[data-key=parameters] .fact-detail")
    assert detail == f"{doc['parameters']:,}"
    assert app.fact("tensor_count") == f"{doc['tensor_count']:,}"
    loads = doc["extras"]["safety"]["weights_only"]
    assert loads["loads"] is False and ".metadata" in loads["files"]
    assert app.page.get_attribute("#safety .weights-only", "data-loads") == "false"
    line = app.page.inner_text("#safety .weights-only")
    assert line.startswith("torch.load(weights_only=True), torch's default since 2.6: refuses it")
    assert loads["why"] in line


def test_a_training_dict_s_header_says_values_stored_and_the_model_s_parameters(app, tmp_path):
    path = count_files.write_all(tmp_path)["counts/training_dict.pt"]
    doc = cli_inspect(path)
    total = doc["architecture"]["parameters"]["total"]
    assert total == 845 < doc["parameters"]
    before = app.opened()
    app.drop_paths(path)
    app.wait_model(doc["file"], before)
    app.tab("summary")
    app.page.wait_for_selector("#panel-summary .fact[data-key=model_parameters]")
    stored = "#panel-summary .fact[data-key=parameters]"
    assert app.page.text_content(f"{stored} .fact-label") == "values stored"
    assert app.page.inner_text(f"{stored} .fact-detail") == f"{doc['parameters']:,}"
    model = "#panel-summary .fact[data-key=model_parameters]"
    assert app.page.text_content(f"{model} .fact-label") == "parameters"
    assert app.page.inner_text(f"{model} .fact-detail") == f"{total:,}"
