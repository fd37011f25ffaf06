"""Shared GPUs in the cluster model and the policies: jobs that declare GPU memory pack onto
GPUs by best fit; other jobs get whole GPUs; shared GPUs come back whole when emptied."""

from __future__ import annotations

import pytest
from tests.unit.policy_context import RecordingContext

from gpuyard.scheduling.cluster import ClusterState, NodeSpec
from gpuyard.scheduling.policies import make_policy
from gpuyard.scheduling.policy import SchedJob, begin_run, end_run

GIB = 1024


def _cluster(gpus: int = 2, nodes: int = 1) -> ClusterState:
    return ClusterState([NodeSpec(f"n{i}", gpus, gpu_mem_mib=80 * GIB) for i in range(nodes)])


def _job(job_id: int, gpu_mem_gib: int = 0, gpus: int = 1) -> SchedJob:
    return SchedJob(job_id, "u", gpus, 0.0, gpu_mem_mib=gpu_mem_gib * GIB)


def _start(cluster: ClusterState, job: SchedJob) -> bool:
    placement = cluster.place(job.gpus, job.cpus, job.mem_mib, job.gpu_mem_mib)
    if placement is None:
        return False
    begin_run(job, cluster, placement, 0.0)
    return True


def test_the_worked_example_best_fit_then_a_new_gpu_and_whole_jobs_see_fewer_gpus() -> None:
    cluster = _cluster(gpus=3)
    a, b, c = _job(1, 20), _job(2, 30), _job(3, 40)
    assert _start(cluster, a) and _start(cluster, b)
    assert cluster.share_of(1) == cluster.share_of(2)  # b joined a's GPU (60 GiB left there)
    assert cluster.free_gpus == 2
    assert _start(cluster, c)  # 40 GiB: fits in no shared GPU (30 left): opens another
    assert cluster.share_of(3) != cluster.share_of(1)
    assert cluster.free_gpus == 1
    assert cluster.place(2, 0, 0) is None  # a whole-GPU job never gets a shared GPU
    assert cluster.place(1, 0, 0) is not None


def test_best_fit_picks_the_fullest_shared_gpu_that_still_fits() -> None:
    cluster = _cluster(gpus=3)
    for job in (_job(1, 60), _job(2, 30)):  # two shared GPUs: 20 and 50 GiB free
        assert _start(cluster, job)
    small = _job(3, 15)
    assert _start(cluster, small)
    assert cluster.share_of(3) == cluster.share_of(1)  # the one with 20 free, not 50


def test_a_shared_gpu_is_whole_again_when_its_last_job_leaves() -> None:
    cluster = _cluster(gpus=1)
    a, b = _job(1, 40), _job(2, 40)
    assert _start(cluster, a) and _start(cluster, b)
    assert not _start(cluster, _job(3, 1))  # 80 GiB used: not even 1 GiB more
    end_run(a, cluster, 1.0)
    assert cluster.free_gpus == 0 and cluster.most_free_shared_mib() == 40 * GIB
    end_run(b, cluster, 1.0)
    assert cluster.free_gpus == 1 and cluster.most_free_shared_mib() is None
    assert _start(cluster, _job(4, 0))  # a whole-GPU job fits now


def test_a_multi_gpu_share_takes_distinct_gpus_of_one_node() -> None:
    cluster = _cluster(gpus=2, nodes=2)
    pair = _job(1, 10, gpus=2)
    assert _start(cluster, pair)
    node, slots = cluster.share_of(1) or (None, ())
    assert len(set(slots)) == 2 and cluster.free[node] == 0  # type: ignore[index]
    assert cluster.place(3, 0, 0, 10 * GIB) is None  # three GPUs of one node: none has three


def test_gpus_of_unknown_memory_take_no_shares() -> None:
    cluster = ClusterState([NodeSpec("declared", 2)])
    assert cluster.place(1, 0, 0, 1) is None
    assert cluster.place(1, 0, 0) is not None


@pytest.mark.parametrize("name", ["default", "fifo", "backfill", "fairshare", "las"])
def test_every_policy_packs_shares_onto_gpus_and_a_whole_gpu_job_waits_for_a_free_one(
    name: str,
) -> None:
    cluster = _cluster(gpus=2)
    policy = make_policy(name, for_server=True)
    jobs = [_job(1, 50), _job(2, 25), _job(3, 50), _job(4, 0)]
    for job in jobs:
        policy.submit(job, 0.0)
    ctx = RecordingContext(policy, cluster)
    policy.schedule(ctx)
    # 1 and 2 share GPU A (75 of 80 GiB); 3 opens GPU B; 4 (a whole GPU) must wait.
    assert sorted(ctx.started) == [1, 2, 3]
    assert cluster.share_of(1) == cluster.share_of(2) != cluster.share_of(3)
    assert [j.id for j in policy.pending(0.0)] == [4]


def test_a_failed_share_is_remembered_only_until_room_comes_back_and_per_node_choice() -> None:
    cluster = _cluster(gpus=1, nodes=2)
    a, b = _job(1, 70), _job(2, 70)
    assert _start(cluster, a) and _start(cluster, b)  # one per node: 10 GiB left on each
    assert cluster.place(1, 0, 0, 20 * GIB) is None
    assert cluster.place(1, 0, 0, 30 * GIB) is None  # larger: known to fail
    assert cluster.place(1, 0, 0, 10 * GIB) is not None  # smaller: still searched, fits
    node_a = (cluster.share_of(1) or (0, ()))[0]
    assert cluster.place(1, 0, 0, 10 * GIB, only_nodes=()) is None  # no node allowed
    assert cluster.place(1, 0, 0, 10 * GIB) is not None  # ... does not poison the others
    end_run(a, cluster, 1.0)
    assert cluster.place(1, 0, 0, 20 * GIB, only_nodes=(node_a,)) == ((node_a, 0),)
