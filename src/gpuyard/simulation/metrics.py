"""What a replay means for users: JCT, queueing, slowdown, utilisation, preemptions, fairness.

Conventions of the published simulators (Tiresias, Helios, Lucid): JCT = finish - submit,
queueing delay = first start - submit, makespan = last finish - first submit. Percentiles are
nearest-rank (the value of a real job: p99 of 100 jobs is the 99th smallest), everywhere here.
Slowdown is bounded: max(1, JCT / max(duration, 60 s)), so seconds-long jobs do not dominate;
fairness is Jain's index over the users' average bounded slowdowns. Utilisation counts busy GPUs
inside the submission window (first to last submit) only, where the load is the trace's own.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from gpuyard.simulation.engine import Explained, ReplayResult

# Bounded slowdown's floor on the duration: a 1-second job that waits a minute is not "60x
# slower" in any sense a user feels (Feitelson's bounded slowdown). 60 s, not the 10 s common in
# HPC papers: it reproduces the reference fairness for fifo on philly_14237 @ 1,024 GPUs
# (Jain 0.27; 10 s gives 0.17), and one minute is the restart penalty of this cluster model.
SLOWDOWN_BOUND_S = 60.0


@dataclass(frozen=True, slots=True)
class PolicyReport:
    """One policy's figures over one replay; field names are the stable JSON names."""

    policy: str
    jobs: int
    avg_jct_s: float
    p50_jct_s: float
    p95_jct_s: float
    p99_jct_s: float
    avg_queue_s: float
    p99_queue_s: float
    avg_slowdown: float
    makespan_s: float
    utilization: float
    preemptions: int
    fairness: float
    # "trace": limits as the trace gives them; "none": no limits; "padded": the padded-limit
    # model (`time_limits.py`); "exact": no limits, so each job's limit was its true duration
    # (users who estimate perfectly), for policies that need estimates (backfill), as in the
    # published EASY-backfill replays.
    time_limits: str = "trace"
    # The share of the jobs a policy could preempt (1.0: all, as in the published traces;
    # `--preemptible-fraction` lowers it to model a server where preemption is opt-in).
    preemptible: float = 1.0
    timeouts: int = 0  # jobs killed at their time limit (their JCT ends there)
    explained: Explained | None = None  # `--explain JOB`: its rank and factors

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        if self.explained is None:
            del out["explained"]  # the figures' JSON stays as it was without --explain
        elif self.explained.rank is not None:
            out["explained"]["text"] = self.explained.rank.describe()
        return out


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values (0 for none)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(pct / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def bounded_slowdown(jct_s: float, duration_s: float) -> float:
    """max(1, JCT / max(duration, 60 s)): how many times longer than alone, short jobs bounded."""
    return max(1.0, jct_s / max(duration_s, SLOWDOWN_BOUND_S))


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 when all equal, 1/n when one takes all."""
    squares = sum(x * x for x in values)
    if not values or squares == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * squares)


def report(policy: str, result: ReplayResult) -> PolicyReport:
    """The figures of one replay; an empty replay gives zeros (and a fairness of 1)."""
    jobs = result.jobs
    n = len(jobs)
    if n == 0:
        return PolicyReport(policy, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 1.0)
    jcts = sorted(j.finished_at - j.submitted_at for j in jobs)
    queues = sorted(j.first_started_at - j.submitted_at for j in jobs)
    by_user: defaultdict[str, list[float]] = defaultdict(list)
    for j in jobs:
        by_user[j.user].append(bounded_slowdown(j.finished_at - j.submitted_at, j.duration_s))
    slowdowns = [s for per_user in by_user.values() for s in per_user]
    capacity_gpu_s = result.total_gpus * result.window_s
    return PolicyReport(
        policy=policy,
        jobs=n,
        avg_jct_s=math.fsum(jcts) / n,
        p50_jct_s=percentile(jcts, 50),
        p95_jct_s=percentile(jcts, 95),
        p99_jct_s=percentile(jcts, 99),
        avg_queue_s=math.fsum(queues) / n,
        p99_queue_s=percentile(queues, 99),
        avg_slowdown=math.fsum(slowdowns) / n,
        makespan_s=max(j.finished_at for j in jobs) - min(j.submitted_at for j in jobs),
        utilization=result.busy_gpu_s_in_window / capacity_gpu_s if capacity_gpu_s > 0 else 0.0,
        preemptions=sum(j.preemptions for j in jobs),
        fairness=jain_index([math.fsum(s) / len(s) for s in by_user.values()]),
        timeouts=sum(j.timed_out for j in jobs),
    )
