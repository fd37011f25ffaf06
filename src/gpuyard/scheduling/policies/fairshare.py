"""`fairshare`: Slurm's multifactor priority: age, job size and the user's decayed past usage
against an equal share, recomputed every `recalc_s` (Slurm's PriorityCalcPeriod, 5 min).

Worked example. Users a and b have equal shares. a used 900 GPU-h this week, b 100 GPU-h. Each
submits a 1-GPU job at the same moment. b's fair-share factor is 2^(-0.1/0.5) = 0.87 and a's
2^(-0.9/0.5) = 0.29, so b's job ranks first and runs on the next free GPU. A job's age adds up
to `weight_age` over `max_age_s` (7 days), so a's job still starts eventually. No preemption:
jobs start greedily in priority order, smaller ones using GPUs a bigger one cannot. A job's own
`--priority` (like Slurm's QOS priority) ranks before the multifactor score.

Shares (`set_shares`, `scheduling/fair_share.py`): an admin may give users and teams other
weights than 1; a user's share is then their team's part times their part of the team, instead
of 1/users. With every share equal and no teams (a trace's users) nothing changes.
"""

from __future__ import annotations

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.explain import Factor, RankFactors, priority, span
from gpuyard.scheduling.fair_share import Shares
from gpuyard.scheduling.policies.ranked import RequestSizes, SortedJobs
from gpuyard.scheduling.policy import Context, SchedJob, place_job, whole_gpus


class FairsharePolicy:
    name = "fairshare"
    preemptive = False

    def __init__(
        self,
        *,
        weight_fairshare: float = 10_000.0,
        weight_age: float = 1_000.0,
        weight_size: float = 1_000.0,
        half_life_s: float = 7 * 86400.0,
        max_age_s: float = 7 * 86400.0,
        recalc_s: float = 300.0,
    ) -> None:
        self._w_fs, self._w_age, self._w_size = weight_fairshare, weight_age, weight_size
        self._half_life_s = half_life_s
        self._max_age_s = max_age_s
        self._recalc_s = recalc_s
        self._usage: dict[str, float] = {}  # decayed GPU-seconds per user
        self._usage_at = 0.0
        self._pending = SortedJobs()
        self._running: dict[int, SchedJob] = {}
        self._jobs: dict[int, SchedJob] = {}
        self._total_gpus = 1
        self._next_recalc = 0.0
        self._sizes = RequestSizes()
        self._shares = Shares()
        self._norm: dict[str, float] | None = None  # normalised shares of the users seen

    def set_shares(self, shares: Shares) -> None:
        """New weights; they count from the next recalculation (as Slurm's do)."""
        self._shares = shares
        self._norm = None
        if shares.half_life_s is not None:
            self._half_life_s = shares.half_life_s

    def _share(self, user: str) -> float:
        if self._shares.uniform:
            return 1.0 / max(len(self._usage), 1)
        if self._norm is None:
            self._norm = self._shares.normalised(self._usage)
        return self._norm.get(user, 0.0)

    # -- priority ---------------------------------------------------------------------------
    def priority(self, job: SchedJob, now: float) -> float:
        total = sum(self._usage.values()) or 1.0
        share = self._share(job.user)
        usage = self._usage.get(job.user, 0.0) / total
        fairshare = 2.0 ** (-usage / share) if share > 0 else 0.0
        age = min((now - job.submitted_at) / self._max_age_s, 1.0)
        size = 1.0 - min(job.gpus / self._total_gpus, 1.0)
        score = self._w_fs * fairshare + self._w_age * age + self._w_size * size
        return float(score)

    def _decay(self, now: float) -> None:
        """Charge running jobs' GPU time, then decay everyone's usage to `now`."""
        dt = now - self._usage_at
        if dt <= 0:
            return
        factor = 0.5 ** (dt / self._half_life_s)
        for user in self._usage:
            self._usage[user] *= factor
        for job in self._running.values():
            charged = job.gpus * dt * (1 + factor) / 2  # its GPU time over dt, half decayed
            self._usage[job.user] = self._usage.get(job.user, 0.0) + charged
        self._usage_at = now

    def _recalc(self, now: float) -> None:
        self._decay(now)
        jobs = list(self._pending)
        self._pending = SortedJobs()
        for job in jobs:
            self._pending.add(job, (-job.priority, -self.priority(job, now), job.submitted_at))
        self._next_recalc = now + self._recalc_s

    # -- events -----------------------------------------------------------------------------
    def submit(self, job: SchedJob, now: float) -> None:
        if job.user not in self._usage:
            self._usage[job.user] = 0.0
            self._norm = None
        self._pending.add(job, (-job.priority, -self.priority(job, now), job.submitted_at))
        self._sizes.add(whole_gpus(job))

    def started(self, job: SchedJob, now: float) -> None:
        self._decay(now)
        self._pending.remove(job)
        self._sizes.remove(whole_gpus(job))
        self._running[job.id] = job

    def preempted(self, job: SchedJob, now: float) -> None:
        self._decay(now)
        del self._running[job.id]
        self.submit(job, now)

    def finished(self, job: SchedJob, now: float) -> None:
        self._decay(now)
        del self._running[job.id]

    def cancel(self, job: SchedJob, now: float) -> None:
        self._pending.remove(job)
        self._sizes.remove(whole_gpus(job))

    def next_decision_at(self, now: float) -> float | None:
        return self._next_recalc if self._pending else None

    def pending(self, now: float) -> list[SchedJob]:
        return list(self._pending)

    def schedule(self, ctx: Context) -> None:
        cluster, now = ctx.cluster, ctx.now
        self._total_gpus = max(cluster.total_gpus, 1)
        if now >= self._next_recalc:
            self._recalc(now)
        if not self._sizes:
            return
        smallest = self._sizes.smallest()
        for job in list(self._pending):
            if cluster.free_gpus < smallest:
                return
            placement = place_job(cluster, job)
            if placement is not None:
                ctx.start(job, placement)

    # -- explanations (read-only: `scheduling/explain.py`) -------------------------------------
    def explain(self, job: SchedJob, now: float, cluster: ClusterState) -> RankFactors:
        """sprio's columns: the score the order holds (from the last recalculation) and its
        fair-share, age and size parts, each factor times its weight, as of now. Reads only:
        usage is not decayed, no cached share is set."""
        order = (f"highest multifactor score first: fair-share x {self._w_fs:g} + age x "
                 f"{self._w_age:g} + size x {self._w_size:g}, recalculated every "
                 f"{span(self._recalc_s)}")  # fmt: skip
        if job not in self._pending:
            return RankFactors(self.name, order, priority(job))
        usage = dict(self._usage)
        total = sum(usage.values()) or 1.0
        if self._shares.uniform:
            share = 1.0 / max(len(usage), 1)
        else:
            share = self._shares.normalised(usage).get(job.user, 0.0)
        used = usage.get(job.user, 0.0) / total
        fairshare = 2.0 ** (-used / share) if share > 0 else 0.0
        age = min((now - job.submitted_at) / self._max_age_s, 1.0)
        size = 1.0 - min(job.gpus / self._total_gpus, 1.0)
        score = -self._pending.key(job)[1]
        factors = (
            *priority(job),
            Factor("score", f"{score:,.0f}"),
            Factor("fair-share", f"{fairshare:.3f} (usage {used:.0%} of all, share {share:.0%})"
                   f" = {self._w_fs * fairshare:,.0f}"),
            Factor("age", f"{age:.3f} (waited {span(now - job.submitted_at)} of "
                   f"{span(self._max_age_s)}) = {self._w_age * age:,.0f}"),
            Factor("size", f"{size:.3f} ({job.gpus} of {self._total_gpus} GPUs) = "
                   f"{self._w_size * size:,.0f}"),
        )  # fmt: skip
        return RankFactors(self.name, order, factors)
