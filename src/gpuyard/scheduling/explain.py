"""Why a pending job ranks where it does, sprio-style: its place in the policy's order and the
factors of the policy's key, in words a user reads.

Worked example (`default`). Job 12 asks 4 GPUs; its user's last runs of 4 GPUs suggest it needs
about 30 more minutes on each, 2 GPU-hours in all; the user's fair-share weight is 1 and it has
waited 10 minutes. `gpuyard show 12` says

    rank 2 of 5 (default: least expected remaining GPU-time first, divided by the share
    weight); GPUs 4, expected run left 30 min per GPU (from the user's last 6 runs of this
    size), GPU-time left 2 GPU-h, share weight 1, age waited 10 min, goes first in 50 min
    (after 1 h)

and job 13, a 1-GPU job with a 5-minute history, ranks 1: its 5 GPU-minutes are less.

One function, `explain`, that the live server (`gpuyard show`, `queue`'s rank) and the
simulator (`gpuyard simulate --explain JOB`) both call, so both say the same. A policy says its
own factors with an optional method `explain(job, now, cluster) -> RankFactors` (rank left
out); one without it is explained by what every policy honours: priority, then submit time.
Why on demand and read-only: a scheduling pass must cost the same when nobody asks, and an
explanation that touched a policy's caches could change the decisions it explains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.duration_prediction import format_span
from gpuyard.scheduling.policy import Policy, SchedJob


@dataclass(frozen=True, slots=True)
class Factor:
    """One factor of a policy's key: a name (sprio's column) and its value in words."""

    name: str
    value: str


@dataclass(frozen=True, slots=True)
class RankFactors:
    """Where a pending job stands in its policy's order, and why."""

    policy: str
    order: str  # what the policy's order sorts by, in words
    factors: tuple[Factor, ...]
    rank: int | None = None  # 1: next to start; None: not in the policy's queue
    among: int = 0  # pending jobs in the policy's queue

    def place(self) -> str:
        """ "rank 2 of 5", or why there is no rank."""
        if self.rank is None:
            return "not in the scheduler's queue (held back before it)"
        return f"rank {self.rank} of {self.among}"

    def reasons(self) -> str:
        """The factors, one phrase each: "GPUs 4, share weight 1, ..."."""
        return ", ".join(f"{f.name} {f.value}" for f in self.factors)

    def describe(self) -> str:
        """The whole explanation in one line."""
        return f"{self.place()} ({self.policy}: {self.order}); {self.reasons()}"

    def fields(self) -> dict[str, int | str | None]:
        """JobOut's `rank`, `rank_among`, `rank_order`, `rank_factors`: what `gpuyard show`
        prints, and `simulate --explain` from the same fields."""
        return {
            "rank": self.rank,
            "rank_among": self.among if self.rank is not None else None,
            "rank_order": f"{self.policy}: {self.order}",
            "rank_factors": self.reasons(),
        }


def explain(
    policy: Policy,
    job: SchedJob,
    now: float,
    cluster: ClusterState,
    order: Sequence[SchedJob] | None = None,
) -> RankFactors:
    """Why `job` (pending) ranks where it does in `order` (the policy's pending jobs, first to
    start first; None: `policy.pending(now)`). Reads the policy, never changes it."""
    said = getattr(policy, "explain", None)
    base = said(job, now, cluster) if said is not None else plain(policy.name, job, now)
    jobs = policy.pending(now) if order is None else order
    rank = next((i for i, other in enumerate(jobs, 1) if other.id == job.id), None)
    return replace(base, rank=rank, among=len(jobs))


def plain(name: str, job: SchedJob, now: float, order: str = "") -> RankFactors:
    """What every policy honours: the job's priority first, then its submit time."""
    return RankFactors(name, order or "priority, then submit time", (*priority(job), age(job, now)))


def priority(job: SchedJob) -> tuple[Factor, ...]:
    """The user's or admin's `--priority`, strictly before any policy's own key (said only when
    set: with every priority 0 it decides nothing)."""
    return (Factor("priority", str(job.priority)),) if job.priority else ()


def age(job: SchedJob, now: float, then: str = "") -> Factor:
    """How long it has waited since it was submitted; `then`: what waiting leads to."""
    waited = f"waited {span(now - job.submitted_at)}"
    return Factor("age", f"{waited}, {then}" if then else waited)


def span(seconds: float) -> str:
    """A duration as a person says it (never negative)."""
    return format_span(max(0.0, seconds))


def gpu_time(gpu_s: float) -> str:
    """GPU-seconds as GPU-time: "2 GPU-h", "40 GPU-min"."""
    text = format_span(max(0.0, gpu_s))
    number, unit = text.rsplit(" ", 1)
    return f"{number} GPU-{unit}"


__all__ = ["Factor", "RankFactors", "age", "explain", "gpu_time", "plain", "priority", "span"]
