"""The Health tab's requests: what the scan will read (said before it runs) and the scan itself as
a job (web/jobs.py) of one tensor, or one piece of a confirmation, per step.

Mixed into handlers.Session, whose `current()` and `jobs` it uses. The report sent is
`tensorloupe health --json`'s, computed by the same function with the same defaults. The
healthscan package is imported by the first request: the worker's boot does not wait for it.
"""

from __future__ import annotations

from ..errors import UsageError
from .jobs import Job

# Each request of the scan takes tensors for about this long: its steps are a tensor (or a
# window of one) each, a millisecond or two, and a round trip to the page per step cost more
# than the scan itself (web/jobs.py). Cancel and other requests still get in within this time.
STEP_SECONDS = 0.05


def _budget(args) -> int | None:
    from ..healthscan import DEFAULT_BUDGET
    if args.get("exact"):
        return None
    value = int(args.get("budget", DEFAULT_BUDGET))
    if value < 1:
        raise UsageError(f"the byte budget per tensor must be at least 1, not {value}")
    return value


class HealthOps:
    def op_health_plan(self, args):
        from ..healthscan import health_cost
        ckpt = self.current()
        cost = health_cost(ckpt, _budget(args))
        return {**cost.to_json(), "file_size": ckpt.size}, []

    def op_health_start(self, args):
        from ..healthscan import health_steps
        ckpt = self.current()
        steps = health_steps(ckpt, _budget(args))
        return self.jobs.start(Job(
            "health scan", steps, len(ckpt.tensors),
            progress=lambda report: {"bytes_read": report.bytes_read if report else 0,
                                     "phase": report.phase if report else "scan"},
            finished=lambda done, total, report: report.complete,
            result=lambda report: {"report": report.to_json()}, slice_seconds=STEP_SECONDS)), []
