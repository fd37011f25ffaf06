"""`default`: shortest predicted remaining GPU-time first, predictions from each user's history,
with preemption only when it clearly pays for its checkpoint and restart.

Worked example. User u has run ten 1-GPU jobs lately, most finishing in about 2 minutes. The
cluster is full of 8-GPU jobs of user v that, like v's earlier ones, run for days. A new job of
u (1 GPU) is predicted to need ~120 GPU-s; the worst running job of v has ~1.5M GPU-s left:
far more than `preempt_ratio` times as much, and it has run longer than `min_run_s` since it
last started, so it is preempted and u's job runs now instead of waiting days. A new job of v
(predicted days) would not preempt anyone: it waits for free GPUs, ranked by its prediction.

What it knows is what a real server knows: GPU count, user, submission time, time limit, the
service each job attained, and the run times of jobs that already finished. A job that outlives
its prediction is assumed to need as long again (heavy-tailed run times: the longer a job has
run, the longer it is likely to run), which makes the policy behave like LAS for jobs whose
user has no useful history. A job waiting longer than `starve_factor` times its predicted run
time (and at least `starve_min_s`) moves ahead of all others, so nothing starves.
"""

from __future__ import annotations

import heapq
from collections import deque
from statistics import median

from gpuyard.scheduling.policies.ranked import RankedPolicy, SortedJobs
from gpuyard.scheduling.policy import SchedJob

_FALLBACK_S = 3600.0  # before anything finished: an hour, a neutral guess


class DefaultPolicy(RankedPolicy):
    name = "default"
    preemptive = True

    def __init__(
        self,
        *,
        history: int = 32,
        preempt_ratio: float = 16.0,
        min_run_s: float = 1800.0,
        starve_factor: float = 4.0,
        starve_min_s: float = 3600.0,
        probe_gpu_s: float = 3600.0,
    ) -> None:
        super().__init__()
        self._history_len = history
        self._ratio = preempt_ratio
        self._min_run_s = min_run_s
        self._starve_factor = starve_factor
        self._starve_min_s = starve_min_s
        self._probe_gpu_s = probe_gpu_s
        self._by_user: dict[str, deque[float]] = {}
        self._recent: deque[float] = deque(maxlen=history * 4)
        self._pending = SortedJobs()
        self._running: dict[int, SchedJob] = {}
        self._predicted_s: dict[int, float] = {}  # predicted total run time (seconds)
        self._starved: set[int] = set()
        self._timers: list[tuple[float, int, int, SchedJob]] = []
        self._token: dict[int, int] = {}
        self._victims_at: tuple[float, list[SchedJob]] | None = None

    # -- prediction -------------------------------------------------------------------------
    def predict_total_s(self, job: SchedJob, ran_s: float) -> float:
        """Predicted total run time of `job`, given it has already run `ran_s` seconds."""
        past = self._by_user.get(job.user)
        sample = past if past is not None and len(past) >= 3 else self._recent
        longer = [d for d in sample if d > ran_s]
        if longer:
            return median(longer)
        return max(2.0 * ran_s, _FALLBACK_S if not sample else ran_s + 60.0)

    def remaining_gpu_s(self, job: SchedJob, now: float) -> float:
        ran_s = job.attained(now) / max(job.gpus, 1)
        total = self._predicted_s.get(job.id)
        if total is None or ran_s >= total:
            total = ran_s * 2.0 + 60.0  # outlived its prediction: as long again
        return max(job.gpus, 1) * (total - ran_s)

    # -- events -----------------------------------------------------------------------------
    def submit(self, job: SchedJob, now: float) -> None:
        self._enqueue(job, now)

    def started(self, job: SchedJob, now: float) -> None:
        self._pending.remove(job)
        self._pending_removed(job)
        self._starved.discard(job.id)
        self._token[job.id] = self._token.get(job.id, 0) + 1
        self._running[job.id] = job
        self._victims_at = None

    def preempted(self, job: SchedJob, now: float) -> None:
        del self._running[job.id]
        self._victims_at = None
        self._enqueue(job, now)

    def finished(self, job: SchedJob, now: float) -> None:
        del self._running[job.id]
        self._victims_at = None
        ran_s = job.attained(now) / max(job.gpus, 1)
        history = self._by_user.setdefault(job.user, deque(maxlen=self._history_len))
        history.append(ran_s)
        self._recent.append(ran_s)
        self._predicted_s.pop(job.id, None)
        self._token.pop(job.id, None)

    def cancel(self, job: SchedJob) -> None:
        if job.id in self._running:
            del self._running[job.id]
            self._victims_at = None
        else:
            self._pending.remove(job)
            self._pending_removed(job)
        self._token.pop(job.id, None)

    def _enqueue(self, job: SchedJob, now: float) -> None:
        ran_s = job.attained(now) / max(job.gpus, 1)
        total = self.predict_total_s(job, ran_s)
        self._predicted_s[job.id] = total
        tier = self._tier(job, now)
        # Probing jobs run first come first served; the others by predicted remaining work.
        work = 0.0 if tier == 1 else max(job.gpus, 1) * (total - ran_s)
        self._pending.add(job, (tier, work, job.submitted_at))
        self._pending_added(job)
        token = self._token[job.id] = self._token.get(job.id, 0) + 1
        if job.id not in self._starved:
            wait = max(self._starve_min_s, self._starve_factor * total)
            heapq.heappush(self._timers, (now + wait, job.id, token, job))

    # -- ranking ----------------------------------------------------------------------------
    def _tier(self, job: SchedJob, now: float) -> int:
        """0: starved; 1: still probing (little service yet); 2: ranked by prediction."""
        if job.id in self._starved:
            return 0
        return 1 if job.attained(now) < self._probe_gpu_s else 2

    def _pending_order(self, now: float) -> list[SchedJob]:
        return list(self._pending)

    def _victims(self, now: float) -> list[SchedJob]:
        if self._victims_at is None or self._victims_at[0] != now:
            ranked = sorted(
                self._running.values(),
                key=lambda j: (-self._tier(j, now), -self.remaining_gpu_s(j, now)),
            )
            self._victims_at = (now, ranked)
        return self._victims_at[1]

    def _outranks(self, a: SchedJob, b: SchedJob, now: float) -> bool:
        """Whether pending `a` may take running `b`'s GPUs: only when it clearly pays."""
        if b.run_started_at is None:
            return False
        tier_a, tier_b = self._tier(a, now), self._tier(b, now)
        if tier_a == 0:
            return tier_b != 0
        if now - b.run_started_at < self._min_run_s or tier_a > tier_b:
            return False
        if tier_a < tier_b:
            return True
        return self._ratio * self.remaining_gpu_s(a, now) < self.remaining_gpu_s(b, now)

    def _refresh(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, job_id, token, job = heapq.heappop(timers)
            if self._token.get(job_id) != token or job.running:
                continue
            self._pending.remove(job)
            self._pending_removed(job)
            self._starved.add(job_id)
            self._enqueue(job, now)

    def next_decision_at(self, now: float) -> float | None:
        timers = self._timers
        while timers and self._token.get(timers[0][1]) != timers[0][2]:
            heapq.heappop(timers)
        return timers[0][0] if timers else None
