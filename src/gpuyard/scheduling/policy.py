"""What every scheduling policy implements, and the job record policies read.

Policies are pure and stateful: they keep their own queues, fed by events (`submit`, `started`,
`preempted`, `finished`), and decide in `schedule(ctx)` by calling `ctx.start` and
`ctx.preempt`. The simulator applies those calls to simulated time; the live server applies
them to processes. Same code, same decisions for the same events.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Protocol

from gpuyard.scheduling.cluster import ClusterState, Placement, Share


@dataclass(slots=True, eq=False)
class SchedJob:
    """A job as a policy sees it: only what is known at decision time.

    `oracle_duration_s` is the true run time; only the simulator sets it and only policies that
    say they are oracles may read it.
    """

    id: int
    user: str
    gpus: int
    submitted_at: float
    priority: int = 0  # the user's/admin's priority: strictly before any policy's own ranking
    cpus: int = 0
    mem_mib: int = 0
    gpu_mem_mib: int = 0  # per GPU; > 0: may share GPUs with other such jobs
    nodes: int = 1  # > 1: exactly this many machines, gpus // nodes on each
    gpu_type: str = ""  # only GPUs of this type (`--gpu-type`); "": any (one pool's)
    time_limit_s: float | None = None
    preemptible: bool = True
    attained_gpu_s: float = 0.0  # GPU-seconds held in earlier runs
    run_started_at: float | None = None  # start of the current run, None unless running
    first_started_at: float | None = None
    placement: Placement = ()
    restarts: int = 0
    oracle_duration_s: float | None = None

    def attained(self, now: float) -> float:
        """GPU-seconds of service received so far, the current run included."""
        if self.run_started_at is None:
            return self.attained_gpu_s
        return self.attained_gpu_s + self.gpus * (now - self.run_started_at)

    @property
    def running(self) -> bool:
        return self.run_started_at is not None

    # Pickled for the estimates' worker process with every submitted job: the dataclass' own
    # state walks `fields(self)` for each job, which was most of that shipping's CPU.
    def __getstate__(self) -> tuple[object, ...]:
        return _SCHED_STATE(self)

    def __setstate__(self, state: tuple[object, ...]) -> None:
        for name, value in zip(_SCHED_FIELDS, state, strict=True):
            setattr(self, name, value)


_SCHED_FIELDS = tuple(field.name for field in fields(SchedJob))
_SCHED_STATE = attrgetter(*_SCHED_FIELDS)


def place_job(
    cluster: ClusterState,
    job: SchedJob,
    only_nodes: tuple[int, ...] | None = None,
    excluding: frozenset[int] = frozenset(),
) -> Placement | None:
    """Where `job` would go now (see `ClusterState.place`), or None."""
    return cluster.place(
        job.gpus, job.cpus, job.mem_mib, job.gpu_mem_mib, only_nodes, nodes=job.nodes,
        gpu_type=job.gpu_type, excluding=excluding,
    )  # fmt: skip


def whole_gpus(job: SchedJob) -> int:
    """Whole free GPUs a job needs to start: none for a job on shared GPUs (it may fit beside
    others). Policies stop a pass early when fewer whole GPUs are free than any job needs."""
    return 0 if job.gpu_mem_mib else job.gpus


def begin_run(
    job: SchedJob,
    cluster: ClusterState,
    placement: Placement,
    now: float,
    slots: tuple[int, ...] | None = None,
) -> None:
    """Put a job on the cluster: allocate its placement (GPUs, CPUs, memory, shared GPU memory
    in `slots` if given, else best fit) and start its run."""
    share = Share(job.id, job.gpus, job.gpu_mem_mib, slots) if job.gpu_mem_mib else None
    cluster.allocate(placement, job.cpus, job.mem_mib, share)
    job.placement = placement
    job.run_started_at = now
    if job.first_started_at is None:
        job.first_started_at = now


def end_run(job: SchedJob, cluster: ClusterState, now: float) -> float:
    """Take a running job off the cluster (it ended or was preempted): release what it held and
    add the GPU time to its attained service. Returns the seconds this run held its GPUs."""
    assert job.run_started_at is not None, f"job {job.id} is not running"
    cluster.release(job.placement, job.cpus, job.mem_mib, job.id if job.gpu_mem_mib else None)
    held_s = now - job.run_started_at
    job.attained_gpu_s += job.gpus * held_s
    job.run_started_at = None
    job.placement = ()
    return held_s


def apply_start(
    policy: Policy,
    job: SchedJob,
    cluster: ClusterState,
    placement: Placement,
    now: float,
    slots: tuple[int, ...] | None = None,
) -> None:
    """What every Context does for `ctx.start`: put the job on the cluster, then tell the policy.
    One helper, so that the simulator, the live server, projections and tests stay in step (a
    context that forgot one call would corrupt the policy's view silently)."""
    begin_run(job, cluster, placement, now, slots)
    policy.started(job, now)


def apply_preempt(policy: Policy, job: SchedJob, cluster: ClusterState, now: float) -> float:
    """What every Context does for `ctx.preempt`: take the job off the cluster, count the
    restart, tell the policy. Returns the seconds this run held its GPUs."""
    held_s = end_run(job, cluster, now)
    job.restarts += 1
    policy.preempted(job, now)
    return held_s


def apply_finish(policy: Policy, job: SchedJob, cluster: ClusterState, now: float) -> float:
    """A running job ended for good: off the cluster, then the policy learns from its run."""
    held_s = end_run(job, cluster, now)
    policy.finished(job, now)
    return held_s


class Context(Protocol):
    """What a policy acts on during one scheduling pass."""

    now: float
    cluster: ClusterState

    def start(self, job: SchedJob, placement: Placement) -> None: ...

    def preempt(self, job: SchedJob) -> None: ...


class Policy(Protocol):
    """A scheduling policy. `schedule` may be called at any time; it must be cheap when nothing
    can change (most calls), because the simulator calls it after every event.

    Optional: `explain(job, now, cluster) -> RankFactors`, the factors of a pending job's key
    in words (`scheduling/explain.py`, read-only); without it a job is explained by priority
    and submit time."""

    name: str
    preemptive: bool

    def submit(self, job: SchedJob, now: float) -> None: ...

    def started(self, job: SchedJob, now: float) -> None: ...

    def preempted(self, job: SchedJob, now: float) -> None: ...

    def finished(self, job: SchedJob, now: float) -> None: ...

    def cancel(self, job: SchedJob, now: float) -> None:
        """Forget a PENDING job (cancelled by its user); a running one ends by `finished`."""
        ...

    def schedule(self, ctx: Context) -> None: ...

    def pending(self, now: float) -> list[SchedJob]:
        """Pending jobs, the one to start next first: the order `gpuyard queue` explains."""
        ...

    def next_decision_at(self, now: float) -> float | None:
        """When the policy would decide differently with no new event (a job crossing a
        priority threshold), or None."""
        ...
