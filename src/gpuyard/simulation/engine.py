"""Discrete-event replay: arrivals, completions and policy wake-ups in simulated time, no sleeping.

After every batch of events at one instant the policy's `schedule` runs, exactly as the live
server's controller calls it after a submit, an exit or a policy wake-up, and at no other
time: passes follow the events, so live and simulated decisions are the same. A preempted job
pays the restart penalty (default 60 s, Tiresias' measurement) before it makes progress again.
A job with a time limit (`TraceJob.time_limit_s`, see `time_limits.py`) whose run would last
longer is killed at the limit, as the live server ends a run (TIMEOUT: its dependants see that
state); each run has the whole limit, the restart penalty inside it.

Before each pass the replay drives the live server's gate (`scheduling/gate.py`, the same
`GatePipeline`). With `quotas`, a job over its user's or team's limit leaves the policy (as
`cancel`) and comes back (`submit`) when usage drops, exactly as the live pass parks it. Trace
jobs with a dependency, an array cap or singleton pass its workflow stage: the policy hears of
such a job only when the gate lets it in (`submit`, its own submit time kept); one whose
dependency can never hold is cancelled unseen. A job the gate lets in because another
*started* (`after`) is let in by a second pass at that instant, as the live server's next pass
does.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuyard.domain.dependency import Ref, parse_dependency
from gpuyard.domain.states import JobState
from gpuyard.scheduling.cluster import ClusterState, Placement
from gpuyard.scheduling.duration_prediction import DurationPredictor
from gpuyard.scheduling.explain import RankFactors, explain
from gpuyard.scheduling.gate import GatePipeline, PolicyQueue
from gpuyard.scheduling.policy import Policy, SchedJob, apply_finish, apply_preempt, apply_start
from gpuyard.scheduling.quotas import QuotaRules
from gpuyard.scheduling.workflow_gate import GateJob, Named
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
    timed_out: bool = False  # killed at its time limit (TIMEOUT), not finished
    predicted_s: float | None = None  # its expected run time when it arrived (what `show` says)


@dataclass(frozen=True, slots=True)
class Explained:
    """`simulate --explain JOB`: where the job ranked, and why, at the instant it first started
    (or at the end, if it never did), in the words `gpuyard show` uses."""

    job_id: int
    at: float  # simulated seconds
    started: bool
    rank: RankFactors | None  # None: the policy never had it (its dependency never held)
    expected_run: str | None  # what `show` said of it when it arrived (ExpectedRun)


@dataclass(slots=True)
class ReplayResult:
    jobs: list[JobOutcome]
    total_gpus: int
    busy_gpu_s_in_window: float
    window_s: float
    restart_penalty_s: float
    cancelled: list[int] = field(default_factory=list)  # never ran: dependency never satisfied
    explained: Explained | None = None


@dataclass(slots=True, eq=False)
class _Run:
    """Simulator-only bookkeeping of one job (the policy never sees it)."""

    job: SchedJob
    trace: TraceJob
    done_s: float = 0.0  # work done, seconds
    penalty_s: float = 0.0  # restart penalty of the current run
    version: int = 0
    finished_at: float | None = None
    ends_at_limit: bool = False  # the current run will be killed at the job's time limit
    predicted_s: float | None = None


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
        explain: int | None = None,
    ) -> None:
        """`expose_durations` lets oracle policies read true durations; `exact_time_limits`
        gives jobs without a time limit one equal to their duration (users who estimate
        perfectly: the reference setting for backfill on traces that carry no limits);
        `explain`: a job id whose rank and factors to record when it first starts."""
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
        self._queue = PolicyQueue(policy)
        self._gated = {t.id: g for t in trace if (g := _gate_job(t)).gated}
        rules = quotas if quotas is not None and not quotas.empty else None
        self._gate = GatePipeline(self._named, lambda: self.now, quotas=rules)
        self._gates = rules is not None or bool(self._gated)  # else no stage ever holds a job
        self._arrays: dict[int, list[int]] = {}
        for t in trace:
            if t.array_job_id is not None:
                self._arrays.setdefault(t.array_job_id, []).append(t.id)
        self._cancelled: dict[int, float] = {}
        # What `show` would say of each job when it arrives: the live scheduler's predictor,
        # fed the same steps (starts, preemptions, ends).
        self.durations = DurationPredictor()
        self._explain_id = explain
        self._explained: Explained | None = None
        self._said: dict[int, str] = {}  # the explained job's ExpectedRun when it arrived

    def _push(self, at: float, kind: int, run: _Run | None, version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, run, version))

    # -- the Context the policy acts on ------------------------------------------------------
    def start(self, job: SchedJob, placement: Placement) -> None:
        run = self._runs[job.id]
        self._account()
        if job.id == self._explain_id and self._explained is None:
            self._explain_now(job, started=True)  # before the start: it is still pending
        apply_start(self.policy, job, self.cluster, placement, self.now)
        self.durations.started(job.id, job.user, job.gpus, run.trace.time_limit_s, self.now)
        self._gate.began(job.id, self.now)
        run.penalty_s = self.penalty_s if job.restarts else 0.0
        run.version += 1
        finish = self.now + run.penalty_s + (run.trace.duration_s - run.done_s)
        limit = run.trace.time_limit_s  # the job's own limit (not one given `exact` for backfill)
        if limit is not None and finish > self.now + limit:
            finish = self.now + limit  # the live server ends a run at its limit: TIMEOUT
        run.ends_at_limit = finish < self.now + run.penalty_s + run.trace.duration_s - run.done_s
        self._push(finish, _FINISH, run, run.version)

    def preempt(self, job: SchedJob) -> None:
        run = self._runs[job.id]
        self._account()
        held = apply_preempt(self.policy, job, self.cluster, self.now)
        self.durations.stopped(job.id, self.now)
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
                    # A job the gate parks tells the policy nothing: no pass for it (live too).
                    happened = self._arrive(run) or happened
                    continue
                elif kind == _FINISH and run is not None and version == run.version:
                    self._finish(run)
                    finished += 1
                    if progress is not None and finished % 1000 == 0:
                        progress(finished)
                elif kind == _FINISH:
                    continue  # the end of a run that was preempted: nothing happened
                elif self.now != self._next_wake:
                    # A wake-up the policy no longer asks for: the live server keeps only the
                    # last one asked for, so no pass here (a pass is not free of consequence:
                    # `default` caches estimates as of the pass that computed them).
                    continue
                happened = True
            if not happened and not self._gated:
                continue
            if not self._pass(happened):
                continue
            wake = policy.next_decision_at(self.now)
            also = self._gate.next_at(self.now)
            if also is not None and (wake is None or also < wake):
                wake = also
            if wake is None or wake > self.now:  # the live pass replaces its wake-up so
                if wake is not None and wake != self._next_wake:
                    self._push(wake, _WAKE, None)
                self._next_wake = wake
        self._account()
        explain_id = self._explain_id
        if explain_id in self._runs and self._explained is None:
            self._explain_now(self._runs[explain_id].job, started=False)
        return self._result()

    def _explain_now(self, job: SchedJob, started: bool) -> None:
        """Record the job's rank and factors now (`scheduling/explain.py`: read-only, so the
        replay decides exactly as without it)."""
        pending = job.id in self._queue.jobs and not job.running and (
            job.id not in self._cancelled
        )  # fmt: skip
        rank = explain(self.policy, job, self.now, self.cluster) if pending else None
        said = self._said.get(job.id)
        self._explained = Explained(job.id, self.now, started, rank, said)

    def _pass(self, happened: bool) -> bool:
        """The live pass: the gate's stages, then the policy, only if the policy was told
        something (an event, or a job a stage let in); again at this instant while the gate
        lets jobs in because others started (`after`), as the live server's next pass would.
        Returns whether the policy ran."""
        gate, queue, ran = self._gate, self._queue, False
        while True:
            fed = gate.admit(queue, self.now, told=happened)
            for job_id, _ in gate.take_never():  # cancelled, never seen by the policy
                self._cancelled[job_id] = self.now
                gate.ended(job_id, JobState.CANCELLED, None, self.now)
            if not fed:
                return ran
            self.policy.schedule(self)
            gate.passed(queue, self.now)
            ran, happened = True, False
            if not gate.busy:
                return ran

    def _arrive(self, run: _Run) -> bool:
        """A trace job arrives; True if the policy heard of it (the gate did not park it)."""
        job = run.job
        said = self.durations.predict(job.user, job.gpus, run.trace.time_limit_s, self.now)
        run.predicted_s = said.expected_s if said is not None else None
        if job.id == self._explain_id and said is not None:
            self._said[job.id] = said.describe()
        parked = self._gate.submitted(job.id, self.now, flow=self._gated.get(job.id))
        self._queue.enter(job, self.now, parked)
        return not parked

    def _named(self, ref: Ref) -> list[Named]:
        """The trace jobs a reference names, as they are now (an array's id: its tasks)."""
        if ref.task is not None:
            ids = [i for i in self._arrays.get(ref.job_id, ())
                   if self._runs[i].trace.array_task_id == ref.task]  # fmt: skip
        elif ref.job_id in self._arrays:
            ids = self._arrays[ref.job_id]
        else:
            ids = [ref.job_id] if ref.job_id in self._runs else []
        return [self._state_of(self._runs[i]) for i in ids]

    def _state_of(self, run: _Run) -> Named:
        job_id = run.job.id
        if job_id in self._cancelled:
            return Named(job_id, JobState.CANCELLED, None, self._cancelled[job_id])
        if run.finished_at is not None:
            state = JobState.COMPLETED if run.trace.exit_code == 0 else JobState.FAILED
            code: int | None = run.trace.exit_code
            if run.ends_at_limit:
                state, code = JobState.TIMEOUT, None
            began = run.job.first_started_at
            return Named(job_id, state, code, began)
        started = run.job.first_started_at
        return Named(job_id, JobState.PENDING if started is None else JobState.RUNNING, None,
                     started)  # fmt: skip

    def _finish(self, run: _Run) -> None:
        job = run.job
        self._account()
        apply_finish(self.policy, job, self.cluster, self.now)
        self.durations.finished(job.id, self.now)
        del self._queue.jobs[job.id]
        run.finished_at = self.now
        gate = self._gate
        gate.run_ended(job.id, self.now)
        if run.ends_at_limit:  # killed at its limit, its work unfinished: TIMEOUT, as live
            gate.ended(job.id, JobState.TIMEOUT, None, self.now)
            return
        run.done_s = run.trace.duration_s
        state = JobState.FAILED if run.trace.exit_code != 0 else JobState.COMPLETED
        gate.ended(job.id, state, run.trace.exit_code, self.now)

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
            if job.id in self._cancelled:
                continue
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
                    run.ends_at_limit,
                    run.predicted_s,
                )
            )
        start, end = self._window
        return ReplayResult(
            outcomes, self.cluster.total_gpus, self._busy_in_window, end - start, self.penalty_s,
            sorted(self._cancelled), self._explained,
        )  # fmt: skip


def _gate_job(t: TraceJob) -> GateJob:
    return GateJob(
        t.id, t.user, t.name, parse_dependency(t.dependency), t.array_job_id, t.array_task_id,
        t.array_max_running if t.array_job_id is not None else 0,
    )  # fmt: skip
