"""`fifo`: strict first come, first served, the baseline everyone quotes.

Worked example. 8 free GPUs; queue: A (16 GPUs), B (1 GPU). A cannot start, and B waits behind
it although a GPU is free: head-of-line blocking is the point of this baseline. A job submitted
with a higher `--priority` goes ahead of every job of lower priority.
"""

from __future__ import annotations

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.explain import RankFactors, plain
from gpuyard.scheduling.policies.ranked import SortedJobs
from gpuyard.scheduling.policy import Context, SchedJob, place_job


class FifoPolicy:
    """Starts jobs in submission order and stops at the first that does not fit."""

    name = "fifo"
    preemptive = False

    def __init__(self) -> None:
        self._queue = SortedJobs()

    def submit(self, job: SchedJob, now: float) -> None:
        self._queue.add(job, (-job.priority, job.submitted_at))

    def started(self, job: SchedJob, now: float) -> None:
        # Here, not in `schedule`: a restarted server replays starts without a pass.
        self._queue.remove(job)

    def preempted(self, job: SchedJob, now: float) -> None:
        self.submit(job, now)  # back in its place: submission order

    def finished(self, job: SchedJob, now: float) -> None:
        pass

    def cancel(self, job: SchedJob, now: float) -> None:
        self._queue.remove(job)

    def pending(self, now: float) -> list[SchedJob]:
        return list(self._queue)

    def schedule(self, ctx: Context) -> None:
        queue = self._queue
        while (head := queue.first()) is not None:
            placement = place_job(ctx.cluster, head)
            if placement is None:
                return
            ctx.start(head, placement)  # `started` takes it off the queue

    def next_decision_at(self, now: float) -> float | None:
        return None

    def explain(self, job: SchedJob, now: float, cluster: ClusterState) -> RankFactors:
        """Submit time is the whole key (after priority): the head waits for room, the rest
        wait behind it even when they would fit."""
        return plain(self.name, job, now, "priority, then submit time; nothing passes the head")
