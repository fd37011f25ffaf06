"""`srtf-oracle`: preemptive shortest remaining GPU-time first, with the TRUE durations.

A reference bound, not a policy a server can run: nobody knows a job's duration in advance.
Worked example: A (8 GPUs, 10 h left = 80 GPU-h) runs on a full cluster; B (1 GPU, 1 h) arrives:
1 GPU-h < 80 GPU-h, so A is preempted and B runs.
"""

from __future__ import annotations

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.explain import Factor, RankFactors, age, gpu_time, priority
from gpuyard.scheduling.policies.ranked import RankedPolicy, SortedJobs
from gpuyard.scheduling.policy import SchedJob


def remaining_gpu_s(job: SchedJob, now: float) -> float:
    """True remaining GPU-seconds (the attained service stands in for work done)."""
    assert job.oracle_duration_s is not None, "srtf-oracle needs true durations"
    done_s = job.attained(now) / max(job.gpus, 1)
    return job.gpus * max(job.oracle_duration_s - done_s, 0.0)


class SrtfOraclePolicy(RankedPolicy):
    name = "srtf-oracle"
    preemptive = True

    def __init__(self) -> None:
        super().__init__()
        self._pending = SortedJobs()
        self._running: dict[int, SchedJob] = {}
        self._victim_cache: tuple[float, list[SchedJob]] | None = None

    def submit(self, job: SchedJob, now: float) -> None:
        self._add_pending(job, now)

    def started(self, job: SchedJob, now: float) -> None:
        self._pending.remove(job)
        self._pending_removed(job)
        # The victim list cached for this instant stays valid: a job started now ranks above
        # every job still pending, and stopped jobs are skipped by `_by_node`.
        self._running[job.id] = job

    def preempted(self, job: SchedJob, now: float) -> None:
        del self._running[job.id]
        self._add_pending(job, now)

    def finished(self, job: SchedJob, now: float) -> None:
        del self._running[job.id]

    def cancel(self, job: SchedJob, now: float) -> None:
        self._pending.remove(job)
        self._pending_removed(job)

    def _add_pending(self, job: SchedJob, now: float) -> None:
        self._pending.add(job, (remaining_gpu_s(job, now), job.submitted_at))
        self._pending_added(job)

    def _pending_order(self, now: float) -> list[SchedJob]:
        return list(self._pending)

    def _victims(self, now: float) -> list[SchedJob]:
        if self._victim_cache is None or self._victim_cache[0] != now:
            ranked = sorted(self._running.values(), key=lambda j: -remaining_gpu_s(j, now))
            self._victim_cache = (now, ranked)
        return self._victim_cache[1]

    def _outranks(self, a: SchedJob, b: SchedJob, now: float) -> bool:
        return remaining_gpu_s(a, now) < remaining_gpu_s(b, now)

    def next_decision_at(self, now: float) -> float | None:
        return None

    def explain(self, job: SchedJob, now: float, cluster: ClusterState) -> RankFactors:
        """The true remaining GPU-time is the key (an oracle's)."""
        left = Factor("true GPU-time left", gpu_time(remaining_gpu_s(job, now)))
        return RankFactors(
            self.name,
            "least true remaining GPU-time first",
            (*priority(job), Factor("GPUs", str(job.gpus)), left, age(job, now)),
        )
