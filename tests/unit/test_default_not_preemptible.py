"""`default` with jobs that may not be preempted (the live default): ranked by GPUs x predicted
run, halved every 4 h waited, down to every 30 min for a user who had less than their share of
the recent GPU time; reservations for the best blocked jobs, which only jobs that end
by their time limit before the reservation may use. Each test also replays the old rules
(`halving_s=None`: the one-hour first-come-first-served starvation guard, no reservation) to
show what a user would have seen before."""

from __future__ import annotations

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.fair_share import Shares
from gpuyard.scheduling.policies.default import DefaultPolicy
from gpuyard.simulation.engine import JobOutcome, Replay
from gpuyard.simulation.trace import TraceJob

HOUR = 3600.0


def fixed(i: int, at: float, gpus: int, dur: float, user: str, limit: float | None = None):  # type: ignore[no-untyped-def]
    """A job that did not opt in to preemption."""
    return TraceJob(i, user, at, gpus, dur, limit, preemptible=False)


def replay(jobs: list[TraceJob], gpus: int, node: int, **kw: float | None) -> dict[int, JobOutcome]:
    result = Replay(jobs, DefaultPolicy(**kw), ClusterState.uniform(gpus, node)).run()  # type: ignore[arg-type]
    return {j.id: j for j in result.jobs}


def test_a_whole_node_job_is_not_kept_out_by_a_stream_of_one_gpu_jobs() -> None:
    # Two 8-GPU nodes kept full by user a's 1-GPU one-hour jobs (16 an hour, for 20 h); user
    # b's 8-GPU job, a minute long like b's last three, waits for one node to drain.
    jobs = [fixed(i, 0.0, 8, 60.0, "b") for i in range(3)]
    jobs += [fixed(10 + i, 200.0, 1, HOUR + i * 225.0, "a") for i in range(16)]
    jobs += [fixed(100 + i, 200.0 + HOUR + i * 225.0, 1, HOUR, "a") for i in range(320)]
    wide = fixed(1000, 2000.0, 8, 60.0, "b")
    jobs.append(wide)
    now = replay(jobs, 16, 8)[1000]
    # Reserved the node expected to free first: every 1-GPU job on it ends within 2 h.
    assert now.first_started_at - wide.submitted_at <= 2 * HOUR
    before = replay(jobs, 16, 8, halving_s=None)[1000]
    # Before: first in line after an hour, but a freed GPU went to the next 1-GPU job at once.
    assert before.first_started_at - wide.submitted_at > 15 * HOUR


def test_a_shorter_job_goes_first_even_after_a_longer_one_waited_an_hour() -> None:
    # One GPU, held 3 h. b's job (5 h limit) queued first, a's (1 min limit) 2 h later.
    jobs = [fixed(1, 0.0, 1, 3 * HOUR, "c"), fixed(2, 1.0, 1, 5 * HOUR, "b", 5 * HOUR),
            fixed(3, 2 * HOUR, 1, 50.0, "a", 60.0)]  # fmt: skip
    out = replay(jobs, 1, 1)
    assert out[3].first_started_at == 3 * HOUR  # 60 GPU-s before 5 GPU-h halved 0 times
    assert out[2].first_started_at == 3 * HOUR + 50.0
    before = replay(jobs, 1, 1, halving_s=None)
    assert before[2].first_started_at == 3 * HOUR  # starved after an hour: first come first
    assert before[3].first_started_at == 8 * HOUR  # the 50-s job waited 6 h


def flood(idle_s: float) -> tuple[list[TraceJob], float]:
    """b's three 5-hour runs on the one GPU; `idle_s` after them a keeps it busy with 1-minute
    jobs for 100 h; b's next job, predicted 5 h (300x a's), is queued 30 s in."""
    start = 15 * HOUR + idle_s
    jobs = [fixed(9990 + i, i * 5 * HOUR, 1, 5 * HOUR, "b", 6 * HOUR) for i in range(3)]
    jobs += [fixed(i, start + i * 60.0, 1, 60.0, "a", 60.0) for i in range(6000)]
    jobs.append(fixed(9999, start + 30.0, 1, 5 * HOUR, "b", 6 * HOUR))
    return jobs, start + 30.0


def test_a_flood_of_short_jobs_holds_another_users_job_only_a_few_hours() -> None:
    # b last ran two weeks before a's flood: all the recent GPU time is a's, so b's job halves
    # every 30 min (b has had none of their share) and overtakes a's 1-minute jobs after 9
    # halvings, 4.5 h; a's jobs then wait behind it for its 5 h, and not longer.
    jobs, queued = flood(idle_s=14 * 86400.0)
    out = replay(jobs, 1, 1)
    assert out[9999].first_started_at - queued <= 5 * HOUR
    assert max(out[i].first_started_at - out[i].submitted_at for i in range(6000)) <= 5.1 * HOUR
    # Before (the key halved every 4 h whoever it belongs to): 36 h.
    before = replay(jobs, 1, 1, halving_min_s=4 * HOUR)[9999]
    assert before.first_started_at - queued >= 35 * HOUR


def test_a_flood_right_after_the_other_users_runs_waits_until_it_outweighs_them() -> None:
    # b had the GPU for the 15 h before the flood: b is the one over their share at first, so
    # b's job halves every 4 h, then faster as a's recent usage outgrows b's; it starts after
    # about 19 h, not 36 h (a fixed 4-h period), and not 1 h (the old starvation guard, at the
    # price of every short job behind it: the 1-minute jobs waiting 6 h in the test above).
    jobs, queued = flood(idle_s=0.0)
    waited = replay(jobs, 1, 1)[9999].first_started_at - queued
    assert 15 * HOUR <= waited <= 22 * HOUR
    before = replay(jobs, 1, 1, halving_min_s=4 * HOUR)[9999]
    assert 32 * HOUR <= before.first_started_at - queued <= 37 * HOUR
    oldest = replay(jobs, 1, 1, halving_s=None)[9999]
    assert oldest.first_started_at - queued <= 1.1 * HOUR


def test_an_admin_set_share_shortens_the_wait_behind_a_flood() -> None:
    # The flood right after b's runs again, b's share set to 4 (a's 1): b's part of the recent
    # GPU time now counts against 80% of it, so b's periods shorten sooner, and the share also
    # divides b's key: 13.9 h instead of 18.6 h (before part 5, the share alone: 28 h).
    jobs, queued = flood(idle_s=0.0)

    def waited(shares: Shares, **kw: float) -> float:
        policy = DefaultPolicy(**kw)
        policy.set_shares(shares)
        out = {j.id: j for j in Replay(jobs, policy, ClusterState.uniform(1, 1)).run().jobs}
        return out[9999].first_started_at - queued

    larger = waited(Shares(users={"b": 4.0}))
    assert larger <= 15 * HOUR and larger < waited(Shares()) - 4 * HOUR
    assert waited(Shares(users={"b": 4.0}), halving_min_s=4 * HOUR) >= 27 * HOUR


def test_only_a_job_that_ends_by_its_limit_before_the_reservation_uses_the_reserved_node() -> None:
    # node 0: 4 GPUs busy until 2 h (its limit); node 1: 8 busy for 10 h. H (8 GPUs) reserves
    # node 0. S1 (2 GPUs, limit 1 h) ends before 2 h: starts at once on node 0. S2 (2 GPUs,
    # limit 3 h) would hold node 0 past 2 h: it waits, and H starts at 2 h.
    jobs = [fixed(1, 0.0, 4, 2 * HOUR, "p", 2 * HOUR), fixed(2, 0.0, 8, 10 * HOUR, "q", 10 * HOUR),
            fixed(3, 10.0, 8, 600.0, "h", 600.0), fixed(4, 20.0, 2, HOUR, "s", HOUR),
            fixed(5, 30.0, 2, 3 * HOUR, "t", 3 * HOUR)]  # fmt: skip
    out = replay(jobs, 16, 8)
    assert out[4].first_started_at == 20.0
    assert out[3].first_started_at == 2 * HOUR
    assert out[5].first_started_at >= 2 * HOUR
    before = replay(jobs, 16, 8, halving_s=None)
    assert before[5].first_started_at == 30.0  # took node 0 for 3 h
    assert before[3].first_started_at == 30.0 + 3 * HOUR
