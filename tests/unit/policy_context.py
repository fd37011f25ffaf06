"""The Context policies act on, for tests that drive a policy by hand: decisions applied to the
cluster and reported to the policy exactly as the simulator and the live server do."""

from __future__ import annotations

from gpuyard.scheduling.cluster import ClusterState, Placement
from gpuyard.scheduling.policy import Policy, SchedJob, apply_finish, apply_preempt, apply_start


class RecordingContext:
    """Applies a policy's starts and preemptions to `cluster`, recording the job ids."""

    def __init__(self, policy: Policy, cluster: ClusterState, now: float = 0.0) -> None:
        self.policy = policy
        self.cluster = cluster
        self.now = now
        self.started: list[int] = []
        self.preempted: list[int] = []

    def start(self, job: SchedJob, placement: Placement) -> None:
        apply_start(self.policy, job, self.cluster, placement, self.now)
        self.started.append(job.id)

    def preempt(self, job: SchedJob) -> None:
        apply_preempt(self.policy, job, self.cluster, self.now)
        self.preempted.append(job.id)

    def finish(self, job: SchedJob) -> None:
        apply_finish(self.policy, job, self.cluster, self.now)
