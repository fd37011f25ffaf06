"""Every policy forgets a cancelled pending job: it never starts, the others still do, and timers
the policy had set for it (LAS promotion, default's starvation guard) do no harm later."""

from __future__ import annotations

import pytest
from tests.unit.policy_context import RecordingContext

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.policies import ORACLES, make_policy, policy_names
from gpuyard.scheduling.policy import Policy, SchedJob


def _context(policy: Policy) -> RecordingContext:
    return RecordingContext(policy, ClusterState.uniform(8, 8))


@pytest.mark.parametrize("name", policy_names())
def test_a_cancelled_pending_job_never_starts(name: str) -> None:
    policy = make_policy(name)
    ctx = _context(policy)
    long = 10 * 86400.0
    oracle = long if name in ORACLES else None
    jobs = [
        SchedJob(i, "u", 8, float(i), time_limit_s=long, oracle_duration_s=oracle)
        for i in range(1, 4)
    ]
    for job in jobs:
        policy.submit(job, ctx.now)
        policy.schedule(ctx)
    assert ctx.started == [1]
    policy.cancel(jobs[1], ctx.now)  # job 2 waits behind job 1; its user cancels it
    for step in range(1, 40):  # let timers (promotion, starvation) come due
        ctx.now = step * 6 * 3600.0
        policy.schedule(ctx)
    running = [j for j in jobs if j.run_started_at is not None]
    for job in running:
        ctx.finish(job)
    policy.schedule(ctx)
    for job in [j for j in jobs if j.run_started_at is not None]:
        ctx.finish(job)
    policy.schedule(ctx)
    assert 2 not in ctx.started
    assert 3 in ctx.started
