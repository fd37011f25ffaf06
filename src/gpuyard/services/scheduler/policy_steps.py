"""The policy, the cluster it sees and the jobs in it, changed only through a few recorded steps.

Every change the live scheduler makes to its policy's world (a submit, an end, a drained GPU
charged, a pass and the decisions it made, a restart's replay) is one method here, and each call
is written down as an `Op`. A second `PolicyFeed` fed the same ops reaches the same state: the
estimator keeps such a mirror on its own thread, so a projection's copy of the policy is made
from the mirror and never under the scheduler's lock (a deep copy of a 10,000-job policy takes
a fifth of a second or more). Policies are deterministic, which is also what makes the live
server and `gpuyard simulate` decide alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from gpuyard.domain.job import Job
from gpuyard.scheduling.cluster import ClusterState, NodeSpec, Placement
from gpuyard.scheduling.duration_prediction import DurationPredictor
from gpuyard.scheduling.fair_share import Shares
from gpuyard.scheduling.gate import PolicyQueue
from gpuyard.scheduling.policy import (
    Policy,
    SchedJob,
    apply_finish,
    apply_preempt,
    apply_start,
    end_run,
)

Op = tuple[str, tuple[object, ...]]


@dataclass(frozen=True, slots=True)
class Decision:
    """One call the policy made during a pass: start `job_id` there, or preempt it."""

    start: bool
    job_id: int
    placement: Placement


def sched_job(job: Job) -> SchedJob:
    """What the policy may know about a job."""
    spec = job.spec
    return SchedJob(
        id=job.id, user=job.owner, gpus=spec.gpus, submitted_at=job.submitted_at,
        priority=spec.priority, cpus=spec.cpus, mem_mib=spec.mem_mib,
        gpu_mem_mib=spec.gpu_mem_mib, nodes=spec.nodes, time_limit_s=spec.time_limit_s,
        gpu_type=spec.gpu_type,
        preemptible=spec.preemptible,
        attained_gpu_s=job.attained_gpu_s, restarts=job.restarts,
    )  # fmt: skip


class PolicyFeed(PolicyQueue):
    """A policy and its cluster, fed through recorded steps (`ops` is None: not recorded); the
    gate's moves (`park`, `unpark`) are the queue's, recorded too."""

    def __init__(self, policy: Policy, cluster: ClusterState, *, record: bool) -> None:
        super().__init__(policy)
        self.cluster = cluster
        self.ops: list[Op] | None = [] if record else None
        # Run times the policy's steps show, for `show` and `--dry-run`'s expected duration
        # (pure; read without the scheduler's lock, see its module).
        self.durations = DurationPredictor()

    def _started(self, job: SchedJob, at: float) -> None:
        self.durations.started(job.id, job.user, job.gpus, job.time_limit_s, at)

    def _moved(self, name: str, job_id: int, at: float) -> None:
        self._op(name, job_id, at)

    def _op(self, name: str, *args: object) -> None:
        if self.ops is not None:
            self.ops.append((name, args))

    def take_ops(self) -> list[Op]:
        """The ops recorded since the last call."""
        if self.ops is None:
            return []
        ops, self.ops = self.ops, []
        return ops

    def replay(self, ops: list[Op]) -> bool:
        """Apply another feed's ops; False if a pass decided otherwise here (then this feed no
        longer mirrors the other)."""
        for name, args in ops:
            if name == "schedule":
                now, decided = args
                if tuple(self.schedule(cast(float, now))) != decided:
                    return False
            else:
                getattr(self, name)(*args)
        return True

    # -- events -----------------------------------------------------------------------------
    def submit(self, record: Job, at: float, parked: bool = False, to_start: bool = False) -> None:
        """`to_start`: it starts before the next pass (see `PolicyQueue.enter`)."""
        self._op("submit", record, at, parked, to_start)
        self.enter(sched_job(record), at, parked, to_start)

    def forget(self, job_id: int, at: float) -> bool:
        """Take a job out of the policy's view without a run to learn from (cancelled while
        pending or assigned, or ended while the policy had it pending)."""
        self._op("forget", job_id, at)
        if self.parked.pop(job_id, None) is not None:
            return False  # the policy never had it
        job = self.jobs.pop(job_id, None)
        if job is None:
            return False
        if job.running:
            end_run(job, self.cluster, at)
            self.policy.preempted(job, at)
        self.policy.cancel(job, at)
        self.durations.forget(job_id)
        return True

    def finish(self, job_id: int, at: float, learn: bool = True) -> None:
        """A run ended for good; `learn`: its run time joins the expected-duration history
        (not a cancelled one's; the policy learns from every run, as the simulator's)."""
        self._op("finish", job_id, at, learn)
        apply_finish(self.policy, self.jobs.pop(job_id), self.cluster, at)
        if learn:
            self.durations.finished(job_id, at)
        else:
            self.durations.forget(job_id)

    def requeue(self, job_id: int, at: float) -> None:
        """A run the policy started ended without the policy preempting it (its start was
        recorded but it never ran): pending again."""
        self._op("requeue", job_id, at)
        job = self.jobs[job_id]
        end_run(job, self.cluster, at)
        self.policy.preempted(job, at)
        self.durations.stopped(job_id, at)

    def set_shares(self, shares: Shares) -> None:
        """New fair-share weights for a policy that uses them (`fairshare`, `default`)."""
        self._op("set_shares", shares)
        set_shares = getattr(self.policy, "set_shares", None)
        if set_shares is not None:
            set_shares(shares)

    def charge(self, node: int) -> None:
        """One GPU of `node` is out of service: the policy sees it busy."""
        self._op("charge", node)
        self.cluster.allocate(((node, 1),))

    def uncharge(self, node: int) -> None:
        self._op("uncharge", node)
        self.cluster.release(((node, 1),))

    def add_node(self, spec: NodeSpec) -> None:
        """A machine joined: its GPUs, CPUs and memory are the policy's from now on."""
        self._op("add_node", spec)
        self.cluster.add_node(spec)

    # -- a pass ----------------------------------------------------------------------------
    def schedule(self, now: float) -> list[Decision]:
        """Let the policy decide at `now`; its starts and preemptions, in order."""
        ctx = _FeedContext(self, now)
        self.policy.schedule(ctx)
        self._op("schedule", now, tuple(ctx.decided))
        return ctx.decided

    # -- a restart's replay of the past --------------------------------------------------------
    def restore_run(
        self, job_id: int, placement: Placement, slots: tuple[int, ...] | None, at: float
    ) -> None:
        """A job still running after a restart, back on its GPUs (may raise ValueError)."""
        apply_start(self.policy, self.jobs[job_id], self.cluster, placement, at, slots)
        self._started(self.jobs[job_id], at)
        self._op("restore_run", job_id, placement, slots, at)

    def restore_past_run(self, job_id: int, at: float) -> None:
        """The start of a run that has ended since: on no GPUs any more, only its times matter."""
        self._op("restore_past_run", job_id, at)
        job = self.jobs[job_id]
        job.run_started_at = at
        # It ends later in the replay, with no pass between: a policy may skip what only a
        # pass reads (looked up on the class, as `PolicyQueue.enter` does `submit_to_start`).
        to_end = getattr(type(self.policy), "started_to_end", None)
        if to_end is not None:
            to_end(self.policy, job, at)
        else:
            self.policy.started(job, at)
        self._started(job, at)

    def restore_preemption(self, job_id: int, at: float) -> None:
        """It was being preempted when the server stopped: it still is."""
        self._op("restore_preemption", job_id, at)
        apply_preempt(self.policy, self.jobs[job_id], self.cluster, at)
        self.durations.stopped(job_id, at)


class _FeedContext:
    """The Context the policy acts on during a pass: every decision applied and written down."""

    def __init__(self, feed: PolicyFeed, now: float) -> None:
        self._feed = feed
        self.now = now
        self.cluster = feed.cluster
        self.decided: list[Decision] = []

    def start(self, job: SchedJob, placement: Placement) -> None:
        apply_start(self._feed.policy, job, self.cluster, placement, self.now)
        self._feed._started(job, self.now)
        self.decided.append(Decision(True, job.id, placement))

    def preempt(self, job: SchedJob) -> None:
        apply_preempt(self._feed.policy, job, self.cluster, self.now)
        self._feed.durations.stopped(job.id, self.now)
        self.decided.append(Decision(False, job.id, ()))
