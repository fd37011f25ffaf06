"""How `default` ranks the jobs that may not be preempted: GPUs x predicted run, the key halved
as the job waits, faster for a user who has had less than their share of the GPUs lately.

Such a job (on a server, one submitted without `--preemptible`) cannot be probed: once started
it runs to its end. So it is ranked by its GPUs times its predicted run (`duration_prediction`:
the median of its owner's recent runs like it, raised by a sibling still running longer, at
most its time limit; what `show` says), and that key halves each time it has waited a halving
period: a stream of short jobs delays a longer one by one period per doubling of their
GPU-time ratio.

The period is `halving_s` (4 h) times the owner's fair-share ratio U/S, at least
`halving_min_s` (30 min): U is the user's part of everyone's GPU time, decayed with a
`half_life_s` (6 h) half-life, S their normalised share (`fair_share.Shares`: 1 / users seen
unless an admin set shares; such shares also divide the key, `DefaultPolicy._weight`). A user
at or above their share halves every 4 h; one who had none of the GPUs lately, every 30 min.
`DefaultPolicy(halving_s=..., halving_min_s=..., usage_half_life_s=...)`; `halving_min_s =
halving_s` is the fixed period of issue 25's part 2.

Worked example (one GPU). b's jobs run 5 h; b last ran two weeks ago. a floods the GPU with
1-minute jobs, one a minute, for 100 h. b's next job (5 GPU-h, 300x a's 1 GPU-min) is queued
30 s in. With a fixed 4-h period it overtakes a fresh 1-minute job after 9 halvings: 36 h.
Here a holds all the GPU time of the last hours, b none: b's period is 30 min, and b's job
starts after 9 x 30 min = 4.5 h; then a's jobs wait behind it for 5 h. Had b used the GPU for
the 15 h before the flood, b would be the one over their share: b's periods start at 4 h and
shorten as a's usage overtakes b's, and b's job starts after 18.6 h, not 36.

Why these parameters (philly_14237 at 992, 1,024 and 1,056 GPUs, no job preemptible, no
limits; docs/scheduling.md has the table): a fixed 4-h period gave avg JCT 11.45 h, p99
queueing 67.6 h, Jain 0.153; the fair-share period with a 6-h half-life 11.22 / 66.3 / 0.127,
and with padded limits Jain 0.116 -> 0.142. Light users' jobs (the users with the worst
slowdowns: their short jobs have no history and are predicted from everyone's) catch up fast,
while the heavy users' jobs, which make most of the load, stay in shortest-first order among
themselves. A 7-day half-life (Slurm's, `gpuyard share`'s) follows usage too slowly: a's flood
has to outweigh a week of b's past usage first (b, idle two weeks, waits 19.8 h), and p99
queueing at 1,024 GPUs rose to 72 h. Tried and dropped (the table): half-lives of 2 h (as good
on average, Jain 0.124 at 1,024), 3 h, 4 h and 1 day, periods down to 15 min or only to 1 h, up
to 8 h over the share, S over the users with jobs queued or running.

Reservations (`DefaultPolicy(reservations=3)`): the blocked jobs (that may not be preempted)
that hold nodes for themselves, best first. 1, 2, 3, 5 gave avg JCT 11.59 / 11.49 / 11.45 /
11.47 h, p99 queueing 70.1 / 68.7 / 67.6 / 69.5 h, Jain 0.147 / 0.145 / 0.153 / 0.145 over the
sizes (with a fixed 4-h period; with the fair-share one 2, 3, 4 gave 11.23 / 11.22 / 11.30 h):
each drains one node at a time, and the drained node then serves the short wide jobs behind
it. A job uses a reserved node only if its time limit ends before the node is expected to be
free (a job with no limit never: a prediction is too often wrong, median factor 7.9 on
Philly); with padded limits that took avg JCT @ 1,024 from 7.80 to 7.49 h and Jain from 0.099
to 0.118. A reservation is kept for its job 15 min before it is recomputed (one that moves at
each pass drains nothing). A preemptible job gets none: it makes room by preempting.

Pure, fed by the policy's events; the same events give the same decisions live and replayed.
"""

from __future__ import annotations

import math

from gpuyard.scheduling.duration_prediction import DurationPredictor
from gpuyard.scheduling.explain import Factor, age, gpu_time, priority, span
from gpuyard.scheduling.fair_share import DecayedUsage, Shares
from gpuyard.scheduling.policy import SchedJob

FALLBACK_S = 3600.0  # no history and no limit: an hour, a neutral guess
MAX_HALVINGS = 40  # a key halved 40 times is ahead of every fresh one: no further timers


class HalvingRank:
    """The key, the halving period and the factors of jobs that may not be preempted."""

    def __init__(self, halving_s: float, halving_min_s: float, half_life_s: float) -> None:
        self.halving_s = halving_s
        self.halving_min_s = min(halving_min_s, halving_s)
        self.durations = DurationPredictor()
        self.usage = DecayedUsage(half_life_s)
        self.halvings: dict[int, int] = {}  # pending: times its key was halved
        self._shares = Shares()
        self._users: set[str] = set()
        self._norm: dict[str, float] | None = None  # normalised shares of the users seen

    # -- events -----------------------------------------------------------------------------
    def seen(self, user: str) -> None:
        """A job of `user` was queued: they count among the users who share the GPUs."""
        if user not in self._users:
            self._users.add(user)
            self._norm = None

    def set_shares(self, shares: Shares) -> None:
        self._shares = shares
        self._norm = None

    def started(self, job: SchedJob, now: float) -> None:
        self.halvings.pop(job.id, None)
        self.usage.start(job.user, job.gpus, now)
        self.durations.started(job.id, job.user, job.gpus, job.time_limit_s, now)

    def stopped(self, job: SchedJob, now: float) -> None:
        """A run ended: preempted (the job queues again) or finished (`durations.finished`)."""
        self.usage.stop(job.user, job.gpus, now)

    # -- the key ------------------------------------------------------------------------------
    def predicted_s(self, job: SchedJob, now: float) -> float:
        """The job's predicted remaining run: its owner's history (`duration_prediction`,
        what `show` says), at most its time limit; an hour with no history and no limit."""
        whole = self.durations.expected_s(job.user, job.gpus, job.time_limit_s, now, job.id)
        if whole is None:
            whole = FALLBACK_S
        return max(60.0, whole - job.attained(now) / max(job.gpus, 1))

    def work(self, job: SchedJob, now: float) -> float:
        """GPUs x predicted run, halved once per period the job has waited."""
        work = max(job.gpus, 1) * self.predicted_s(job, now)
        return math.ldexp(work, -self.halvings.get(job.id, 0))

    def period_s(self, user: str, now: float) -> float:
        """How long until a waiting job of `user` is halved next: `halving_s` x U/S (U: the
        user's part of the decayed GPU time, S: their normalised share), between
        `halving_min_s` and `halving_s`."""
        if self.halving_min_s >= self.halving_s:
            return self.halving_s
        share = self._normalised().get(user, 0.0)
        return self._period(self.usage.part(user, now), share)

    def due(self, job_id: int) -> bool:
        """Whether another halving timer is worth setting for this job."""
        return self.halvings.get(job_id, 0) < MAX_HALVINGS

    def halve(self, job_id: int) -> None:
        self.halvings[job_id] = self.halvings.get(job_id, 0) + 1

    def forget(self, job_id: int) -> None:
        """The job left the queue without running (cancelled)."""
        self.halvings.pop(job_id, None)

    # -- explanations (read-only) --------------------------------------------------------------
    def factors(
        self,
        job: SchedJob,
        now: float,
        key: float,
        weight: float,
        next_at: float | None,
        starved: bool,
    ) -> tuple[Factor, ...]:
        """GPUs, its predicted run (`show`'s ExpectedRun words), the GPU-time its key holds,
        share weight, and the halvings of its wait with the user's part of recent GPU time."""
        got = self.durations.predict(job.user, job.gpus, job.time_limit_s, now, job.id)
        words = got.describe() if got is not None else (
            f"no finished runs and no time limit: {span(FALLBACK_S)} assumed")  # fmt: skip
        halved = self.halvings.get(job.id, 0)
        factors = [*priority(job), Factor("GPUs", str(job.gpus)),
                   Factor("predicted run", f"{span(self.predicted_s(job, now))} ({words})"),
                   Factor("GPU-time", gpu_time(key * weight) + (
                       f" (halved {halved} times)" if halved else "")),
                   Factor("share weight", f"{weight:g}")]  # fmt: skip
        ran_s = job.attained_gpu_s / max(job.gpus, 1)
        if ran_s > 0:
            factors.append(Factor("ran before", f"{span(ran_s)} (preempted or requeued)"))
        share = self._normalised(cache=False).get(job.user, 0.0)
        used = self.usage.part(job.user, now)
        period = self._period(used, share)
        then = f"its GPU-time halves every {span(period)} it waits"
        if self.halving_min_s < self.halving_s:
            then += (f" (its user had {used:.0%} of the recent GPU time for a {share:.0%} share: "
                     f"{span(self.halving_s)} at or over the share, down to "
                     f"{span(self.halving_min_s)})")  # fmt: skip
        if next_at is not None:
            then += f", next in {span(next_at - now)}"
        if starved:
            then += "; starved: may preempt a preemptible job"
        factors.append(age(job, now, then))
        return tuple(factors)

    def _normalised(self, cache: bool = True) -> dict[str, float]:
        if self._norm is not None:
            return self._norm
        norm = self._shares.normalised(self._users)
        if cache:
            self._norm = norm
        return norm

    def _period(self, used: float, share: float) -> float:
        """`halving_s` x used / share, between `halving_min_s` and `halving_s`."""
        ratio = used / share if share > 0 else 1.0
        return min(self.halving_s, max(self.halving_min_s, self.halving_s * ratio))
