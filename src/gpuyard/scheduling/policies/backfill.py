"""`backfill`: EASY backfilling, as Slurm's backfill scheduler does it.

Worked example. 8 GPUs on one node, 6 busy with job R whose time limit ends in 2 h. Queue: H (8
GPUs), then S1 (2 GPUs, limit 1 h), then S2 (2 GPUs, limit 5 h). H cannot start: it gets a
reservation at R's end, in 2 h. S1 fits now and ends before the reservation: it starts. S2 fits
now but would still hold 2 GPUs in 2 h, delaying H: it waits. The head job is never delayed by
a job behind it.

Estimates come from the jobs' time limits; a job without one is assumed to run forever (it can
still start early if the reservation does not need its GPUs). At most `max_candidates` jobs
behind the head are examined per pass, like Slurm's `bf_max_job_test`.
"""

from __future__ import annotations

import math

from gpuyard.scheduling.cluster import ClusterState, Placement
from gpuyard.scheduling.explain import Factor, RankFactors, age, priority, span
from gpuyard.scheduling.policies.ranked import RequestSizes, SortedJobs
from gpuyard.scheduling.policy import Context, SchedJob, place_job, whole_gpus


class BackfillPolicy:
    name = "backfill"
    preemptive = False
    uses_time_limits = True

    def __init__(self, max_candidates: int = 1000) -> None:
        self._queue = SortedJobs()
        self._ends = SortedJobs()  # running jobs by estimated end
        self._max_candidates = max_candidates
        self._sizes = RequestSizes()

    def submit(self, job: SchedJob, now: float) -> None:
        self._queue.add(job, (job.priority * -1, job.submitted_at))
        self._sizes.add(whole_gpus(job))

    def started(self, job: SchedJob, now: float) -> None:
        self._queue.remove(job)
        self._sizes.remove(whole_gpus(job))
        self._ends.add(job, (self._end(job, now),))

    def preempted(self, job: SchedJob, now: float) -> None:
        self._ends.remove(job)
        self.submit(job, now)

    def finished(self, job: SchedJob, now: float) -> None:
        self._ends.remove(job)

    def cancel(self, job: SchedJob, now: float) -> None:
        self._queue.remove(job)
        self._sizes.remove(whole_gpus(job))

    @staticmethod
    def _end(job: SchedJob, now: float) -> float:
        return now + job.time_limit_s if job.time_limit_s else math.inf

    def next_decision_at(self, now: float) -> float | None:
        return None

    def pending(self, now: float) -> list[SchedJob]:
        return list(self._queue)

    def schedule(self, ctx: Context) -> None:
        cluster, now = ctx.cluster, ctx.now
        pending = list(self._queue)
        index = 0
        while index < len(pending):  # in order, while the head fits
            first = pending[index]
            placement = place_job(cluster, first)
            if placement is None:
                break
            ctx.start(pending[index], placement)
            index += 1
        if index >= len(pending) or not self._sizes:
            return
        head = pending[index]
        shadow, free_at_shadow = self._reservation(head, cluster)
        smallest = self._sizes.smallest()
        # Shared-GPU candidates of k GPUs that end after the shadow time: the nodes that could
        # hold them and still leave the head its room (valid until a start).
        room_on: dict[int, tuple[int, ...]] = {}
        for job in pending[index + 1 : index + 1 + self._max_candidates]:
            if cluster.free_gpus < smallest:
                return
            ends_in_time = shadow < math.inf and self._end(job, now) <= shadow
            only = None
            if job.gpu_mem_mib and not ends_in_time:
                if job.gpus not in room_on:
                    room_on[job.gpus] = tuple(
                        node for node in range(len(cluster.nodes))
                        if self._fits_after(head, node, job.gpus, free_at_shadow, cluster)
                    )  # fmt: skip
                only = room_on[job.gpus]
                if not only:
                    continue
            placement = place_job(cluster, job, only)
            if placement is None:
                continue
            if ends_in_time or self._leaves_room(head, job, placement, free_at_shadow, cluster):
                ctx.start(job, placement)
                room_on.clear()

    def _reservation(self, head: SchedJob, cluster: ClusterState) -> tuple[float, list[int]]:
        """When the head job can start (running jobs ending by their estimates), and the free
        GPUs per node at that moment."""
        free = list(cluster.free)
        for job in self._ends:
            for node, gpus in job.placement:
                free[node] += gpus
            if cluster.would_fit(free, head.gpus, head.nodes, head.gpu_type):  # shared: whole
                return self._ends.key(job)[0], free
        return math.inf, free

    @staticmethod
    def _fits_after(
        head: SchedJob, node: int, gpus: int, free_at_shadow: list[int], cluster: ClusterState
    ) -> bool:
        """Whether the head still fits at its reservation with `gpus` more GPUs of `node` held."""
        trial = list(free_at_shadow)
        trial[node] -= gpus
        return cluster.would_fit(trial, head.gpus, head.nodes, head.gpu_type)

    @staticmethod
    def _leaves_room(
        head: SchedJob,
        job: SchedJob,
        placement: Placement,
        free_at_shadow: list[int],
        cluster: ClusterState,
    ) -> bool:
        """Whether the head still fits at its reservation with this job holding `placement`;
        if so, the job's GPUs are taken out of the reservation's spare. A job on shared GPUs
        is counted as holding its GPUs whole (it may open new shared GPUs)."""
        trial = list(free_at_shadow)
        for node, gpus in placement:
            trial[node] -= gpus + (job.gpus if job.gpu_mem_mib else 0)
        if not cluster.would_fit(trial, head.gpus, head.nodes, head.gpu_type):
            return False
        free_at_shadow[:] = trial
        return True

    # -- explanations (read-only: `scheduling/explain.py`) -------------------------------------
    def explain(self, job: SchedJob, now: float, cluster: ClusterState) -> RankFactors:
        """Submit order, and the head's reservation: the head is promised the GPUs running jobs
        free by their time limits; a job behind it starts early only if it leaves them."""
        order = (
            "priority, then submit time; a job behind the head starts early only if it "
            "does not delay the head's reservation"
        )
        factors = [*priority(job), age(job, now)]
        head = self._queue.first()
        if head is not None and job in self._queue:
            shadow, _ = self._reservation(head, cluster)
            when = "none: a running job has no time limit" if shadow == math.inf else (
                f"in {span(shadow - now)} (when running jobs reach their time limits)"
            )  # fmt: skip
            if head.id == job.id:
                factors.append(Factor("head's reservation", f"its own, {when}"))
            else:
                factors.append(Factor(f"head (job {head.id}) reserved", when))
                ends = self._end(job, now)
                fits = shadow < math.inf and ends <= shadow
                factors.append(Factor("its time limit", (
                    f"{span(job.time_limit_s or 0)}: ends before the reservation, so it may "
                    "start on any free GPUs" if fits else
                    ("none" if not job.time_limit_s else span(job.time_limit_s))
                    + ": it would outlast the reservation, so it may start only on GPUs the "
                    "head does not need"
                )))  # fmt: skip
        return RankFactors(self.name, order, tuple(factors))
