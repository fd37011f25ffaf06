"""Stopping a running job for a reason: a cancel, its GPU memory over budget, idle too long.

Only the intent is recorded here (durably, through the journal); the journal's observer that
reacts to a new stop intent signals the job's supervisor once the intent is on disk, so a stop
is never sent for a change that could be lost, and each intent is signalled once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.journal import JobChange, Journal
from gpuyard.services.ports import Executor


class StopSignals:
    """The signal a stop asked for (`cancel --signal`), per job, from the request until the
    journal's observer hands it to the executor. Kept in memory, not on the job: a server
    restarted in between re-sends the stop with the job's own `--signal`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_job: dict[int, int] = {}

    def ask(self, job_id: int, stop_signal: int) -> None:
        with self._lock:
            self._by_job[job_id] = stop_signal

    def take(self, job_id: int) -> int | None:
        with self._lock:
            return self._by_job.pop(job_id, None)


class StopRequests:
    """Records why a running job must stop."""

    def __init__(
        self, journal: Journal, clock: Callable[[], float], signals: StopSignals | None = None
    ) -> None:
        self._journal = journal
        self._clock = clock
        self._signals = signals or StopSignals()

    def request(
        self,
        job_id: int,
        intent: JobState,
        reason: str | None = None,
        stop_signal: int | None = None,
    ) -> Job | None:
        """Mark job `job_id` to end in `intent` (`reason`: the server's own, e.g. idle;
        `stop_signal`: what its processes get, instead of its `--signal`). A cancel overrides
        a preemption in progress (the job must not come back); any other intent already
        recorded stays (and so does the signal already sent)."""
        if stop_signal is not None:
            self._signals.ask(job_id, stop_signal)
        try:
            return self._journal.change(job_id, self._stop(intent, reason), self._clock())
        finally:
            self._signals.take(job_id)  # not handed out: this request signalled nothing

    @staticmethod
    def _stop(intent: JobState, reason: str | None) -> Callable[[Job], Job | None]:

        def stop(current: Job) -> Job | None:
            if current.state is not JobState.RUNNING:
                return None
            if current.stop_intent is not None and not (
                intent is JobState.CANCELLED and current.stop_intent is JobState.PENDING
            ):
                return None
            why = {"reason": reason} if reason else {}
            return current.with_changes(stop_intent=intent, **why)

        return stop


def signal_new_stops(
    executor: Executor, signals: StopSignals | None = None
) -> Callable[[JobChange], None]:
    """An `after` observer of the journal: a running job that just got a stop intent (or a pid,
    when the intent came first: preempted before its launch was recorded) is signalled, with
    the signal its stop asked for (`signals`) if any."""

    def observe(change: JobChange) -> None:
        job, before = change.after, change.before
        if job.state is not JobState.RUNNING or job.pid is None or job.stop_intent is None:
            return
        if before is None or before.stop_intent is None or before.pid is None:
            asked = signals.take(job.id) if signals is not None else None
            if asked is None:
                executor.stop(job)
            else:
                executor.stop(job, asked)

    return observe
