"""A transformers Trainer checkpoint-2/ folder (fixtures/training_files.py, written by the Trainer
itself) dropped on the page: it opens as the model, with the same parameter total as `tensorloupe
inspect --json`, and the Summary lists the same training parts (optimizer, RNG, scheduler,
trainer state, training arguments) with each pickle part's own safety verdict."""

from __future__ import annotations

import pytest

import training_files

from conftest import STEP_TIMEOUT_MS
from page_checks import cli_inspect


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return training_files.write_trainer(tmp_path_factory.mktemp("training-page") / "trainer")


def test_the_dropped_trainer_folder_has_the_cli_s_model_and_training_parts(app, folder):
    doc = cli_inspect(folder)
    before = app.opened()
    app.drop_paths(folder)
    app.wait_model(doc["file"], before)
    app.tab("summary")
    app.page.wait_for_selector("#training tbody tr", timeout=STEP_TIMEOUT_MS)
    detail = app.page.inner_text("#panel-summary .fact[data-key=parameters] .fact-detail")
    assert detail == f"{doc['parameters']:,}" == "90,432"
    rows = app.page.eval_on_selector_all(
        "#training tbody tr", "rows => rows.map(r => [r.dataset.file, r.dataset.kind,"
        " Number(r.dataset.dangerous), r.querySelector('.training-summary > span').textContent])")
    want = doc["extras"]["training"]["parts"]
    assert [r[:3] for r in rows] == [
        [p["file"], p["kind"], len((p.get("safety") or {}).get("dangerous", []))] for p in want]
    assert [r[0] for r in rows] == ["optimizer.pt", "rng_state.pth", "scheduler.pt",
                                    "trainer_state.json", "training_args.bin"]
    assert rows[-1][2] == 9          # TrainingArguments and the enums it names: never loaded
    moments = want[0]["summary"]["moments"]
    assert f"exp_avg {moments['exp_avg']['values']:,} values" in rows[0][3]
    assert "global_step 2" in rows[3][3]
    assert app.page.get_attribute("#training", "data-kind") == "transformers Trainer"
    # what torch.load(weights_only=True) does, as the CLI says it: refused (rng_state.pth, ...)
    loads = doc["extras"]["safety"]["weights_only"]
    assert loads["loads"] is False and "rng_state.pth" in loads["files"]
    assert app.page.get_attribute("#safety .weights-only", "data-loads") == "false"
    line = app.page.inner_text("#safety .weights-only")
    assert line.startswith("torch.load(weights_only=True), torch's default since 2.6: refuses it "
                           f"(globals: {', '.join(loads['refused'])})")
    assert loads["why"] in line
    per_file = app.page.eval_on_selector_all("#training tbody tr", "rows => rows.map(r => r.dataset.loads)")
    assert per_file == [str(p["safety"]["weights_only"]["loads"]).lower() if p.get("safety") else None
                        for p in want] == ["true", "false", "true", None, "false"]
