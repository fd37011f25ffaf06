"""Each policy on small hand-made traces whose right answer is known."""

from __future__ import annotations

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.policies import make_policy
from gpuyard.simulation.engine import JobOutcome, Replay
from gpuyard.simulation.trace import TraceJob


def replay(policy: str, jobs: list[TraceJob], gpus: int = 8, node: int = 8, **kw: object):  # type: ignore[no-untyped-def]
    result = Replay(jobs, make_policy(policy), ClusterState.uniform(gpus, node), **kw).run()  # type: ignore[arg-type]
    return {j.id: j for j in result.jobs}


def job(i: int, at: float, gpus: int, dur: float, user: str = "u", limit: float | None = None):  # type: ignore[no-untyped-def]
    return TraceJob(i, user, at, gpus, dur, limit)


def started(outcome: JobOutcome) -> float:
    return outcome.first_started_at


def test_cluster_places_best_fit_and_gangs_whole_nodes() -> None:
    cluster = ClusterState.uniform(24, 8)
    cluster.allocate(((0, 5),))  # node0: 3 free
    cluster.allocate(((1, 3),))  # node1: 5 free
    assert cluster.place(2) == ((0, 2),)
    assert cluster.place(4) == ((1, 4),)
    assert cluster.place(16) is None  # only node2 is whole
    assert cluster.place(8) == ((2, 8),)
    cluster.release(((0, 5),))
    assert cluster.place(16) == ((0, 8), (2, 8))


def test_fifo_blocks_behind_the_head() -> None:
    out = replay("fifo", [job(1, 0, 4, 100), job(2, 1, 8, 10), job(3, 2, 1, 10)])
    assert started(out[2]) == 100  # waits for job 1
    assert started(out[3]) == 110  # behind job 2 although GPUs were free


def test_backfill_starts_a_short_job_before_the_reservation_and_never_delays_the_head() -> None:
    jobs = [
        job(1, 0, 6, 100, limit=100),  # R: 6 of 8 GPUs until t=100
        job(2, 1, 8, 50, limit=50),  # H: needs all 8, reservation at 100
        job(3, 2, 2, 90, limit=90),  # S1: ends at 92 < 100 -> backfilled
        job(4, 3, 2, 500, limit=500),  # S2: would hold 2 GPUs past 100 -> waits
    ]
    out = replay("backfill", jobs)
    assert started(out[3]) == 2
    assert started(out[2]) == 100  # the head starts exactly at its reservation
    assert started(out[4]) >= 150


def test_backfill_with_exact_limits_from_durations() -> None:
    jobs = [job(1, 0, 6, 100), job(2, 1, 8, 50), job(3, 2, 2, 90)]
    out = replay("backfill", jobs, exact_time_limits=True)
    assert started(out[3]) == 2 and started(out[2]) == 100


def test_las_preempts_a_long_job_for_a_new_short_one() -> None:
    jobs = [job(1, 0, 8, 100_000), job(2, 3600, 1, 60)]
    out = replay("las", jobs, restart_penalty_s=60)
    assert started(out[2]) == 3600  # 8 GPUs x 1 h = 28,800 GPU-s > 3,600: job 1 was demoted
    assert out[1].preemptions == 1
    assert out[1].finished_at == 100_000 + 60 + 60  # waited for job 2, then paid the restart


def test_las_does_not_preempt_within_the_first_queue() -> None:
    # Job 1 reaches 3,600 GPU-s (queue 1) at t=450; job 2, also in queue 0, waits until then.
    jobs = [job(1, 0, 8, 1_000), job(2, 10, 1, 60)]
    out = replay("las", jobs)
    assert started(out[2]) == 450 and out[1].preemptions == 1
    short_first = replay("las", [job(1, 0, 8, 400), job(2, 10, 1, 60)])
    assert started(short_first[2]) == 400 and short_first[1].preemptions == 0


def test_srtf_oracle_preempts_for_the_shorter_remaining_work() -> None:
    jobs = [job(1, 0, 8, 10_000), job(2, 100, 8, 50)]
    out = replay("srtf-oracle", jobs, expose_durations=True)
    assert started(out[2]) == 100 and out[1].preemptions == 1


def test_fairshare_favours_the_user_with_less_recent_usage() -> None:
    jobs = [job(1, 0, 8, 10_000, user="heavy")]
    # Both wait for job 1; "light" submits later but has used nothing.
    jobs += [job(2, 100, 8, 100, user="heavy"), job(3, 200, 8, 100, user="light")]
    out = replay("fairshare", jobs)
    assert started(out[3]) == 10_000 and started(out[2]) == 10_100


def test_default_preempts_only_when_it_clearly_pays() -> None:
    # User "long" has a history of day-long 8-GPU jobs; "short" of 1-minute 1-GPU jobs.
    history = [job(i, i * 100_000.0, 8, 86_400, user="long") for i in range(1, 4)]
    history += [job(10 + i, 350_000 + i, 1, 60, user="short") for i in range(3)]
    busy = job(20, 400_000, 8, 86_400, user="long")
    quick = job(21, 400_000 + 7200, 1, 60, user="short")  # arrives after 2 h of busy's run
    rival = job(22, 400_000 + 7300, 8, 86_400, user="long")
    out = replay("default", [*history, busy, quick, rival])
    assert started(out[21]) == 400_000 + 7200  # predicted 60 s vs ~22 h left: preempt at once
    assert out[21].finished_at == 400_000 + 7260
    # A long job does not preempt a long one for its rank; only the starvation guard lets it
    # in, after it has waited an hour (`starve_min_s`).
    assert started(out[22]) >= 400_000 + 7300 + 3600


def test_backfill_without_limits_never_delays_the_head() -> None:
    # Nobody gave a limit: the head's reservation is unknown, so a job behind it may start early
    # only where the head could never need its GPUs, not on the head's node.
    jobs = [job(1, 0, 6, 100), job(2, 1, 8, 50), job(3, 2, 2, 1000)]
    out = replay("backfill", jobs)
    assert started(out[2]) == 100 and started(out[3]) == 150


def test_preemptive_policies_never_preempt_a_no_preempt_job() -> None:
    for name in ("las", "default"):
        guarded = TraceJob(1, "u", 0, 8, 100_000, None, preemptible=False)
        out = replay(name, [guarded, job(2, 3600, 1, 60)])
        assert out[1].preemptions == 0 and started(out[2]) == 100_000, name
    free = replay("las", [job(1, 0, 8, 100_000), job(2, 3600, 1, 60)])
    assert free[1].preemptions == 1  # the same job, preemptible, is preempted


def test_trace_no_preempt_column(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from gpuyard.simulation.trace import load_trace

    path = tmp_path / "t.csv"
    path.write_text(
        "job_id,user,submit_time_s,num_gpus,duration_s,no_preempt\n0,a,0,1,10,1\n1,a,1,1,10,\n"
    )
    assert [j.preemptible for j in load_trace(path)] == [False, True]


def test_cluster_accounts_cpus_and_memory_where_nodes_declare_them() -> None:
    from gpuyard.scheduling.cluster import NodeSpec

    nodes = [NodeSpec("a", 8, cpus=4, mem_mib=1000), NodeSpec("b", 8, cpus=16, mem_mib=1000)]
    cluster = ClusterState(nodes)
    assert cluster.place(1, cpus=4) == ((0, 1),)  # best fit by GPUs, CPUs fit on a
    cluster.allocate(((0, 1),), cpus=4)
    assert cluster.place(1, cpus=1) == ((1, 1),)  # a has no CPU left: b
    assert cluster.place(1, mem_mib=2000) is None  # no node has that memory
    assert cluster.place(0, cpus=2) == ((1, 0),)  # a CPU-only job still gets a node
    assert cluster.place(0) == ()  # ...unless it asks for nothing
    cluster.release(((0, 1),), cpus=4)
    assert cluster.place(1, cpus=4) == ((0, 1),)


def test_preemption_frees_cpus_too() -> None:
    from tests.unit.policy_context import RecordingContext

    from gpuyard.scheduling.cluster import NodeSpec
    from gpuyard.scheduling.policy import SchedJob

    policy = make_policy("las")
    ctx = RecordingContext(policy, ClusterState([NodeSpec("a", 8, cpus=4)]))
    hog = SchedJob(1, "u", 1, 0.0, cpus=4)  # one GPU, every CPU
    policy.submit(hog, 0.0)
    policy.schedule(ctx)
    ctx.now = 7200.0  # hog has 7,200 GPU-s: queue 1
    small = SchedJob(2, "v", 1, 7200.0, cpus=2)
    policy.submit(small, ctx.now)
    policy.schedule(ctx)
    assert ctx.started == [1, 2] and hog.run_started_at is None  # preempted for its CPUs
