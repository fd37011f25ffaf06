"""`las`: Tiresias' discretised 2D-LAS (least attained service, in GPU-seconds).

Worked example (first queue limit 3,600 GPU-s, starvation factor 2). Job A (8 GPUs) has run
for 10 minutes: 4,800 GPU-s attained, so it has left queue 0 for queue 1. Job B (1 GPU) arrives
and the cluster is full: B is in queue 0, which outranks queue 1, so A is preempted and B runs.
Within a queue, jobs run first come first served. If A then waits longer than twice the time it
has run (20 minutes), it is promoted back to queue 0 so that it cannot starve.

Information-agnostic: it never reads durations or time limits, only the service attained.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.explain import Factor, RankFactors, age, gpu_time, priority, span
from gpuyard.scheduling.policies.ranked import RankedPolicy, SortedJobs
from gpuyard.scheduling.policy import SchedJob

_DEMOTE, _PROMOTE = 0, 1


class LasPolicy(RankedPolicy):
    name = "las"
    preemptive = True

    def __init__(
        self, queue_limits_gpu_s: tuple[float, ...] = (3600.0,), starvation_factor: float = 2.0
    ) -> None:
        super().__init__()
        self._limits = queue_limits_gpu_s
        self._starve = starvation_factor
        queues = len(queue_limits_gpu_s) + 1
        self._pending = [SortedJobs() for _ in range(queues)]
        self._running = [SortedJobs() for _ in range(queues)]
        self._queue: dict[int, int] = {}
        self._base: dict[int, float] = {}  # attained service when last (re)entering queue 0
        self._token: dict[int, int] = {}  # invalidates stale timer entries
        self._timers: list[tuple[float, int, int, int, SchedJob]] = []

    # -- events -----------------------------------------------------------------------------
    def submit(self, job: SchedJob, now: float) -> None:
        self._base[job.id] = 0.0
        # A new job starts in queue 0; a requeued one (server restart) where its service says.
        self._enqueue(job, self._queue_for(job, now), now)

    def started(self, job: SchedJob, now: float) -> None:
        q = self._queue[job.id]
        self._pending[q].remove(job)
        self._pending_removed(job)
        self._running[q].add(job, (job.submitted_at,))
        self._arm_demotion(job, q, now)

    def preempted(self, job: SchedJob, now: float) -> None:
        q = self._queue[job.id]
        self._running[q].remove(job)
        self._enqueue(job, self._queue_for(job, now), now)

    def finished(self, job: SchedJob, now: float) -> None:
        q = self._queue.pop(job.id)
        self._running[q].remove(job)
        self._base.pop(job.id, None)
        self._token.pop(job.id, None)

    def cancel(self, job: SchedJob, now: float) -> None:
        q = self._queue.pop(job.id)
        self._pending[q].remove(job)
        self._pending_removed(job)
        self._base.pop(job.id, None)
        self._token.pop(job.id, None)  # voids its promotion timer

    # -- ranking ----------------------------------------------------------------------------
    def _pending_order(self, now: float) -> list[SchedJob]:
        order: list[SchedJob] = []
        for queue in self._pending:
            order.extend(queue)
        return order

    def _victims(self, now: float) -> list[SchedJob]:
        victims: list[SchedJob] = []
        for queue in reversed(self._running):
            victims.extend(queue.items_desc())
        return victims

    def _outranks(self, a: SchedJob, b: SchedJob, now: float) -> bool:
        qa, qb = self._queue[a.id], self._queue[b.id]
        # Only a better queue preempts: within a queue, jobs are first come first served and
        # are not preempted for each other (that churns: 55k preemptions on philly_14237@1024).
        return qa < qb

    # -- timers -----------------------------------------------------------------------------
    def next_decision_at(self, now: float) -> float | None:
        timers = self._timers
        while timers and self._token.get(timers[0][2]) != timers[0][3]:
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    def _refresh(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, kind, job_id, token, job = heapq.heappop(timers)
            if self._token.get(job_id) != token:
                continue
            q = self._queue[job_id]
            if kind == _DEMOTE and job.running:
                self._running[q].remove(job)
                self._queue[job_id] = q + 1
                self._running[q + 1].add(job, (job.submitted_at,))
                self._arm_demotion(job, q + 1, now)
            elif kind == _PROMOTE and not job.running:
                self._pending[q].remove(job)
                self._base[job_id] = job.attained(now)
                self._queue[job_id] = 0
                self._pending[0].add(job, (job.submitted_at,))

    def _enqueue(self, job: SchedJob, q: int, now: float) -> None:
        self._queue[job.id] = q
        self._pending[q].add(job, (job.submitted_at,))
        self._pending_added(job)
        token = self._token[job.id] = self._token.get(job.id, 0) + 1
        if q > 0:
            executed_s = job.attained(now) / max(job.gpus, 1)
            at = now + self._starve * executed_s
            heapq.heappush(self._timers, (at, _PROMOTE, job.id, token, job))

    def _arm_demotion(self, job: SchedJob, q: int, now: float) -> None:
        token = self._token[job.id] = self._token.get(job.id, 0) + 1
        if q < len(self._limits) and job.gpus > 0:
            left = self._limits[q] - (job.attained(now) - self._base[job.id])
            at = now + max(left, 0.0) / job.gpus
            heapq.heappush(self._timers, (at, _DEMOTE, job.id, token, job))

    def _queue_for(self, job: SchedJob, now: float) -> int:
        return bisect_right(self._limits, job.attained(now) - self._base[job.id])

    # -- explanations (read-only: `scheduling/explain.py`) -------------------------------------
    def explain(self, job: SchedJob, now: float, cluster: ClusterState) -> RankFactors:
        """The attained service and the queue it puts the job in; a job in a later queue is
        promoted to the first when it has waited twice what it has run."""
        limits = ", ".join(gpu_time(limit) for limit in self._limits)
        order = f"least attained service first: by queue (limits {limits}), then submit time"
        q = self._queue.get(job.id)
        if q is None:
            return RankFactors(self.name, order, priority(job))
        attained = Factor("attained service", gpu_time(job.attained(now)))
        token = self._token.get(job.id)
        due = min((at for at, kind, job_id, tok, _ in list(self._timers)
                   if kind == _PROMOTE and job_id == job.id and tok == token),
                  default=None)  # fmt: skip
        then = "" if due is None else f"back to queue 0 in {span(due - now)}"
        queue = Factor("queue", f"{q + 1} of {len(self._limits) + 1}")
        return RankFactors(self.name, order, (*priority(job), attained, queue, age(job, now, then)))
