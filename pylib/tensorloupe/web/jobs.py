"""Long work in the worker as jobs: done one step per request, so that the worker answers other
messages (a Cancel above all) between the steps. Exact statistics and the experts' redundancy
analysis are jobs; a new one is an `op_<name>_start` handler that returns `jobs.start(Job(...))`.

The protocol, page <-> web/worker.mjs <-> Python:
  start     the page asks for `<name>` as an ordinary request {id, op, args}. The worker knows it
            is a job (the "hello" reply lists the names: Session.job_names) and calls
            `<name>_start` (args): the handler builds a Job and returns `Jobs.start(job)`,
            {"job": number, "finished": false, "done", "total", ...}, sent to the page as the
            request's first progress.
  step      one `job_step` {"job": number} per worker task (other messages are read in between):
            {"job", "finished", "done", "total", ...progress} after each step, sent to the page as
            progress; the step that finishes adds the job's result and is the request's reply.
  cancel    the page posts {type: "cancel", id}; before the next step the worker calls
            `job_cancel` {"job": number}, which drops the job (a later `job_step` for it is a
            UsageError: "not running"), and the request fails with kind "Cancelled".
  late messages  the page keys everything by request id: once a request is settled (done,
            failed or cancelled) a progress or reply carrying its id matches nothing and is
            ignored (web/worker-client.js), and a view that moved on (another tensor, another
            file) ignores replies from before through its own generation counter.

A Job wraps `steps`, an iterator of (done, total, state) triples; what a job sends is a
function of its latest state. Opening another checkpoint drops every job (Jobs.clear).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

from ..errors import UsageError

Steps = Iterator[tuple[int, int, Any]]


class Job:
    """One piece of long work. `label` names it in messages; `steps` yields (done, total,
    state) once per step; `total` is known before the first step; `state` is the state before
    it. `finished(done, total, state)` says whether a step was the last (default: done reached
    total; the iterator running out finishes the job too); `progress(state)` adds fields to the
    progress sent after each step; `result(state)` is the JSON added to the last reply;
    `on_finish(state)` runs once when the job finishes (e.g. to keep the analysis).
    `slice_seconds`: a request takes steps until this long has passed (0: one step), for jobs
    of many short steps, where a round trip to the page per step would cost more than the step
    (the health scan: ~2,300 steps of a millisecond or two for a 135M-parameter GGUF)."""

    def __init__(self, label: str, steps: Steps, total: int, *, result: Callable[[Any], dict],
                 state: Any = None, progress: Callable[[Any], dict] | None = None,
                 finished: Callable[[int, int, Any], bool] | None = None,
                 on_finish: Callable[[Any], None] | None = None, slice_seconds: float = 0.0):
        self.label = label
        self.steps = steps
        self.slice_seconds = slice_seconds
        self.done, self.total, self.state = 0, total, state
        self._result = result
        self._progress = progress or (lambda state: {})
        self._finished = finished or (lambda done, total, state: done >= total)
        self._on_finish = on_finish
        self.finished = False

    def step(self) -> None:
        """One step, or as many as fit in `slice_seconds` (at least one)."""
        until = time.perf_counter() + self.slice_seconds
        while True:
            try:
                self.done, self.total, self.state = next(self.steps)
            except StopIteration:
                self.finished = True
            else:
                self.finished = self._finished(self.done, self.total, self.state)
            if self.finished or time.perf_counter() >= until:
                break
        if self.finished and self._on_finish is not None:
            self._on_finish(self.state)

    def progress(self) -> dict:
        return {"done": self.done, "total": self.total, **self._progress(self.state)}

    def result(self) -> dict:
        return self._result(self.state)


class Jobs:
    """The running jobs of a session, by number (numbers are never reused)."""

    def __init__(self) -> None:
        self.running: dict[int, Job] = {}
        self.next = 1

    def start(self, job: Job) -> dict:
        number = self.next
        self.next += 1
        self.running[number] = job
        return {"job": number, "finished": False, **job.progress()}

    def step(self, number: int) -> dict:
        """One step of job `number`: its progress, and its result once it finishes."""
        job = self.running.get(number)
        if job is None:
            raise UsageError(f"job {number} is not running (finished or cancelled)")
        try:
            job.step()
        except BaseException:
            del self.running[number]      # a failed step ends the job: the page gets the error
            raise
        out = {"job": number, "finished": job.finished, **job.progress()}
        if job.finished:
            del self.running[number]
            out.update(job.result())
        return out

    def cancel(self, number: int) -> dict:
        return {"cancelled": self.running.pop(number, None) is not None}

    def clear(self) -> None:
        self.running.clear()
