"""Idle jobs: a running job whose GPUs all stay nearly unused is flagged, and may be cancelled.

Worked example (util 5%, after 30 min, cancel 15 min later). Job 4 holds GPUs 2 and 3. From
10:00 both read under 5% (a notebook left open, a job stuck on I/O): at 10:30 it is flagged
idle (`queue` and `show` say since when); if it is still idle at 10:45 it is cancelled with
reason `Idle: ...`. One sample at 40% on either GPU resets the clock. A GPU whose utilisation
cannot be read (declared GPUs, an old driver) never makes a job idle.

How long a job has been idle is measured on the monotonic clock (`TelemetrySnapshot.
elapsed_at`): a wall clock set forward a day must not cancel a job idle for a minute, nor one
set back spare it. The wall time it went idle is kept beside, for `queue` and `show`.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuyard.domain.job import Job
from gpuyard.services.machine.telemetry import TelemetrySnapshot


class IdleWatch:
    """Fed every telemetry sample; keeps when each running job's GPUs last went idle."""

    def __init__(
        self,
        util_pct: float,
        after_s: float,
        cancel_after_s: float,
        cancel: Callable[[Job, str], object],
    ) -> None:
        self.util_pct = util_pct
        self.after_s = after_s
        self.cancel_after_s = cancel_after_s  # 0: only flag
        self._cancel = cancel
        self._since: dict[int, tuple[float, float]] = {}  # job id -> (wall, elapsed) idle since
        self._cancelled: set[int] = set()
        self._last = 0.0  # the latest sample's elapsed_at

    def idle_since(self, job_id: int) -> float | None:
        """When the job's GPUs went idle (wall clock), if they had been for `after_s` at the
        latest sample."""
        since = self._since.get(job_id)
        if since is None or self._last - since[1] < self.after_s:
            return None
        return since[0]

    def update(self, snapshot: TelemetrySnapshot, running: list[Job]) -> None:
        now = self._last = snapshot.elapsed_at
        alive = {job.id for job in running}
        for job_id in [j for j in self._since if j not in alive]:
            del self._since[job_id]
        for job in running:
            utils = [snapshot.gpus[g].reading.util_pct if g in snapshot.gpus else None
                     for g in job.gpus]  # fmt: skip
            if not utils or any(u is None for u in utils):
                continue  # cannot tell: never idle
            if max(u for u in utils if u is not None) >= self.util_pct:
                self._since.pop(job.id, None)
                continue
            since = self._since.setdefault(job.id, (snapshot.taken_at, now))[1]
            limit = self.after_s + self.cancel_after_s
            if self.cancel_after_s and now - since >= limit and job.id not in self._cancelled:
                self._cancelled.add(job.id)
                self._cancel(
                    job,
                    f"Idle: its GPUs stayed below {self.util_pct:g}% for {now - since:.0f} s; "
                    f"cancelled after a warning of {self.cancel_after_s:g} s",
                )
