"""`default`: least expected remaining GPU-time first, where "expected" is a Gittins index over
the run times of the user's finished jobs; preemption only when it clearly pays.

Worked example. User u's last five finished 1-GPU jobs ran 20 s, 30 s, 40 s, 2 h and 3 h. A new
1-GPU job of u has not run yet; its best bet is "give it 40 s": with chance 3/5 it finishes
by then, at an expected cost of (20 + 30 + 40 + 2 x 40) / 5 = 34 s, so it counts as needing
34 / (3/5) = ~57 GPU-s. The cluster is full; the worst running job is an 8-GPU job of user v
whose earlier 8-GPU jobs all ran for days (~1.5M GPU-s left): more than `preempt_ratio` (16)
times 57 GPU-s, and it has run longer than `min_run_s` since it last started, so it is
preempted and u's job runs now. If u's job is still running after 60 s, only the 2 h and 3 h
runs explain it: it now counts as needing ~8,900 GPU-s ((7,140 + 7,140) / 1 to stop at 2 h is
worse than (7,140 + 10,740) / 2 to stop at 3 h), and it will be the one preempted when a job
that is cheaper by 16x arrives. A job that outlived every run in its history counts as needing
as long again as it has run (heavy tails: the longer a job has run, the longer it will run), so
for users without useful history the policy behaves like LAS; when such a job waits (it was
preempted), it queues behind every job that still has a prediction, first come first served
among its kind, like LAS' last queue.

A job that may not be preempted (on a server, one submitted without `--preemptible`) cannot be
probed: once started it runs to its end. It is ranked by its GPUs times its predicted run, and
that key halves each period it waits, the period shorter for a user who has had less than
their share of the GPUs lately (`halving.py` works an example through and gives the
parameters `halving_s`, `halving_min_s` and `usage_half_life_s` with their reasons). When such a
job cannot start (no room, nothing it may preempt), it gets a reservation (the best
`reservations`, 3): the node it fits on that running jobs are expected (by their predictions)
to free first, or the whole nodes of a larger job, on which no job ranked below it starts,
except one whose time limit ends before the reservation's expected time. Without the
reservation an 8-GPU job waits for a whole node to free by chance, while each freed GPU goes
to the next 1-GPU job.

What it knows is what a real server knows: GPU count, user, submission time, the service each
job attained, the run times of jobs that already finished and how long unfinished ones have run
so far. It never reads durations.

Parameters, and why:
- `history` (32): finished run times kept per (user, GPU count) and per user (4x that
  globally). Recent enough to follow a user's current work, large enough for a distribution.
  A job is predicted from its (user, GPU count) history when that has `min_samples` (3) runs,
  else from the user's, else from everyone's: a user's 8-GPU jobs are often unlike their
  1-GPU ones.
- Unfinished runs count as censored observations, and why a Gittins index: `gittins.py`.
- `preempt_ratio` (16): a pending job takes a running job's GPUs only if its expected remaining
  GPU-time is 16x smaller. A preemption costs a checkpoint and a restart (60 s in the
  simulator) and the prediction is uncertain; a wide margin keeps only clear wins.
- `min_run_s` (240 s, 4x the 60 s restart the simulator charges): victims are taken strictly
  worst first, and none is taken while the worst one started less than 4 minutes ago: a
  restarted job gets to make progress (a restart costs it at most a fifth of that first run),
  and preemption waves are throttled (this is what keeps preemptions to a fraction of LAS').
- `restart_backoff` (2): a job restarted k times is not taken again until its current run
  reaches `min_run_s` x 2^k, not even by a starved job; the walk then skips it and may take the
  next victim (only the k = 0 case stops the walk, as above). Exponential backoff: a job that
  runs T seconds is restarted at most about log2(T / `min_run_s`) times, and its restart
  overhead shrinks geometrically. Without it the same few long jobs took most preemptions
  (on philly_14237 @ 1,024 GPUs, 60% of them hit jobs already preempted 4 times or more),
  each time for a new job that, half the time, then ran longer than 30 minutes itself.
- Jobs that outlived their history wait first come first served, behind the predicted ones:
  "as long again" is a fair bet for the order of running jobs, but among waiting ones it puts
  the job that has run longest last, so the longest jobs of a busy period, once preempted,
  waited for it to end (8-GPU jobs of 80-155 h lost 120-160 h: p99 JCT 235 h against LAS'
  206 h). First come first served among them is LAS' last queue.
- `starve_factor` (2) and `starve_min_s` (1 h): a job that waited longer than twice the time it
  has run (Tiresias' rule), and at least an hour, moves ahead of everything (first come first
  served among such jobs) and may preempt any job that is not starved itself, has run
  `min_run_s` and is not held by the restart backoff. This bounds how long a mis-predicted job
  (a short 16-GPU job of a user whose 16-GPU jobs run for hours) or a preempted one can wait.
- `halving_s` (4 h), `halving_min_s` (30 min), `usage_half_life_s` (6 h): `halving.py`. A job
  ranked by halvings keeps the starvation guard's right to preempt: once it waited
  `starve_factor` x its run (at least `starve_min_s`) it may take a preemptible job's GPUs, as
  before; only its place in the order follows the halvings. `halving_s=None`: every job
  ranked by the Gittins index (the old rule).
- `reservations` (3): `halving.py` says why 3 and what a job may do on a reserved node.
- Shares (`set_shares`): a user's expected GPU-time is divided by their weight (their share
  times their team's, each 1 unless an admin set it) when ranked and when weighed against a
  victim: a user with share 2 counts their jobs as half as long. A preemptible job's decayed
  usage is not counted again (ranking by attained service already charges whoever holds GPUs
  longest); a job that may not be preempted halves faster while its user is under their share
  (`halving.py`). With every share 1 the weights are 1. A new weight applies to jobs queued
  from then on.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.explain import Factor, RankFactors, age, gpu_time, priority, span
from gpuyard.scheduling.fair_share import Shares
from gpuyard.scheduling.policies.gittins import History, gittins_remaining_s
from gpuyard.scheduling.policies.halving import FALLBACK_S, HalvingRank
from gpuyard.scheduling.policies.ranked import RankedPolicy, SortedJobs
from gpuyard.scheduling.policy import SchedJob


class DefaultPolicy(RankedPolicy):
    name = "default"
    preemptive = True

    def __init__(
        self,
        *,
        history: int = 32,
        min_samples: int = 3,
        preempt_ratio: float = 16.0,
        min_run_s: float = 240.0,
        restart_backoff: float = 2.0,
        starve_factor: float = 2.0,
        starve_min_s: float = 3600.0,
        halving_s: float | None = 4 * 3600.0,
        halving_min_s: float = 1800.0,
        usage_half_life_s: float = 6 * 3600.0,
        reservations: int = 3,
    ) -> None:
        super().__init__()
        self._history_len = history
        self._min_samples = min_samples
        self._ratio = preempt_ratio
        self._min_run_s = min_run_s
        self._backoff = restart_backoff
        self._starve_factor = starve_factor
        self._starve_min_s = starve_min_s
        self._hist: dict[object, History] = {}
        self._global = History(history * 4)
        self._pending = SortedJobs()
        self._running: dict[int, SchedJob] = {}
        self._starved: set[int] = set()
        self._rank: dict[int, float] = {}  # pending jobs: remaining GPU-s when enqueued
        self._cache: dict[int, tuple[float, float]] = {}  # running: (remaining GPU-s, until)
        self._timers: list[tuple[float, int, int, SchedJob]] = []
        self._guards: list[tuple[float, int, int]] = []  # running jobs' protection ends
        self._token: dict[int, int] = {}
        self._victims_at: tuple[float, list[SchedJob]] | None = None
        # Jobs that started and have not finished, per history key: censored run times.
        self._unfinished: dict[object, dict[int, SchedJob]] = {}
        self._censored_at: tuple[float, dict[object, list[float]]] = (-1.0, {})
        self._shares = Shares()
        # Jobs that may not be preempted: GPUs x predicted run, halved as they wait (halving.py)
        self._halving_s = halving_s
        self._aging = HalvingRank(halving_s or 0.0, halving_min_s, usage_half_life_s)
        self._durations = self._aging.durations
        self._starving: list[tuple[float, int, int, SchedJob]] = []  # when, id, restarts, job
        self._expected_end_at: dict[int, float] = {}  # running: predicted end when it started
        self._reservations = reservations if halving_s is not None else 0
        self._backfills = True  # a job that ends by its time limit may use a reserved node

    def set_shares(self, shares: Shares) -> None:
        """New fair-share weights (jobs queued from now on are ranked by them)."""
        self._shares = shares
        self._aging.set_shares(shares)

    def _weight(self, user: str) -> float:
        shares = self._shares
        if shares.uniform:
            return 1.0
        team = shares.team_of.get(user)
        team_w = shares.teams.get(team, 1.0) if team is not None else 1.0
        return max(shares.users.get(user, 1.0) * team_w, 1e-9)

    # -- prediction -------------------------------------------------------------------------
    def _sample(self, job: SchedJob) -> tuple[object, list[float]]:
        """(history key, its sorted run times): (user, GPU count), else user, else everyone's
        (key None)."""
        for key in ((job.user, job.gpus), job.user):
            h = self._hist.get(key)
            if h is not None and len(h) >= self._min_samples:
                return key, h.sorted
        return None, self._global.sorted or [FALLBACK_S]

    def _censored(self, key: object, now: float) -> list[float]:
        """Run times so far, sorted, of the jobs of `key` that started and have not finished
        (running, or preempted and waiting); computed once per key and instant."""
        if key is None:
            return []
        if self._censored_at[0] != now:
            self._censored_at = (now, {})
        cache = self._censored_at[1]
        runs = cache.get(key)
        if runs is None:
            jobs = self._unfinished.get(key)
            runs = sorted(j.attained(now) / j.gpus for j in jobs.values()) if jobs else []
            cache[key] = runs
        return runs

    def _outlived(self, job: SchedJob, now: float) -> bool:
        """Whether the job has run longer than every run in its history."""
        sample = self._sample(job)[1]
        return job.attained(now) / max(job.gpus, 1) >= sample[-1]

    def _estimate_now(
        self, job: SchedJob, now: float, censored: bool = True
    ) -> tuple[float, float]:
        """(remaining GPU-seconds, for how long that stays about right); with `censored`, the
        unfinished runs of the same history key count as censored observations."""
        gpus = max(job.gpus, 1)
        ran_s = job.attained(now) / gpus
        key, sample = self._sample(job)
        cens = self._censored(key, now) if censored else ()
        rem = gittins_remaining_s(sample, ran_s, cens)
        stale = max(60.0, 0.1 * ran_s)
        if rem is None:
            return gpus * (ran_s + 60.0), stale  # outlived its history: as long again
        next_run = sample[bisect_right(sample, ran_s)]
        return gpus * rem, min(stale, max(next_run - ran_s, 1.0))

    def remaining_gpu_s(self, job: SchedJob, now: float) -> float:
        """Expected remaining GPU-seconds: fixed while a job is pending; for a running job
        recomputed once its run time crosses the next run time in its history or grows by a
        tenth (the estimate moves little in between), so ranking running jobs stays cheap."""
        if not job.running:
            return self._rank[job.id]
        cached = self._cache.get(job.id)
        if cached is None or now >= cached[1]:
            rem, stale = self._estimate_now(job, now, censored=False)
            cached = self._cache[job.id] = (rem, now + stale)
        return cached[0]

    # -- events -----------------------------------------------------------------------------
    def submit(self, job: SchedJob, now: float) -> None:
        self._aging.seen(job.user)
        self._enqueue(job, now)
        self._await_starvation(job, now)

    def submit_to_start(self, job: SchedJob, now: float) -> None:
        """`submit` of a job that starts before the next pass (a restart's replay of a run
        that began later): its rank would never be read, so it is not estimated (that
        estimate, the censored runs sorted again at each replayed instant, was ~30% of a
        restart's rebuild of 20,000 finished jobs: bench/history.py --pending 10000)."""
        self._aging.seen(job.user)
        self._enqueue(job, now, ranked=False)

    def started(self, job: SchedJob, now: float, ends_unread: bool = False) -> None:
        self._pending.remove(job)
        self._pending_removed(job)
        self._starved.discard(job.id)
        token = self._token[job.id] = self._token.get(job.id, 0) + 1
        self._running[job.id] = job
        self._victims_at = None
        self._aging.started(job, now)
        if self._reservations and not ends_unread:
            self._expected_end_at[job.id] = now + self._aging.predicted_s(job, now)
        if job.gpus > 0:
            for key in ((job.user, job.gpus), job.user):
                self._unfinished.setdefault(key, {})[job.id] = job
        # When its protection ends, a pass may decide otherwise: say so (next_decision_at).
        until = now + self._min_run_s * self._backoff**job.restarts
        heapq.heappush(self._guards, (until, job.id, token))

    def started_to_end(self, job: SchedJob, now: float) -> None:
        """`started` of a run that ends before the next pass (a restart's replay of a run
        that has ended since): its expected end, which only a pass's reservations read, is
        not predicted (20,000 predictions of a restart's replay)."""
        self.started(job, now, ends_unread=True)

    def preempted(self, job: SchedJob, now: float) -> None:
        del self._running[job.id]
        self._aging.stopped(job, now)
        self._durations.stopped(job.id, now)
        self._expected_end_at.pop(job.id, None)
        self._victims_at = None
        self._enqueue(job, now)
        self._await_starvation(job, now)

    def finished(self, job: SchedJob, now: float) -> None:
        del self._running[job.id]
        self._aging.stopped(job, now)
        self._victims_at = None
        self._cache.pop(job.id, None)
        self._rank.pop(job.id, None)
        self._token.pop(job.id, None)
        self._forget_unfinished(job)
        self._durations.finished(job.id, now)
        self._expected_end_at.pop(job.id, None)
        if job.gpus == 0:
            return  # no GPU service to learn from: it would read as a zero-length run
        ran_s = job.attained(now) / job.gpus
        for key in ((job.user, job.gpus), job.user):
            h = self._hist.get(key)
            if h is None:
                h = self._hist[key] = History(self._history_len)
            h.add(ran_s)
        self._global.add(ran_s)

    def cancel(self, job: SchedJob, now: float) -> None:
        self._pending.remove(job)
        self._pending_removed(job)
        self._starved.discard(job.id)
        self._rank.pop(job.id, None)
        self._token.pop(job.id, None)  # voids its starvation timer
        self._aging.forget(job.id)
        self._forget_unfinished(job)
        self._durations.forget(job.id)

    def _forget_unfinished(self, job: SchedJob) -> None:
        for key in ((job.user, job.gpus), job.user):
            jobs = self._unfinished.get(key)
            if jobs is not None:
                jobs.pop(job.id, None)

    def _enqueue(self, job: SchedJob, now: float, ranked: bool = True) -> None:
        self._cache.pop(job.id, None)
        if not ranked:  # it starts before any pass reads its key or a timer of it is due
            self._rank[job.id] = 0.0
            self._pending.add(job, (1, 0.0, job.submitted_at))
            self._pending_added(job)
            self._token[job.id] = self._token.get(job.id, 0) + 1
            return
        work = self._rank[job.id] = self._estimate_now(job, now)[0]
        ages = self._ages(job)  # may not be preempted: by GPUs x predicted run, halving
        starved = job.id in self._starved and not ages
        # Starved jobs first come first served; then the others by expected remaining GPU-time;
        # last, first come first served, those that outlived their history.
        if starved:
            key: tuple[int, float, float] = (0, 0.0, job.submitted_at)
        elif ages:
            key = (1, self._aging.work(job, now) / self._weight(job.user), job.submitted_at)
        elif self._outlived(job, now):
            key = (2, job.submitted_at, 0.0)
        else:
            key = (1, work / self._weight(job.user), job.submitted_at)
        self._pending.add(job, key)
        self._pending_added(job)
        token = self._token[job.id] = self._token.get(job.id, 0) + 1
        if ages:
            if self._aging.due(job.id):
                period = self._aging.period_s(job.user, now)
                heapq.heappush(self._timers, (now + period, job.id, token, job))
        elif not starved:
            wait = self._starve_after_s(job, now)
            heapq.heappush(self._timers, (now + wait, job.id, token, job))

    # -- jobs that may not be preempted: GPUs x predicted run, halved as they wait ----------
    def _ages(self, job: SchedJob) -> bool:
        """Whether the job is ranked by GPUs x predicted run with halvings (it may not be
        preempted), rather than by the Gittins index with the starvation guard."""
        return self._halving_s is not None and not job.preemptible

    def _await_starvation(self, job: SchedJob, now: float) -> None:
        """A job ranked by halvings keeps the starvation guard's other half: once it waited
        `_starve_after_s`, it may preempt any (preemptible) job that is not starved itself."""
        if self._ages(job):
            at = now + self._starve_after_s(job, now)
            heapq.heappush(self._starving, (at, job.id, job.restarts, job))

    # -- the reservation (RankedPolicy) -------------------------------------------------------
    def _reserves_for(self, job: SchedJob, now: float) -> bool:
        """Jobs that may not be preempted: a preemptible one takes room by preempting."""
        return not job.preemptible

    def _backfill_end(self, job: SchedJob, now: float) -> float | None:
        """Its time limit: a job surely ends by it (a prediction is only a guess)."""
        return now + job.time_limit_s if job.time_limit_s else None

    def _running_jobs(self) -> list[SchedJob]:
        return list(self._running.values())

    def _expected_end(self, job: SchedJob, now: float) -> float:
        """Its predicted end when it started; once past it, its limit, else as long again."""
        end = self._expected_end_at.get(job.id, now)
        if end > now:
            return end
        started = job.run_started_at if job.run_started_at is not None else now
        if job.time_limit_s:
            return started + job.time_limit_s
        return now + (now - started)  # outlived its prediction: as long again

    def _starve_after_s(self, job: SchedJob, now: float) -> float:
        """How long a job waits before it is starved: `starve_factor` times what it has run
        per GPU, at least `starve_min_s`."""
        ran_s = job.attained(now) / max(job.gpus, 1)
        return max(self._starve_min_s, self._starve_factor * ran_s)

    # -- ranking ----------------------------------------------------------------------------
    def _pending_order(self, now: float) -> list[SchedJob]:
        return list(self._pending)

    def _victims(self, now: float) -> list[SchedJob]:
        if self._victims_at is None or self._victims_at[0] != now:
            ranked = sorted((j for j in self._running.values() if j.preemptible),
                            key=lambda j: -self.remaining_gpu_s(j, now))  # fmt: skip
            self._victims_at = (now, ranked)
        return self._victims_at[1]

    def _outranks(self, a: SchedJob, b: SchedJob, now: float) -> bool:
        """Whether pending `a` may take running `b`'s GPUs: only when it clearly pays. The base
        class stops at the first victim this refuses, so a worst victim that started moments
        ago protects the rest for `min_run_s`."""
        if b.run_started_at is None or now - b.run_started_at < self._min_run_s:
            return False
        if a.id in self._starved:
            return True
        return self._ratio * self._rank[a.id] / self._weight(a.user) < self._estimate_now(b, now)[0]

    def _shielded(self, victim: SchedJob, now: float) -> bool:
        """Restart backoff: a job restarted k times keeps its GPUs until its current run reaches
        `min_run_s` x `restart_backoff`^k, against starved jobs too. Unlike `min_run_s` in
        `_outranks`, it shields only this job: the walk goes on to the next victim."""
        started_at = victim.run_started_at
        if started_at is None or not victim.restarts:
            return False
        return now - started_at < self._min_run_s * self._backoff**victim.restarts

    def _refresh(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, job_id, token, job = heapq.heappop(timers)
            if self._token.get(job_id) != token or job.running:
                continue
            self._pending.remove(job)
            self._pending_removed(job)
            if self._ages(job):
                self._aging.halve(job_id)
            else:
                self._starved.add(job_id)
            self._enqueue(job, now)
        starving = self._starving
        while starving and starving[0][0] <= now:
            _, job_id, restarts, job = heapq.heappop(starving)
            if job in self._pending and job.restarts == restarts:
                self._starved.add(job_id)  # may preempt now; its place in the order stays

    def next_decision_at(self, now: float) -> float | None:
        """The next starvation promotion, or the end of a running job's protection while jobs
        wait (a pass then may preempt it)."""
        timers, guards = self._timers, self._guards
        while timers and self._token.get(timers[0][1]) != timers[0][2]:
            heapq.heappop(timers)
        while guards and (guards[0][0] <= now or self._token.get(guards[0][1]) != guards[0][2]):
            heapq.heappop(guards)
        wake = timers[0][0] if timers else None
        if guards and self._pending_sizes and (wake is None or guards[0][0] < wake):
            wake = guards[0][0]
        starving = self._starving
        while starving and not (starving[0][3] in self._pending
                                and starving[0][3].restarts == starving[0][2]):  # fmt: skip
            heapq.heappop(starving)
        if starving and self._victims(now) and (wake is None or starving[0][0] < wake):
            wake = starving[0][0]  # only worth a pass while something could be preempted
        return wake

    # -- explanations (read-only: `scheduling/explain.py`) -------------------------------------
    def explain(self, job: SchedJob, now: float, cluster: ClusterState) -> RankFactors:
        """The factors of a pending job's key as they were when it was queued: its tier
        (starved, predicted, outlived its history), its GPUs times the expected run left on
        each, divided by its user's share weight, and its age against the starvation rule;
        for a job that may not be preempted, its GPUs times its predicted run, halved per
        `halving_s` waited. Reads only: no cache of the policy is filled or moved."""
        order = "least expected remaining GPU-time first, divided by the share weight"
        if job not in self._pending:
            return RankFactors(self.name, order, priority(job))
        if self._ages(job):
            return RankFactors(self.name, order, self._aged_factors(job, now))
        tier = self._pending.key(job)[0]
        gpus = max(job.gpus, 1)
        work = self._rank.get(job.id, 0.0)
        weight = self._weight(job.user)
        factors = [*priority(job), Factor("GPUs", str(job.gpus))]
        ran_s = job.attained_gpu_s / gpus
        if tier == 2:
            factors.append(Factor("expected run left", f"unknown: it has run {span(ran_s)}, "
                                  f"longer than any run in its history (waits first come "
                                  f"first served behind the jobs with a prediction)"))  # fmt: skip
        else:
            factors.append(
                Factor(
                    "expected run left", f"{span(work / gpus)} per GPU ({self._history_words(job)})"
                )
            )
            factors.append(Factor("GPU-time left", gpu_time(work)))
        factors.append(Factor("share weight", f"{weight:g}"))
        if ran_s > 0:
            factors.append(Factor("ran before", f"{span(ran_s)} (preempted or requeued)"))
        factors.append(age(job, now, self._starve_words(job, now, tier)))
        return RankFactors(self.name, order, tuple(factors))

    def _aged_factors(self, job: SchedJob, now: float) -> tuple[Factor, ...]:
        """A job that may not be preempted: `halving.HalvingRank.factors`."""
        token = self._token.get(job.id)
        due = min((at for at, job_id, tok, _ in list(self._timers)
                   if job_id == job.id and tok == token), default=None)  # fmt: skip
        key = self._pending.key(job)[1]
        weight = self._weight(job.user)
        return self._aging.factors(job, now, key, weight, due, job.id in self._starved)

    def _history_words(self, job: SchedJob) -> str:
        key, sample = self._sample(job)
        if key is None and not self._global.sorted:
            return f"no finished runs yet: {span(FALLBACK_S)} assumed"
        runs = len(sample)
        whose = "everyone's" if key is None else "the user's"
        size = " of this size" if isinstance(key, tuple) else ""
        return f"from {whose} last {runs} runs{size}"

    def _starve_words(self, job: SchedJob, now: float, tier: int) -> str:
        """Relative aging: a job that waited `starve_factor` times what it has run (at least
        `starve_min_s`) goes ahead of every job not starved."""
        if tier == 0:
            return "starved: ahead of every job that is not"
        token = self._token.get(job.id)
        due = min((at for at, job_id, tok, _ in list(self._timers)
                   if job_id == job.id and tok == token), default=None)  # fmt: skip
        if due is None:
            return "goes first once starved"
        rule = self._starve_after_s(job, now)
        if due <= now:
            return "starved: goes first at the next pass"
        return f"goes first in {span(due - now)} (after {span(rule)} of waiting)"
