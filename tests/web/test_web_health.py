"""The Health tab's worker requests (tensorloupe.web.health_ops) in CPython: the plan is
health_cost's, the job's steps end with `tensorloupe health --json`'s report, a budget of 0 is
refused, and a cancelled scan stops reading."""

import json

import pytest

import health_files
import tensorloupe
from tensorloupe.errors import UsageError
from tensorloupe.healthscan import health, health_cost
from tensorloupe.web import health_ops
from tensorloupe.web.handlers import Session


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    return health_files.write_all(tmp_path_factory.mktemp("health"))["health_faults"]


def opened(path) -> Session:
    session = Session()
    session.op_open({"path": str(path)})
    return session


def test_plan_then_job_give_the_cli_report(faults):
    session = opened(faults)
    plan, _ = session.op_health_plan({})
    with tensorloupe.open(faults) as ckpt:
        assert plan == {**health_cost(ckpt).to_json(), "file_size": ckpt.size}
        expected = json.loads(json.dumps(health(ckpt).to_json()))
    start, _ = session.op_health_start({})
    assert start["finished"] is False and start["total"] == 57
    steps = []
    while True:
        reply = session.jobs.step(start["job"])
        steps.append(reply)
        if reply["finished"]:
            break
    assert [s["phase"] for s in steps].count("done") == 1 and steps[-1]["phase"] == "done"
    assert json.loads(json.dumps(steps[-1]["report"])) == expected


def test_a_cancelled_scan_reads_no_more(faults, monkeypatch):
    # one tensor (or window) per request, so that five requests leave the scan mid-way
    monkeypatch.setattr(health_ops, "STEP_SECONDS", 0.0)
    session = opened(faults)
    number = session.op_health_start({})[0]["job"]
    for _ in range(5):
        session.jobs.step(number)
    read = session.checkpoint.bytes_read()
    assert session.jobs.cancel(number) == {"cancelled": True}
    with pytest.raises(UsageError, match="not running"):
        session.jobs.step(number)
    assert session.checkpoint.bytes_read() == read


def test_a_budget_below_one_byte_is_refused(faults):
    with pytest.raises(UsageError, match="at least 1"):
        opened(faults).op_health_plan({"budget": 0})
