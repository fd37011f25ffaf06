"""The gate: the ordered stages that hold a pending job back from the policy, as one pipeline.

Pure (domain and scheduling only): the live scheduler (`services/scheduler/live.py`) and
`gpuyard simulate` (`simulation/engine.py`) drive this same `GatePipeline`, so they hold and let
in jobs alike. Limits sit *beside* the policy, not inside it (Slurm's acct_policy beside its
priority plug-in): a job a stage holds is kept out of the policy (`World.park`), so no policy
ranks, reserves for or starts it, and its pending reason is the stage's own. The stages, in the
order a pass applies them (`STAGES`):

1. held: a hold (a user's, the server's `NodeFailLimit`, a full disk), read from the caller;
2. backoff: a retry waits out its back-off (`Job.not_before`, reason `BeginTime`);
3. workflow: dependencies, an array's `%N` cap, singleton (`workflow_gate.py`);
4. quotas: a user's or a team's limits on GPUs held and GPU-hours used (`quotas.py`),
   judged last, over the jobs the first three let into the policy.

Worked example. alice may hold 4 GPUs (`max_gpus=4`) and runs a 2-GPU job. Pending, oldest
first, 2 GPUs each: job 5 (held by her), job 6 (a retry, not before t=100), job 7
(`afterok:3`, bob's job 3 running), jobs 8 and 9. A pass at t=50: 5 stays out (`JobHeldUser`),
6 (`BeginTime`) and 7 (`Dependency`); 8 and 9 reach the quota stage, which admits 8 (alice
2 + 2 = 4) and parks 9 (`QOSMaxGpuPerUser`); the policy starts 8. At t=100, the pass the
back-off asked for: 6 goes to the policy, then the quota stage parks it (alice holds 4 already).
Job 3 ends COMPLETED: the next pass lets 7 in and the quota stage parks it too, until alice's
jobs end. A job's reason is the first holding stage's, the back-off's last: a job waiting out
its back-off that another stage holds too shows that stage's reason (it waits for it after its
time). `tests/unit/test_gate.py` runs this example.

A pass (`admit`) runs after the caller has applied its events (which may park a job at once:
`submitted` says whether one goes to the policy); it says whether the policy was told anything
(then the caller runs the policy's pass, and `passed` after it), and `next_at` when the stages
want a pass without an event (a back-off's end, a timed dependency, GPU-hours falling).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from gpuyard.domain.dependency import Ref
from gpuyard.domain.job import (
    REASON_ARRAY_LIMIT,
    REASON_DEPENDENCY,
    REASON_DEPENDENCY_NEVER,
    REASON_HELD,
)
from gpuyard.domain.retry import REASON_BEGIN_TIME, REASON_NODE_FAIL_LIMIT
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policy import Policy, SchedJob
from gpuyard.scheduling.quotas import (
    QUOTA_REASONS,
    QuotaJob,
    QuotaLedger,
    QuotaRules,
    admission,
    next_recheck_at,
)
from gpuyard.scheduling.workflow_gate import GateJob, Named, WorkflowGate


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage of the gate: what it holds a pending job back for, and the reasons it gives."""

    name: str
    holds_back: str
    reasons: tuple[str, ...]


STAGES: tuple[Stage, ...] = (
    Stage("held", "a hold: a user's, the server's, a full disk's (the holder's reason)",
          (REASON_HELD, REASON_NODE_FAIL_LIMIT, "StateDiskFull")),
    Stage("backoff", "a retry's back-off, until `Job.not_before`", (REASON_BEGIN_TIME,)),
    Stage("workflow", "a dependency, an array's running cap, singleton",
          (REASON_DEPENDENCY, REASON_ARRAY_LIMIT, REASON_DEPENDENCY_NEVER)),
    Stage("quotas", "a user's or a team's limit on GPUs held or GPU-hours used",
          tuple(sorted(QUOTA_REASONS))),
)  # fmt: skip


class World(Protocol):
    """The policy's side of the gate: the jobs it has and those kept out, and the two moves."""

    @property
    def jobs(self) -> Mapping[int, SchedJob]: ...  # pending or running in the policy

    @property
    def parked(self) -> Mapping[int, SchedJob]: ...  # kept out by the gate

    def park(self, job_id: int, at: float) -> bool:
        """A pending job leaves the policy (False: not there, or running)."""
        ...

    def unpark(self, job_id: int, at: float) -> bool:
        """A parked job goes (back) to the policy (False: not parked)."""
        ...


class PolicyQueue:
    """A `World` as a value: the jobs in the policy and those the gate keeps out, and the moves
    between them. The simulator drives it as it is; the live `PolicyFeed` (`services/scheduler/
    policy_steps.py`) is one that records each move for its mirror."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.jobs: dict[int, SchedJob] = {}  # pending or running in the policy
        self.parked: dict[int, SchedJob] = {}  # kept out by the gate

    def _moved(self, name: str, job_id: int, at: float) -> None:
        """A job was parked or unparked (the live feed records it; here: nothing)."""

    def enter(self, job: SchedJob, at: float, parked: bool, to_start: bool = False) -> None:
        """A new job: into the policy, or straight to the parked ones (the gate holds it).
        `to_start`: it starts before the next pass (a restart's replay of a run that began
        later), so a policy with `submit_to_start` need not rank it. Looked up on the class:
        a wrapper that forwards what it lacks (a test's recorder) is given a plain submit."""
        if parked:
            self.parked[job.id] = job
            return
        self.jobs[job.id] = job
        unranked = getattr(type(self.policy), "submit_to_start", None) if to_start else None
        if unranked is None:
            self.policy.submit(job, at)
        else:
            unranked(self.policy, job, at)

    def park(self, job_id: int, at: float) -> bool:
        """The gate holds a pending job: out of the policy until `unpark`."""
        job = self.jobs.get(job_id)
        if job is None or job.running:
            return False
        self._moved("park", job_id, at)
        del self.jobs[job_id]
        self.policy.cancel(job, at)
        self.parked[job_id] = job
        return True

    def unpark(self, job_id: int, at: float) -> bool:
        job = self.parked.pop(job_id, None)
        if job is None:
            return False
        self._moved("unpark", job_id, at)
        self.jobs[job_id] = job
        self.policy.submit(job, at)
        return True


def _no_hold(job_id: int) -> None:
    return None


class GatePipeline:
    """The gate's stages and their state; the caller applies events, then `admit` each pass.

    Reads (`reason`, `kept_out`) are lock-free: a stage's published state is a mapping swapped
    whole or one `dict.get`; everything else is called by one thread at a time (the pass)."""

    def __init__(
        self,
        named: Callable[[Ref], Sequence[Named]],
        clock: Callable[[], float],
        *,
        holds: Callable[[int], str | None] = _no_hold,
        quotas: QuotaRules | None = None,
    ) -> None:
        """`named`: the workflow stage's lookup of the jobs a dependency names; `holds`: the
        held stage's reason for a job (None: not held); `quotas`: the first limits."""
        self._clock = clock
        self._holds = holds
        self._backoff: dict[int, float] = {}
        self._begin_at: Mapping[int, float] = MappingProxyType({})  # the copy readers see
        self.workflow = WorkflowGate(named)
        self._rules = self._rules_applied = quotas if quotas is not None else QuotaRules()
        self.ledger = QuotaLedger()
        self._quota_held: Mapping[int, str] = MappingProxyType({})
        self._never: list[tuple[int, str]] = []

    # -- reads (any thread) --------------------------------------------------------------------
    def reason(self, job_id: int) -> str | None:
        """Why the gate holds a pending job back, or None: the first holding stage's reason,
        the back-off's last."""
        held = (
            self._holds(job_id) or self.workflow.reason(job_id) or self._quota_held.get(job_id)
        )  # fmt: skip
        if held is not None:
            return held
        return REASON_BEGIN_TIME if job_id in self._begin_at else None

    def kept_out(self, job_id: int) -> bool:
        """Held, waiting out a back-off, or held by the workflow stage: not for the policy,
        whatever the quotas say."""
        return (
            self._holds(job_id) is not None or job_id in self._backoff
            or self.workflow.reason(job_id) is not None
        )  # fmt: skip

    @property
    def busy(self) -> bool:
        """The workflow stage has jobs to let in or to end: a pass would act on them."""
        return self.workflow.busy

    @property
    def quota_rules(self) -> QuotaRules:
        return self._rules

    def set_quotas(self, rules: QuotaRules) -> None:
        """New limits (any thread): the next pass holds and releases jobs by them."""
        self._rules = rules

    # -- events (the pass's thread) ------------------------------------------------------------
    def submitted(
        self, job_id: int, at: float, *, flow: GateJob | None = None,
        not_before: float | None = None,
    ) -> bool:  # fmt: skip
        """A new pending job (`flow`: what the workflow stage knows of it, if it is gated at
        all); True if a stage keeps it out of the policy."""
        self.back_off(job_id, not_before)
        if flow is not None:
            self.workflow.arrive(flow, at)
        return self.kept_out(job_id)

    def back_off(self, job_id: int, not_before: float | None) -> None:
        """A pending job whose `not_before` is still ahead waits for it (BeginTime)."""
        if not_before is not None and not_before > self._clock():
            self._backoff[job_id] = not_before
            self._begin_at = MappingProxyType(dict(self._backoff))

    def began(self, job_id: int, at: float) -> None:
        """A job started (for `after`)."""
        self.workflow.began(job_id, at)

    def run_ended(self, job_id: int, at: float) -> None:
        """A run ended (for good or requeued): it counts for GPU-hours up to `at`."""
        self.ledger.end(job_id, at)

    def ended(self, job_id: int, state: JobState, exit_code: int | None, at: float) -> None:
        """A job left the queue for good (ended, cancelled): it holds no place any more, and
        the jobs that name it are judged again."""
        self.workflow.ended(job_id, state, exit_code, at)
        self._end_backoff(job_id)

    def step_aside(self, job_id: int) -> None:
        """Held by the first stage: it gives up its place under its array's cap."""
        self.workflow.step_aside(job_id)

    def come_back(self, job_id: int) -> None:
        """Its hold was lifted: it queues for a place under its cap again."""
        self.workflow.come_back(job_id)

    def restore(self, running: Sequence[GateJob], pending: Sequence[GateJob]) -> None:
        """After a restart: running jobs hold their places under their caps, pending ones
        arrive again (the jobs let in at once are not parked by the caller's replay)."""
        workflow, now = self.workflow, self._clock()
        for job in running:
            workflow.occupy(job)
        for job in pending:
            workflow.arrive(job, now)
        _, never = workflow.take(now)
        self._never.extend(never)

    # -- the pass ------------------------------------------------------------------------------
    def admit(
        self, world: World, now: float, *, told: bool, due: bool = False,
        before_quotas: Callable[[], bool] | None = None,
    ) -> bool:  # fmt: skip
        """The stages after the events, in order: back-offs that ended and jobs the workflow
        stage lets in go to the policy (unless another stage still keeps them out), then the
        quotas park and release (when anything happened: `told`, the events told the policy
        something; `due`, a wake-up asked for). True if the policy was told anything.

        `before_quotas`: the caller's own step between the two (the live server hands the
        policy new fair-share weights there); True if it told the policy anything."""
        fed = self._release_due(world, now) or told
        fed = self._let_in(world, now) or fed
        if before_quotas is not None:
            fed = before_quotas() or fed
        rules = self._rules
        if (fed or due or rules is not self._rules_applied) and (
            not rules.empty or self._quota_held
        ):
            fed = self._apply_quotas(world, rules, now) or fed
        self._rules_applied = rules
        return fed

    def passed(self, world: World, now: float) -> None:
        """After the policy's pass: the runs it started count against the quotas from now."""
        if not self._rules_applied.empty:
            self._sync_ledger(world, now)

    def next_at(self, now: float) -> float | None:
        """When the stages want a pass without an event (None: not needed)."""
        wakes = (
            next_recheck_at(self._quota_held, now), min(self._backoff.values(), default=None),
            self.workflow.next_at(),
        )  # fmt: skip
        return min((w for w in wakes if w is not None), default=None)

    def take_never(self) -> list[tuple[int, str]]:
        """Jobs whose dependency can never hold (id, why), since the last call: `gpuyard
        simulate` ends them CANCELLED, the live server leaves them pending (Slurm's default);
        the stage keeps them out (DependencyNeverSatisfied) and counts them as cancelled for
        the jobs behind them either way."""
        never, self._never = self._never, []
        return never

    # -- the stages ----------------------------------------------------------------------------
    def _release_due(self, world: World, now: float) -> bool:
        """Jobs whose back-off has ended go to the policy (unless held: they go at release)."""
        due = [job_id for job_id, at in self._backoff.items() if at <= now]
        fed = False
        for job_id in due:
            self._end_backoff(job_id)
            if not self.kept_out(job_id):
                fed = world.unpark(job_id, now) or fed
        return fed

    def _end_backoff(self, job_id: int) -> None:
        if self._backoff.pop(job_id, None) is not None:
            self._begin_at = MappingProxyType(dict(self._backoff))

    def _let_in(self, world: World, now: float) -> bool:
        """The workflow stage's outcome since the last pass: jobs whose dependency now holds
        and whose array has room go to the policy (with their own submit time, as a release);
        jobs that can never run stay parked, for `take_never`."""
        workflow = self.workflow
        if not workflow.busy and not self._timed_due(now):
            return False
        released, never = workflow.take(now)
        self._never.extend(never)
        fed = False
        for job_id in released:
            if not self.kept_out(job_id):
                fed = world.unpark(job_id, now) or fed
        return fed

    def _timed_due(self, now: float) -> bool:
        due = self.workflow.next_at()
        return due is not None and due <= now

    def _apply_quotas(self, world: World, rules: QuotaRules, now: float) -> bool:
        """Park the pending jobs over a quota and let back those under it again (`admission`);
        usage is what the policy has running (its choices of the last pass included) and the
        runs the ledger kept."""
        ledger, jobs, parked = self.ledger, world.jobs, world.parked
        self._sync_ledger(world, now)
        ledger.prune(rules, now)
        candidates = [
            j for j in jobs.values() if not j.running and rules.limited(j.user)
        ] + [
            parked[i] for i in self._quota_held if i in parked and not self.kept_out(i)
        ]  # fmt: skip
        held = admission(
            rules, ledger,
            (QuotaJob(j.id, j.user, j.gpus, j.priority, j.submitted_at) for j in candidates),
            now,
        )  # fmt: skip
        fed = False
        for job_id in held:
            if job_id in jobs:
                fed = world.park(job_id, now) or fed
        for job_id in self._quota_held:
            if job_id not in held and not self.kept_out(job_id):
                fed = world.unpark(job_id, now) or fed
        self._quota_held = MappingProxyType(held)
        return fed

    def _sync_ledger(self, world: World, now: float) -> None:
        self.ledger.sync(
            ((j.id, j.user, j.gpus, j.run_started_at) for j in world.jobs.values()
             if j.run_started_at is not None),
            now,
        )  # fmt: skip
