"""Jobs over several nodes (`--nodes`) in the cluster model and the policies: CPUs split over
their nodes, placements checked before they change anything, backfill keeping a spread head's
reservation, and a spread job that cannot preempt not stopping the jobs behind it from doing so."""

from __future__ import annotations

import pytest
from tests.unit.policy_context import RecordingContext

from gpuyard.scheduling.cluster import ClusterState, NodeSpec
from gpuyard.scheduling.policies import make_policy
from gpuyard.scheduling.policy import SchedJob, begin_run, end_run, place_job


def _cluster(nodes: int = 2, gpus: int = 2, cpus: int | None = 8) -> ClusterState:
    return ClusterState([NodeSpec(f"n{i}", gpus, cpus, None) for i in range(nodes)])


def _job(job_id: int, gpus: int, nodes: int = 1, cpus: int = 1, priority: int = 0, **kw):  # type: ignore[no-untyped-def]
    return SchedJob(job_id, "u", gpus, float(job_id), priority=priority, cpus=cpus, nodes=nodes,
                    **kw)  # fmt: skip


def test_a_spread_job_takes_its_share_of_cpus_on_each_node_and_needs_them_free() -> None:
    cluster = _cluster()
    busy = _job(1, 1, cpus=8)
    begin_run(busy, cluster, place_job(cluster, busy) or (), 0.0)  # node 0: no CPU left
    spread = _job(2, 2, nodes=2, cpus=4)
    assert place_job(cluster, spread) is None  # node 0 has a GPU but none of its 2 CPUs
    end_run(busy, cluster, 1.0)
    placement = place_job(cluster, spread)
    assert placement == ((0, 1), (1, 1))
    begin_run(spread, cluster, placement, 1.0)
    assert cluster.free_cpus == [6, 6] and cluster.free == [1, 1]
    end_run(spread, cluster, 2.0)
    assert cluster.free_cpus == [8, 8] and cluster.free == [2, 2]


def test_a_placement_that_does_not_fit_changes_nothing() -> None:
    cluster = _cluster(cpus=2)
    with pytest.raises(ValueError, match="negative free CPUs"):
        cluster.allocate(((0, 1), (1, 1)), cpus=6)
    assert cluster.free == [2, 2] and cluster.free_cpus == [2, 2]
    with pytest.raises(ValueError, match="free GPUs"):
        cluster.allocate(((0, 1), (1, 3)))
    assert cluster.free == [2, 2]


def test_backfill_keeps_a_spread_heads_reservation() -> None:
    cluster = _cluster(cpus=None)
    policy = make_policy("backfill", for_server=True)
    ctx = RecordingContext(policy, cluster)
    blocker = _job(1, 2, time_limit_s=100)  # node 0 full until t=100
    policy.submit(blocker, 0.0)
    policy.schedule(ctx)
    head = _job(2, 2, nodes=2, time_limit_s=100)  # one GPU on each node: waits for node 0
    long_a, long_b = _job(3, 1, time_limit_s=10_000), _job(4, 1, time_limit_s=10_000)
    for job in (head, long_a, long_b):
        policy.submit(job, 0.0)
    policy.schedule(ctx)
    # One long job may use node 1 (node 1 keeps a GPU for the head), not both.
    assert ctx.started == [1, 3]


@pytest.mark.parametrize("name", ["las", "default"])
def test_a_spread_job_that_cannot_preempt_does_not_stop_the_next_from_preempting(name: str) -> None:
    cluster = _cluster(cpus=None)
    policy = make_policy(name, for_server=True)
    ctx = RecordingContext(policy, cluster)
    for job_id in range(1, 5):
        policy.submit(_job(job_id, 1), 0.0)
    policy.schedule(ctx)
    assert sorted(ctx.started) == [1, 2, 3, 4]
    ctx.now = 10_000.0  # long past any protection of just-started jobs
    policy.submit(_job(5, 2, nodes=2, priority=5), ctx.now)
    policy.submit(_job(6, 2, priority=5), ctx.now)
    policy.schedule(ctx)
    assert len(ctx.preempted) == 2 and 6 in ctx.started
