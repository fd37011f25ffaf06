"""Discrete-event replay: arrivals, completions and policy wake-ups in simulated time, no sleeping.

After every batch of events at one instant the policy's `schedule` runs, exactly as the live
server's controller calls it after a submit, an exit or a policy wake-up, and at no other
time: passes follow the events, so live and simulated decisions are the same. A preempted job
pays the restart penalty (default 60 s, Tiresias' measurement) before it makes progress again.

With `quotas`, the replay runs the live server's quota gate (`scheduling/quotas.py`, the same
`admission`) before each pass: a job over its user's or team's limit leaves the policy (as
`cancel`) and comes back (`submit`) when usage drops, exactly as the live pass parks it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuyard.scheduling.cluster import ClusterState, Placement
from gpuyard.scheduling.policy import Policy, SchedJob, apply_finish, apply_preempt, apply_start
from gpuyard.scheduling.quotas import QuotaJob, QuotaLedger, QuotaRules, admission, next_recheck_at
from gpuyard.simulation.trace import TraceJob

_ARRIVE, _FINISH, _WAKE = 0, 1, 2


@dataclass(slots=True)
class JobOutcome:
    """What happened to one trace job."""

    id: int
    user: str
    gpus: int
    submitted_at: float
    duration_s: float
    first_started_at: float
    finished_at: float
    preemptions: int


@dataclass(slots=True)
class ReplayResult:
    jobs: list[JobOutcome]
    total_gpus: int
    busy_gpu_s_in_window: float
    window_s: float
    restart_penalty_s: float


@dataclass(slots=True, eq=False)
class _Run:
    """Simulator-only bookkeeping of one job (the policy never sees it)."""

    job: SchedJob
    trace: TraceJob
    done_s: float = 0.0  # work done, seconds
    penalty_s: float = 0.0  # restart penalty of the current run
    version: int = 0
    finished_at: float | None = None


class Replay:
    """One policy over one trace on one cluster; `run()` returns every job's outcome."""

    def __init__(
        self,
        trace: Sequence[TraceJob],
        policy: Policy,
        cluster: ClusterState,
        *,
        restart_penalty_s: float = 60.0,
        expose_durations: bool = False,
        exact_time_limits: bool = False,
        quotas: QuotaRules | None = None,
    ) -> None:
        """`expose_durations` lets oracle policies read true durations; `exact_time_limits`
        gives jobs without a time limit one equal to their duration (users who estimate
        perfectly: the reference setting for backfill on traces that carry no limits)."""
        self.policy = policy
        self.cluster = cluster
        self.penalty_s = restart_penalty_s
        self.now = 0.0
        self._events: list[tuple[float, int, int, _Run | None, int]] = []
        self._seq = 0
        self._runs: dict[int, _Run] = {}
        for t in trace:
            if not cluster.can_ever_fit(t.gpus):
                raise ValueError(f"job {t.id} needs {t.gpus} GPUs: more than the cluster has")
            job = SchedJob(
                id=t.id, user=t.user, gpus=t.gpus, submitted_at=t.submitted_at,
                time_limit_s=t.time_limit_s or (t.duration_s if exact_time_limits else None),
                preemptible=t.preemptible,
                oracle_duration_s=t.duration_s if expose_durations else None,
            )  # fmt: skip
            run = _Run(job, t)
            self._runs[t.id] = run
            self._push(t.submitted_at, _ARRIVE, run)
        first = min((t.submitted_at for t in trace), default=0.0)
        last = max((t.submitted_at for t in trace), default=0.0)
        self._window = (first, last)
        self._busy_in_window = 0.0
        self._busy_since = first
        self._next_wake: float | None = None
        self._quotas = quotas if quotas is not None and not quotas.empty else None
        self._ledger = QuotaLedger()
        self._waiting: dict[int, SchedJob] = {}  # pending in the policy (quotas only)
        self._parked: dict[int, SchedJob] = {}  # held by the quota gate
        self._held: dict[int, str] = {}  # the last gate's holds, in its order (as the live one)

    def _push(self, at: float, kind: int, run: _Run | None, version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, run, version))

    # -- the Context the policy acts on ------------------------------------------------------
    def start(self, job: SchedJob, placement: Placement) -> None:
        run = self._runs[job.id]
        self._account()
        apply_start(self.policy, job, self.cluster, placement, self.now)
        if self._quotas is not None:
            self._waiting.pop(job.id, None)
            self._ledger.start(job.id, job.user, job.gpus, self.now)
        run.penalty_s = self.penalty_s if job.restarts else 0.0
        run.version += 1
        finish = self.now + run.penalty_s + (run.trace.duration_s - run.done_s)
        self._push(finish, _FINISH, run, run.version)

    def preempt(self, job: SchedJob) -> None:
        run = self._runs[job.id]
        self._account()
        held = apply_preempt(self.policy, job, self.cluster, self.now)
        if self._quotas is not None:
            self._waiting[job.id] = job
            self._ledger.end(job.id, self.now)
        run.done_s += max(0.0, held - run.penalty_s)
        run.version += 1  # its completion event is void now

    # -- the loop ----------------------------------------------------------------------------
    def run(self, progress: Callable[[int], None] | None = None) -> ReplayResult:
        events, policy = self._events, self.policy
        finished = 0
        while events:
            self.now = events[0][0]
            happened = False
            while events and events[0][0] == self.now:
                _, _, kind, run, version = heapq.heappop(events)
                if kind == _ARRIVE and run is not None:
                    policy.submit(run.job, self.now)
                    if self._quotas is not None:
                        self._waiting[run.job.id] = run.job
                elif kind == _FINISH and run is not None and version == run.version:
                    self._finish(run)
                    finished += 1
                    if progress is not None and finished % 1000 == 0:
                        progress(finished)
                elif kind == _FINISH:
                    continue  # the end of a run that was preempted: nothing happened
                elif self._quotas is not None and self.now != self._next_wake:
                    continue  # a wake-up the policy no longer asks for (the live pass's rule)
                happened = True
            if not happened:
                continue
            recheck = self._gate() if self._quotas is not None else None
            policy.schedule(self)
            wake = policy.next_decision_at(self.now)
            if recheck is not None and (wake is None or recheck < wake):
                wake = recheck
            if wake is not None and wake > self.now and wake != self._next_wake:
                self._next_wake = wake
                self._push(wake, _WAKE, None)
            elif wake is None and self._quotas is not None:
                self._next_wake = None
        self._account()
        return self._result()

    def _finish(self, run: _Run) -> None:
        job = run.job
        self._account()
        apply_finish(self.policy, job, self.cluster, self.now)
        if self._quotas is not None:
            self._ledger.end(job.id, self.now)
        run.done_s = run.trace.duration_s
        run.finished_at = self.now

    def _gate(self) -> float | None:
        """The live pass's quota gate: park the jobs over a limit, let back those under it;
        returns when to look again without an event (GPU-hours fall with time)."""
        rules, policy, now = self._quotas, self.policy, self.now
        assert rules is not None
        candidates = [j for j in (*self._waiting.values(), *self._parked.values())
                      if rules.limited(j.user)]  # fmt: skip
        held = admission(
            rules, self._ledger,
            (QuotaJob(j.id, j.user, j.gpus, j.priority, j.submitted_at) for j in candidates),
            now,
        )  # fmt: skip
        for job_id in held:  # the live pass's order: parks, then releases
            job = self._waiting.pop(job_id, None)
            if job is not None:
                policy.cancel(job, now)
                self._parked[job_id] = job
        for job_id in self._held:
            if job_id not in held:
                job = self._parked.pop(job_id)
                policy.submit(job, now)
                self._waiting[job_id] = job
        self._held = held
        self._ledger.prune(rules, now)
        return next_recheck_at(held, now)

    def _account(self) -> None:
        """Integrate busy GPUs over the submission window up to now."""
        start, end = self._window
        lo, hi = max(self._busy_since, start), min(self.now, end)
        if hi > lo:
            self._busy_in_window += (self.cluster.total_gpus - self.cluster.free_gpus) * (hi - lo)
        self._busy_since = self.now

    def _result(self) -> ReplayResult:
        outcomes = []
        for run in self._runs.values():
            job = run.job
            if run.finished_at is None or job.first_started_at is None:
                raise RuntimeError(f"job {job.id} never finished: the policy starved it")
            outcomes.append(
                JobOutcome(
                    job.id,
                    job.user,
                    job.gpus,
                    job.submitted_at,
                    run.trace.duration_s,
                    job.first_started_at,
                    run.finished_at,
                    job.restarts,
                )
            )
        start, end = self._window
        return ReplayResult(
            outcomes, self.cluster.total_gpus, self._busy_in_window, end - start, self.penalty_s
        )
