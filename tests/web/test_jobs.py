"""The worker's one job mechanism (tensorloupe.web.jobs): start, steps with progress, the result
with the last step, cancel, and what happens to a job that fails or is asked for after its end."""

import pytest

from tensorloupe.errors import FormatError, UsageError
from tensorloupe.web.jobs import Job, Jobs


def counting(n: int, fail_at: int | None = None):
    """Steps of a job that counts to n (its state: the numbers so far)."""
    seen = []
    for i in range(1, n + 1):
        if i == fail_at:
            raise FormatError("a bad block", file="x.bin", offset=i)
        seen.append(i)
        yield i, n, list(seen)


def test_a_job_reports_progress_then_its_result_once():
    finished = []
    jobs = Jobs()
    job = Job("counting", counting(3), 3, state=[], result=lambda seen: {"sum": sum(seen)},
              progress=lambda seen: {"last": seen[-1] if seen else None}, on_finish=finished.append)
    assert jobs.start(job) == {"job": 1, "finished": False, "done": 0, "total": 3, "last": None}
    assert jobs.step(1) == {"job": 1, "finished": False, "done": 1, "total": 3, "last": 1}
    assert jobs.step(1) == {"job": 1, "finished": False, "done": 2, "total": 3, "last": 2}
    assert jobs.step(1) == {"job": 1, "finished": True, "done": 3, "total": 3, "last": 3, "sum": 6}
    assert finished == [[1, 2, 3]]
    with pytest.raises(UsageError, match="job 1 is not running"):
        jobs.step(1)                        # a late step after the end: refused, not repeated


def test_cancel_drops_the_job_and_numbers_are_never_reused():
    jobs = Jobs()
    first = jobs.start(Job("counting", counting(5), 5, result=dict))["job"]
    jobs.step(first)
    assert jobs.cancel(first) == {"cancelled": True}
    assert jobs.cancel(first) == {"cancelled": False}      # a second cancel (a late message)
    with pytest.raises(UsageError, match="not running"):
        jobs.step(first)
    second = jobs.start(Job("counting", counting(5), 5, result=dict))["job"]
    assert second == first + 1


def test_a_failed_step_ends_the_job_with_its_error():
    jobs = Jobs()
    number = jobs.start(Job("counting", counting(5, fail_at=2), 5, result=dict))["job"]
    jobs.step(number)
    with pytest.raises(FormatError, match="a bad block"):
        jobs.step(number)
    assert jobs.running == {}


def test_a_custom_end_and_an_iterator_that_runs_out():
    # finished() decides the end (the analysis: when it is complete, not when done == total) ...
    jobs = Jobs()
    number = jobs.start(Job("halfway", counting(4), 4, result=lambda seen: {"seen": seen},
                            finished=lambda done, total, seen: done == 2))["job"]
    jobs.step(number)
    assert jobs.step(number)["seen"] == [1, 2]
    # ... and an iterator that stops early finishes the job with the state it reached.
    short = ((i, 9, list(range(1, i + 1))) for i in (1, 2))   # says 9, stops after 2
    number = jobs.start(Job("short", short, 9, state=[], result=lambda seen: {"seen": seen}))["job"]
    replies = [jobs.step(number) for _ in range(3)]
    assert [r["finished"] for r in replies] == [False, False, True] and replies[-1]["seen"] == [1, 2]


def test_a_sliced_job_takes_steps_until_its_time_is_up(monkeypatch):
    # slice_seconds: one request runs steps until that long has passed, at least one; the
    # clock is ours here: every step "takes" 10 ms.
    now = [0.0]
    monkeypatch.setattr("tensorloupe.web.jobs.time.perf_counter", lambda: now[0])

    def slow(n):
        for done, total, seen in counting(n):
            now[0] += 0.010
            yield done, total, seen

    jobs = Jobs()
    number = jobs.start(Job("sliced", slow(10), 10, result=lambda seen: {"sum": sum(seen)},
                            slice_seconds=0.025))["job"]
    assert jobs.step(number)["done"] == 3          # 10, 20, 30 ms: the third passes 25 ms
    assert jobs.step(number)["done"] == 6
    longer = jobs.start(Job("one at a time", slow(10), 10, result=dict, slice_seconds=0.001))["job"]
    assert jobs.step(longer)["done"] == 1          # a step longer than the slice: still one
    rest = [jobs.step(number) for _ in range(2)]
    assert [r["done"] for r in rest] == [9, 10] and rest[-1]["finished"] and rest[-1]["sum"] == 55
