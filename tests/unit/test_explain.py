"""Why a pending job ranks where it does (`scheduling/explain.py`): the factors each policy
names, which factor puts which job first, and that asking changes no decision."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tests.unit.policy_context import RecordingContext

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.explain import RankFactors, explain
from gpuyard.scheduling.policies import make_policy, policy_names
from gpuyard.scheduling.policy import Policy, SchedJob
from gpuyard.simulation.replay import simulate

HOUR = 3600.0


def _learn(policy: Policy, ctx: RecordingContext, runs: list[tuple[int, str, int, float]]) -> None:
    """Jobs (id, user, GPUs, run time) that start at once and finish: the policy's history."""
    for job_id, user, gpus, ran_s in runs:
        job = SchedJob(job_id, user, gpus, ctx.now)
        policy.submit(job, ctx.now)
        policy.schedule(ctx)
        at, ctx.now = ctx.now, ctx.now + ran_s
        ctx.finish(job)
        ctx.now = at


def _factor(why: RankFactors, name: str) -> str:
    return next(f.value for f in why.factors if f.name == name)


def test_default_puts_a_small_new_job_before_a_big_old_one_until_age_says_otherwise() -> None:
    policy = make_policy("default")
    cluster = ClusterState.uniform(8, 8)
    ctx = RecordingContext(policy, cluster)
    # b's 4-GPU jobs run 10 h, a's 1-GPU jobs a minute: what the policy expects of the next.
    _learn(policy, ctx, [(100 + i, "a", 1, 60.0) for i in range(4)])
    _learn(policy, ctx, [(200 + i, "b", 4, 10 * HOUR) for i in range(4)])
    ctx.now = 20 * HOUR
    blocker = SchedJob(1, "c", 8, ctx.now, preemptible=False)
    policy.submit(blocker, ctx.now)
    policy.schedule(ctx)  # holds every GPU
    big = SchedJob(2, "b", 4, ctx.now)  # old: queued first
    policy.submit(big, ctx.now)
    ctx.now += 600
    small = SchedJob(3, "a", 1, ctx.now)  # new
    policy.submit(small, ctx.now)
    policy.schedule(ctx)
    now = ctx.now + 600

    big_why, small_why = (explain(policy, j, now, cluster) for j in (big, small))
    assert (small_why.rank, big_why.rank, big_why.among) == (1, 2, 2)
    assert small_why.order == "least expected remaining GPU-time first, divided by the share weight"
    # GPU-time left is what puts the small job first: its GPUs x the run expected of each.
    assert _factor(small_why, "GPUs") == "1" and _factor(big_why, "GPUs") == "4"
    assert _factor(small_why, "GPU-time left") == "60 GPU-s"
    assert _factor(big_why, "GPU-time left") == "40 GPU-h"
    assert _factor(big_why, "expected run left") == (
        "10 h per GPU (from the user's last 4 runs of this size)"
    )
    assert _factor(big_why, "share weight") == "1"
    # The big job has waited longer; age does not rank it first yet, and says when it will.
    assert _factor(big_why, "age") == (
        "waited 20 min, goes first in 40 min (after 60 min of waiting)"
    )
    assert big_why.describe().startswith("rank 2 of 2 (default: least expected remaining")

    ctx.now += HOUR  # past the big job's hour: starved, it goes first (relative aging)
    policy.schedule(ctx)
    big_why, small_why = (explain(policy, j, ctx.now, cluster) for j in (big, small))
    assert (big_why.rank, small_why.rank) == (1, 2)
    assert _factor(big_why, "age") == "waited 70 min, starved: ahead of every job that is not"


def test_a_policy_without_its_own_words_is_explained_by_priority_and_submit_time() -> None:
    class Bare:  # what every policy honours, nothing of its own to say
        name = "bare"

        def pending(self, now: float) -> list[SchedJob]:
            return [first, second]

    first, second = SchedJob(1, "u", 1, 0.0, priority=3), SchedJob(2, "u", 1, 60.0)
    why = explain(Bare(), second, 660.0, ClusterState.uniform(8, 8))  # type: ignore[arg-type]
    assert why.describe() == "rank 2 of 2 (bare: priority, then submit time); age waited 10 min"
    first_why = explain(Bare(), first, 660.0, ClusterState.uniform(8, 8))  # type: ignore[arg-type]
    assert first_why.reasons() == "priority 3, age waited 11 min"


def _trace(path: Path) -> Path:
    rows = ["0,a,0,1,60", "1,a,0,1,60", "2,a,0,1,60", "3,b,0,4,3000", "4,b,0,4,3000",
            "5,b,0,4,3000", "6,c,20000,7,1000", "7,b,20100,4,3000", "8,a,20200,1,60",
            "9,a,20300,8,600", "10,b,20400,2,9000"]  # fmt: skip
    path.write_text("job_id,user,submit_time_s,num_gpus,duration_s\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("name", policy_names())
def test_explaining_a_job_changes_no_figure(tmp_path: Path, name: str) -> None:
    trace = _trace(tmp_path / "t.csv")
    [plain] = simulate(trace, 8, policies=[name])
    for job_id in (7, 8, 10):
        [told] = simulate(trace, 8, policies=[name], explain=job_id)
        assert told.explained is not None and told.explained.job_id == job_id
        assert replace(told, explained=None) == plain
