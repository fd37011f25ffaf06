"""Jobs that could not be launched because the state disk is full wait, never fail.

A start is recorded durably before its processes exist; if the executor then cannot write the
job's folder (`launch.json`, its log) for want of space, nothing was started. Failing the job
would punish its owner for the server's disk, so the start is undone: the job goes back to
PENDING (the transition a preemption's requeue makes, with no restart counted: it never ran),
and waits in the gate with the reason `StateDiskFull: ...` so `queue` and `show` say why. After
`retry_s` the hold is lifted and the next pass offers the job again: once space is back it
launches with no one doing anything. Waits are measured on the monotonic clock, so a
wall-clock jump neither floods the disk with retries nor delays them by a day.

Worked example: job 9 is chosen, its RUNNING record lands, `launch.json` hits ENOSPC. Job 9 is
PENDING again (reason StateDiskFull, held); 5 s later it is released, chosen, and either
launches or waits again. If its owner cancelled it between the start and the launch, it ends
CANCELLED instead: a cancel is never lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpuyard.domain.errors import StateDiskFull
from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.journal import Journal
from gpuyard.services.scheduler.inbox import Gate

log = logging.getLogger("gpuyard.controller")

REASON_STATE_DISK_FULL = "StateDiskFull"


class DiskFullWaits:
    """Undo starts whose launch found the disk full, and let them back after `retry_s`.
    Used by the controller's thread only."""

    def __init__(
        self,
        journal: Journal,
        gate: Gate,
        *,
        retry_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._journal = journal
        self._gate = gate
        self._retry_s = retry_s
        self._monotonic = monotonic
        self._clock = clock  # wall time, for the records users see
        self._due: dict[int, tuple[float, str]] = {}  # job id -> (monotonic release, reason)

    def not_launched(self, job: Job, error: StateDiskFull) -> None:
        """`job`'s start is recorded but its launch hit a full disk: back to PENDING, held."""
        reason = f"{REASON_STATE_DISK_FULL}: {error.message}"
        at = self._clock()

        def undo(current: Job) -> Job | None:
            if current.state is not JobState.RUNNING or current.pid is not None:
                return None
            if current.stop_intent is JobState.CANCELLED:  # cancelled before it could start
                return current.transition(JobState.CANCELLED, ended_at=at, reason=reason)
            return current.transition(
                JobState.PENDING, gpus=(), started_at=None, pid=None,
                pid_started_at=None, stop_intent=None, reason=reason,
            )  # fmt: skip

        now = self._journal.change(job.id, undo, at)
        log.warning("job %s not started, waiting for space: %s", job.id, error.message)
        if now is not None and now.state is JobState.PENDING:
            self._gate.hold(job.id, reason)
            self._due[job.id] = (self._monotonic() + self._retry_s, reason)

    def release_due(self) -> None:
        """Let the jobs whose wait is over back to the policy (a hold someone else has put
        since, a user's, stays)."""
        if not self._due:
            return
        now = self._monotonic()
        for job_id, (due, reason) in list(self._due.items()):
            if now < due:
                continue
            del self._due[job_id]
            if self._gate.reason(job_id) == reason:
                self._gate.release(job_id)
