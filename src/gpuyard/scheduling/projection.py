"""Estimated start times: run a copy of the policy forward, every job using its full time limit.

Worked example. 4 GPUs, all held by job R (started 10:00, limit 2 h). Pending under `fifo`: A (4
GPUs, limit 1 h), then B (2 GPUs). Projected: R ends at 12:00 and A starts then; A ends at
13:00 and B starts: estimates A 12:00, B 13:00. Had R no time limit, nothing would ever free
its GPUs in the projection: A and B get no estimate (None), which `gpuyard queue` shows as
unknown. This is what Slurm's `squeue --start` reports, with the same caveat: jobs usually end
before their limit, so real starts come earlier.

A preemptive policy may instead plan to preempt R (if R is preemptible: preemption is opt-in
per job): then A's estimate is when the policy would preempt R, e.g. `default`'s 4 minutes of
protection, and it holds only if that preemption happens. The projection records when it first
preempted (`preempted_from`), and every start from then on is marked as assuming a preemption
(`assumes_preemption`), so `queue` and `show` can say so rather than pass it off as an end.

The projection works on a private copy (the caller deep-copies the policy and cluster), calls
the very `schedule` the server calls, and stops after `max_events` ends or wake-ups or a wall
time budget, so that a deep queue costs a bounded time: jobs it did not reach get None.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuyard.scheduling.cluster import ClusterState, Placement
from gpuyard.scheduling.policy import Policy, SchedJob, apply_finish, apply_preempt, apply_start

HORIZON_S = 366 * 86400.0  # the longest time limit a job may ask for


class _Projection:
    """The Context a projected pass acts on: starts and preemptions in projected time."""

    def __init__(
        self, policy: Policy, cluster: ClusterState, now: float, explain: set[int] | None = None
    ) -> None:
        self.policy = policy
        self.cluster = cluster
        self.now = now
        self.first_start: dict[int, float] = {}
        self.explain = explain or set()  # jobs whose start is told with what freed it
        self.freed_by: dict[int, tuple[int, ...]] = {}
        self._ended: tuple[float, list[int]] = (-math.inf, [])  # the jobs ended at that instant
        self.preempted_from: float | None = None  # projected time of the first preemption
        self._ends: list[tuple[float, int, int, SchedJob]] = []
        self._run_of: dict[int, int] = {}
        self._seq = 0

    def start(self, job: SchedJob, placement: Placement) -> None:
        apply_start(self.policy, job, self.cluster, placement, self.now)
        if job.id not in self.first_start and job.id in self.explain:
            at, ended = self._ended
            self.freed_by[job.id] = tuple(ended) if at == self.now else ()
        self.first_start.setdefault(job.id, self.now)
        self.expect_end(job, self.now)

    def preempt(self, job: SchedJob) -> None:
        if self.preempted_from is None:
            self.preempted_from = self.now
        apply_preempt(self.policy, job, self.cluster, self.now)
        self._run_of.pop(job.id, None)  # its projected end is void

    def expect_end(self, job: SchedJob, started_at: float) -> None:
        """A running job ends at its time limit; one without a limit never does."""
        if not job.time_limit_s:
            return
        self._seq += 1
        self._run_of[job.id] = self._seq
        at = max(self.now, started_at + job.time_limit_s)
        heapq.heappush(self._ends, (at, self._seq, job.id, job))

    def next_end(self) -> float:
        ends = self._ends
        while ends and self._run_of.get(ends[0][2]) != ends[0][1]:
            heapq.heappop(ends)
        return ends[0][0] if ends else math.inf

    def end_due(self) -> None:
        ends = self._ends
        while ends and ends[0][0] <= self.now:
            _, seq, job_id, job = heapq.heappop(ends)
            if self._run_of.get(job_id) != seq:
                continue
            del self._run_of[job_id]
            apply_finish(self.policy, job, self.cluster, self.now)
            if self.explain:
                if self._ended[0] != self.now:
                    self._ended = (self.now, [])
                self._ended[1].append(job_id)


@dataclass(frozen=True, slots=True)
class StartEstimates:
    """Projected first starts (None: no estimate) and what they assume: from `preempted_from`
    (projected time; None: never) on, the projection preempted a running job, so a start at or
    after it holds only if that preemption happens (before it: only that running jobs end at
    their limits). One preemption frees GPUs for more than its preemptor and reorders the rest
    of the queue, so every later start depends on it, not just the preemptor's."""

    starts: dict[int, float | None]
    preempted_from: float | None = None

    def assumes_preemption(self, job_id: int) -> bool:
        start, since = self.starts.get(job_id), self.preempted_from
        return start is not None and since is not None and start >= since


@dataclass(frozen=True, slots=True)
class Projection:
    """Projected first starts (None: not reached) and how far the projection got: `complete`
    when it stopped because every wanted job started or nothing more would ever end;
    `preempted_from`: see `StartEstimates`; `freed_by`: for the jobs asked to be explained,
    the running or projected jobs whose ends (at their time limits) let it start then."""

    starts: dict[int, float | None]
    reached_at: float
    complete: bool
    preempted_from: float | None = None
    freed_by: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def estimates(self) -> StartEstimates:
        return StartEstimates(self.starts, self.preempted_from)


def project_starts(
    policy: Policy,
    cluster: ClusterState,
    running: list[SchedJob],
    now: float,
    *,
    wanted: set[int] | None = None,
    max_events: int = 2000,
    budget_s: float | None = None,
    horizon_s: float = HORIZON_S,
    explain: set[int] | None = None,
) -> Projection:
    """Estimated first start of the `wanted` jobs (default: every job `policy` has pending), by
    simulating forward from `now` with each running and started job ending at its time limit.
    Stops after `max_events`, `budget_s` seconds of wall time, or `horizon_s` of projected time
    (preemption ping-pong under a starvation guard can push projected time out by centuries).
    `explain`: jobs whose start is told with the ends that freed it (`Projection.freed_by`).
    Mutates its arguments: pass copies."""
    ctx = _Projection(policy, cluster, now, explain)
    for job in running:
        assert job.run_started_at is not None, f"job {job.id} is not running"
        ctx.expect_end(job, job.run_started_at)
    if wanted is None:
        wanted = {job.id for job in policy.pending(now)}
    deadline = math.inf if budget_s is None else time.perf_counter() + budget_s
    complete = False
    for _ in range(max_events):
        policy.schedule(ctx)
        if wanted <= ctx.first_start.keys():
            complete = True
            break
        if time.perf_counter() > deadline:
            break
        wake = policy.next_decision_at(ctx.now)
        at = min(ctx.next_end(), wake if wake is not None and wake > ctx.now else math.inf)
        if at == math.inf:
            complete = True  # nothing will ever end: the rest wait on jobs without a limit
            break
        if at > now + horizon_s:
            break  # not within a year: no estimate (and no absurd dates)
        ctx.now = at
        ctx.end_due()
    starts = {job_id: ctx.first_start.get(job_id) for job_id in wanted}
    return Projection(starts, ctx.now, complete, ctx.preempted_from, ctx.freed_by)
