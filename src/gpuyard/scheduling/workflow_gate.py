"""The gate's workflow stages: dependencies, then an array's running cap and singleton.

Pure (stdlib and domain only), so the live scheduler's gate and `gpuyard simulate` let jobs in
by the same code. A gated job is kept out of the policy until its dependency holds and its
array (or singleton name) has room; the gate says which jobs to let in and which can never run,
and the gate's pipeline (`gate.py`, which both drive) feeds the policy (`World.unpark`).

Worked example. Array 20 of 4 tasks (ids 20-23) with `%2`, and job 30 `afterok:20`. Tasks 20
and 21 are let in at once; 22 and 23 wait (JobArrayTaskLimit); 30 waits (Dependency). Task 20
ends COMPLETED: 22 is let in. Task 21 ends FAILED: 23 is let in, and 30 can never run (afterok
on the whole array): it is reported as never (the live server leaves it pending, reason
DependencyNeverSatisfied, as Slurm does; `gpuyard simulate` cancels it), and treated at once as
CANCELLED for the jobs behind it, so a job `afternotok:30` is let in by the same call.

Cost: every event touches only the jobs that name the job that changed (an index from a job to
the references that count it, and from a reference to the jobs waiting on it); an array's cap
is a counter and a heap of waiting tasks. Nothing walks the queue, so 10,000 pending tasks add
nothing to a pass that nothing concerning them happened in.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuyard.domain.dependency import (
    Dependency,
    Never,
    Ref,
    Satisfied,
    Tally,
    Waiting,
    evaluate,
    parse_dependency,
)
from gpuyard.domain.job import (
    REASON_ARRAY_LIMIT,
    REASON_DEPENDENCY,
    REASON_DEPENDENCY_NEVER,
    Job,
)
from gpuyard.domain.states import JobState

Key = tuple[int, int | None]  # a reference: (job or array id, task index or None)
GroupKey = tuple[str, str, str] | tuple[str, int]


@dataclass(frozen=True, slots=True)
class GateJob:
    """What the workflow stages know of a job."""

    id: int
    owner: str
    name: str
    dependency: Dependency = field(default_factory=Dependency)
    array_id: int | None = None
    task: int | None = None
    array_cap: int = 0  # at most this many of its array's tasks let in at once; 0: no cap

    @property
    def group(self) -> tuple[GroupKey, int] | None:
        """The running limit it is under, with its cap: one singleton job of an owner and name
        (which also covers the array's tasks), else its array's `%N`."""
        if self.dependency.singleton:
            return ("singleton", self.owner, self.name), 1
        if self.array_id is not None and self.array_cap > 0:
            return ("array", self.array_id), self.array_cap
        return None

    @property
    def gated(self) -> bool:
        return bool(self.dependency.terms) or self.group is not None


@dataclass(frozen=True, slots=True)
class Named:
    """One job a reference names, as the gate first learns of it."""

    id: int
    state: JobState
    exit_code: int | None = None
    began_at: float | None = None  # started, or ended without starting; None: not yet


@dataclass(slots=True)
class _Count:
    members: tuple[int, ...]
    ended: set[int] = field(default_factory=set)
    ok: int = 0
    began: set[int] = field(default_factory=set)
    last_began_at: float = -math.inf

    def tally(self) -> Tally:
        return Tally(len(self.members), len(self.ended), self.ok, len(self.began),
                     self.last_began_at)  # fmt: skip

    def end(self, job_id: int, state: JobState, exit_code: int | None, at: float) -> bool:
        if job_id in self.ended:
            return False
        self.ended.add(job_id)
        self.ok += _succeeded(state, exit_code)
        self.begin(job_id, at)
        return True

    def begin(self, job_id: int, at: float) -> bool:
        if job_id in self.began:
            return False
        self.began.add(job_id)
        self.last_began_at = max(self.last_began_at, at)
        return True


@dataclass(slots=True)
class _Group:
    cap: int
    active: set[int] = field(default_factory=set)  # let in: pending in the policy, or running
    heap: list[int] = field(default_factory=list)  # waiting, lowest id (submit order) first
    queued: set[int] = field(default_factory=set)
    aside: set[int] = field(default_factory=set)  # held by another stage: no place taken

    @property
    def empty(self) -> bool:
        return not (self.active or self.queued or self.aside)


def _succeeded(state: JobState, exit_code: int | None) -> bool:
    return state is JobState.COMPLETED and exit_code in (0, None)


class WorkflowGate:
    """Jobs waiting for their dependency or their array's room; `take` says what changed."""

    def __init__(self, named: Callable[[Ref], Sequence[Named]]) -> None:
        """`named(ref)`: the jobs a reference names as they are now (an array's id: all its
        tasks); asked once per reference while some job waits on it, then kept up to date
        by the events."""
        self._named = named
        self._reasons: dict[int, str] = {}  # read lock-free (dict.get) by other threads
        self._waiting: dict[int, GateJob] = {}  # their dependency does not hold yet
        self._counts: dict[Key, _Count] = {}
        self._waiters: dict[Key, set[int]] = {}
        self._member_of: dict[int, list[Key]] = {}
        self._timed: list[tuple[float, int]] = []
        self._groups: dict[GroupKey, _Group] = {}
        self._group_of: dict[int, GroupKey] = {}
        self._never_at: dict[int, float] = {}  # judged never here; not ended by the caller yet
        self._aside: set[int] = set()  # held elsewhere (a user's hold): take no place under a cap
        self._dirty: set[int] = set()
        self._released: list[int] = []
        self._never: list[tuple[int, str]] = []

    # -- reads ---------------------------------------------------------------------------------
    def reason(self, job_id: int) -> str | None:
        """Why the gate keeps a job out (Dependency, JobArrayTaskLimit,
        DependencyNeverSatisfied), or None."""
        return self._reasons.get(job_id)

    def next_at(self) -> float | None:
        """When a timed dependency (after:ID+MINUTES) may hold without any event."""
        timed = self._timed
        while timed and timed[0][1] not in self._waiting:
            heapq.heappop(timed)
        return timed[0][0] if timed else None

    @property
    def busy(self) -> bool:
        """Jobs to let in or end are waiting for `take`."""
        return bool(self._dirty or self._released or self._never)

    # -- events --------------------------------------------------------------------------------
    def arrive(self, job: GateJob, now: float) -> str | None:
        """A new pending job: None if it may go to the policy now, else why it waits."""
        if job.dependency.terms:
            self._waiting[job.id] = job
            for _, ref in job.dependency.refs(job.task):
                self._watch((ref.job_id, ref.task), job.id)
            verdict = self._verdict(job, now)
            if not isinstance(verdict, Satisfied):
                self._hold(job, verdict, now)
                return self._reasons[job.id]
            self._unwatch(job)
        return self._enter_group(job)

    def occupy(self, job: GateJob) -> None:
        """A job already running (after a restart) holds its place under its cap."""
        group = job.group
        if group is not None:
            key, cap = group
            self._groups.setdefault(key, _Group(cap)).active.add(job.id)
            self._group_of[job.id] = key

    def step_aside(self, job_id: int) -> None:
        """A pending job is held by another stage (a user's hold): it gives up its place under
        its cap (the next task takes it) and takes none until `come_back`."""
        self._aside.add(job_id)
        key = self._group_of.get(job_id)
        if key is None:
            return
        state = self._groups[key]
        if job_id in state.active:
            state.active.discard(job_id)
            self._admit(state)
        state.queued.discard(job_id)
        state.aside.add(job_id)
        self._reasons.pop(job_id, None)

    def come_back(self, job_id: int) -> None:
        """Its hold was lifted: it queues for a place again, in id order."""
        if job_id not in self._aside:
            return
        self._aside.discard(job_id)
        key = self._group_of.get(job_id)
        if key is None:
            return
        state = self._groups[key]
        state.aside.discard(job_id)
        self._queue(state, key, job_id)
        self._admit(state)

    def began(self, job_id: int, at: float) -> None:
        """A job started (for `after`)."""
        for key in self._member_of.get(job_id, ()):
            if self._counts[key].begin(job_id, at):
                self._dirty.update(self._waiters[key])

    def ended(self, job_id: int, state: JobState, exit_code: int | None, at: float) -> None:
        """A job ended for good or was cancelled (a requeued job has not ended): its place
        under a cap goes to the next task, and the jobs that name it are judged again."""
        self._leave(job_id)
        at = self._never_at.pop(job_id, at)
        self._count_end(job_id, state, exit_code, at)

    def take(self, now: float) -> tuple[list[int], list[tuple[int, str]]]:
        """The jobs to let in now (in order) and those that can never run (with why), since
        the last call; the latter are already counted as CANCELLED for the jobs behind them."""
        timed = self._timed
        while timed and timed[0][0] <= now:
            self._dirty.add(heapq.heappop(timed)[1])
        self._settle(now)
        released, never = self._released, self._never
        self._released, self._never = [], []
        return released, never

    # -- dependencies --------------------------------------------------------------------------
    def _verdict(self, job: GateJob, now: float) -> Satisfied | Waiting | Never:
        counts = self._counts
        return evaluate(
            job.dependency, lambda ref: counts[(ref.job_id, ref.task)].tally(), now, job.task
        )

    def _hold(self, job: GateJob, verdict: Waiting | Never, now: float) -> None:
        if isinstance(verdict, Never):
            self._waiting.pop(job.id, None)
            self._unwatch(job)
            self._reasons[job.id] = REASON_DEPENDENCY_NEVER
            self._never.append((job.id, verdict.why))
            self._never_at[job.id] = now
            self._count_end(job.id, JobState.CANCELLED, None, now)  # for the jobs behind it
            return
        self._reasons[job.id] = REASON_DEPENDENCY
        if verdict.until is not None:
            heapq.heappush(self._timed, (verdict.until, job.id))

    def _settle(self, now: float) -> None:
        while self._dirty:
            dirty, self._dirty = sorted(self._dirty), set()
            for job_id in dirty:
                job = self._waiting.get(job_id)
                if job is None:
                    continue
                verdict = self._verdict(job, now)
                if not isinstance(verdict, Satisfied):
                    self._hold(job, verdict, now)
                    continue
                del self._waiting[job_id]
                self._unwatch(job)
                if self._enter_group(job) is None:
                    self._released.append(job_id)

    def _watch(self, key: Key, job_id: int) -> None:
        if key not in self._counts:
            count = self._count(key)
            self._counts[key] = count
            for member in count.members:
                self._member_of.setdefault(member, []).append(key)
        self._waiters.setdefault(key, set()).add(job_id)

    def _count(self, key: Key) -> _Count:
        named = self._named(Ref(*key))
        count = _Count(tuple(n.id for n in named))
        for n in named:
            never_at = self._never_at.get(n.id)
            if never_at is not None:  # judged never here: CANCELLED, whatever the record says
                count.end(n.id, JobState.CANCELLED, None, never_at)
            elif n.state.is_terminal:
                count.end(n.id, n.state, n.exit_code, n.began_at or -math.inf)
            elif n.began_at is not None:
                count.begin(n.id, n.began_at)
        return count

    def _unwatch(self, job: GateJob) -> None:
        for _, ref in job.dependency.refs(job.task):
            key = (ref.job_id, ref.task)
            waiters = self._waiters.get(key)
            if waiters is None:
                continue
            waiters.discard(job.id)
            if waiters:
                continue
            del self._waiters[key]
            for member in self._counts.pop(key).members:
                keys = self._member_of[member]
                keys.remove(key)
                if not keys:
                    del self._member_of[member]

    def _count_end(self, job_id: int, state: JobState, exit_code: int | None, at: float) -> None:
        for key in self._member_of.get(job_id, ()):
            if self._counts[key].end(job_id, state, exit_code, at):
                self._dirty.update(self._waiters[key])

    # -- running caps --------------------------------------------------------------------------
    def _enter_group(self, job: GateJob) -> str | None:
        group = job.group
        if group is None:
            self._reasons.pop(job.id, None)
            return None
        key, cap = group
        state = self._groups.setdefault(key, _Group(cap))
        self._group_of[job.id] = key
        if job.id in self._aside:  # held elsewhere: it queues when that hold is lifted
            state.aside.add(job.id)
            self._reasons.pop(job.id, None)
            return None
        if len(state.active) < state.cap and not state.queued:
            state.active.add(job.id)
            self._reasons.pop(job.id, None)
            return None
        return self._queue(state, key, job.id)

    def _queue(self, state: _Group, key: GroupKey, job_id: int) -> str:
        heapq.heappush(state.heap, job_id)
        state.queued.add(job_id)
        why = REASON_DEPENDENCY if key[0] == "singleton" else REASON_ARRAY_LIMIT
        self._reasons[job_id] = why
        return why

    def _leave(self, job_id: int) -> None:
        job = self._waiting.pop(job_id, None)
        if job is not None:
            self._unwatch(job)
        self._reasons.pop(job_id, None)
        self._aside.discard(job_id)
        key = self._group_of.pop(job_id, None)
        if key is None:
            return
        state = self._groups[key]
        state.aside.discard(job_id)
        if job_id in state.active:
            state.active.discard(job_id)
            self._admit(state)
        else:
            state.queued.discard(job_id)  # its heap entry is skipped when reached
        if state.empty:
            del self._groups[key]

    def _admit(self, state: _Group) -> None:
        while state.heap and len(state.active) < state.cap:
            job_id = heapq.heappop(state.heap)
            if job_id not in state.queued:
                continue
            state.queued.discard(job_id)
            state.active.add(job_id)
            self._reasons.pop(job_id, None)
            self._released.append(job_id)


def gate_job(job: Job) -> GateJob:
    """What the gate's workflow stages know of a job."""
    spec = job.spec
    return GateJob(
        job.id, job.owner, spec.name, parse_dependency(spec.dependency), job.array_job_id,
        job.array_task_id, spec.array_max_running if job.array_job_id is not None else 0,
    )  # fmt: skip


def gated(job: Job) -> bool:
    """Whether a job passes the workflow stages at all (cheap: most jobs do not)."""
    spec = job.spec
    return bool(spec.dependency) or (job.array_job_id is not None and spec.array_max_running > 0)
