"""Stopping a running job for a reason: a cancel, its GPU memory over budget, idle too long.

Only the intent is recorded here (durably, through the journal); the journal's observer that
reacts to a new stop intent signals the job's supervisor once the intent is on disk, so a stop
is never sent for a change that could be lost, and each intent is signalled once.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState
from gpuyard.services.journal import JobChange, Journal
from gpuyard.services.ports import Executor


class StopRequests:
    """Records why a running job must stop."""

    def __init__(self, journal: Journal, clock: Callable[[], float]) -> None:
        self._journal = journal
        self._clock = clock

    def request(self, job_id: int, intent: JobState, reason: str | None = None) -> Job | None:
        """Mark job `job_id` to end in `intent` (`reason`: the server's own, e.g. idle).
        A cancel overrides a preemption in progress (the job must not come back); any other
        intent already recorded stays."""

        def stop(current: Job) -> Job | None:
            if current.state is not JobState.RUNNING:
                return None
            if current.stop_intent is not None and not (
                intent is JobState.CANCELLED and current.stop_intent is JobState.PENDING
            ):
                return None
            why = {"reason": reason} if reason else {}
            return current.with_changes(stop_intent=intent, **why)

        return self._journal.change(job_id, stop, self._clock())


def signal_new_stops(executor: Executor) -> Callable[[JobChange], None]:
    """An `after` observer of the journal: a running job that just got a stop intent (or a pid,
    when the intent came first: preempted before its launch was recorded) is signalled."""

    def observe(change: JobChange) -> None:
        job, before = change.after, change.before
        if job.state is not JobState.RUNNING or job.pid is None or job.stop_intent is None:
            return
        if before is None or before.stop_intent is None or before.pid is None:
            executor.stop(job)

    return observe
