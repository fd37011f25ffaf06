"""`fifo`: strict first come, first served, the baseline everyone quotes.

Worked example. 8 free GPUs; queue: A (16 GPUs), B (1 GPU). A cannot start, and B waits behind
it although a GPU is free: head-of-line blocking is the point of this baseline.
"""

from __future__ import annotations

from collections import deque

from gpuyard.scheduling.policy import Context, SchedJob


class FifoPolicy:
    """Starts jobs in submission order and stops at the first that does not fit."""

    name = "fifo"
    preemptive = False

    def __init__(self) -> None:
        self._queue: deque[SchedJob] = deque()

    def submit(self, job: SchedJob, now: float) -> None:
        self._queue.append(job)

    def started(self, job: SchedJob, now: float) -> None:
        pass

    def preempted(self, job: SchedJob, now: float) -> None:
        self._queue.appendleft(job)

    def finished(self, job: SchedJob, now: float) -> None:
        pass

    def cancel(self, job: SchedJob, now: float) -> None:
        self._queue.remove(job)

    def schedule(self, ctx: Context) -> None:
        queue = self._queue
        while queue:
            head = queue[0]
            placement = ctx.cluster.place(head.gpus, head.cpus, head.mem_mib)
            if placement is None:
                return
            queue.popleft()
            ctx.start(head, placement)

    def next_decision_at(self, now: float) -> float | None:
        return None
