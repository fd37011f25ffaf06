"""Fair share with admin-set shares (scheduling/fair_share.py) in `fairshare` and `default`: two
users, two teams, known answers; equal shares change nothing."""

from __future__ import annotations

import math

import pytest

from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.fair_share import DecayedUsage, Shares, decayed_gpu_s, factor, share_table
from gpuyard.scheduling.policies import make_policy
from gpuyard.scheduling.policies.default import DefaultPolicy
from gpuyard.scheduling.policies.fairshare import FairsharePolicy
from gpuyard.simulation.engine import Replay
from gpuyard.simulation.trace import TraceJob


def test_decayed_usage_kept_from_starts_and_stops_is_the_exact_integral() -> None:
    # alice: 4 GPUs over [0, 2 h], then 1 GPU from 5 h on; bob: 2 GPUs over [1 h, 3 h].
    h = 6 * 3600.0
    usage = DecayedUsage(h)
    usage.start("alice", 4, 0.0)
    usage.start("bob", 2, 3600.0)
    usage.stop("alice", 4, 7200.0)
    usage.stop("bob", 2, 3 * 3600.0)
    usage.start("alice", 1, 5 * 3600.0)
    now = 8 * 3600.0
    alice = decayed_gpu_s(4, 0.0, 7200.0, now, h) + decayed_gpu_s(1, 5 * 3600.0, now, now, h)
    bob = decayed_gpu_s(2, 3600.0, 3 * 3600.0, now, h)
    assert usage.gpu_s("alice", now) == pytest.approx(alice)
    assert usage.part("bob", now) == pytest.approx(bob / (alice + bob))
    assert usage.part("carol", now) == 0.0 and DecayedUsage(h).part("alice", now) == 0.0


def test_worked_example_two_teams() -> None:
    shares = Shares(
        teams={"vision": 3.0, "nlp": 1.0},
        team_of={"alice": "vision", "bob": "vision", "carol": "nlp"},
    )
    rows = {r.user: r for r in share_table(shares, {"alice": 60 * 3600, "bob": 20 * 3600,
                                                     "carol": 20 * 3600})}  # fmt: skip
    assert rows["alice"].norm_shares == pytest.approx(0.375)
    assert rows["carol"].norm_shares == pytest.approx(0.25)
    assert rows["alice"].norm_usage == pytest.approx(0.6)
    assert rows["alice"].factor == pytest.approx(2 ** (-0.6 / 0.375))
    assert rows["carol"].factor == pytest.approx(2 ** (-0.2 / 0.25))
    assert rows["carol"].factor > rows["alice"].factor
    assert factor(0.5, 0.5) == 0.5 and factor(0.1, 0.0) == 0.0


def test_no_teams_and_equal_shares_are_one_over_users() -> None:
    assert Shares().uniform
    assert Shares().normalised(["a", "b", "c", "d"]) == {u: 0.25 for u in "abcd"}
    one_team = Shares(team_of={"a": "t", "b": "t"})
    assert one_team.normalised(["a", "b"]) == {"a": 0.5, "b": 0.5}


def test_decay_is_the_exact_integral() -> None:
    day = 86400.0
    # One GPU for the day that ended one half-life ago: h/ln2 x (1/2 - 1/2^2) GPU-s.
    got = decayed_gpu_s(1, 0.0, day, 2 * day, day)
    assert got == pytest.approx(day / math.log(2) * 0.25)
    assert decayed_gpu_s(2, 10.0, 10.0, 20.0, day) == 0.0


def _two_users(policy_name: str, shares: Shares | None) -> dict[int, float]:
    """One GPU. a runs 1,000 s, then b 250 s; at 1,300 s each submits one more 100 s job.
    Returns each job's finish time."""
    trace = [
        TraceJob(1, "a", 0.0, 1, 1000.0), TraceJob(2, "b", 0.0, 1, 250.0),
        TraceJob(3, "a", 1300.0, 1, 100.0), TraceJob(4, "b", 1300.0, 1, 100.0),
    ]  # fmt: skip
    policy = make_policy(policy_name)
    if shares is not None:
        assert isinstance(policy, FairsharePolicy | DefaultPolicy)
        policy.set_shares(shares)
    result = Replay(trace, policy, ClusterState.uniform(1, 1)).run()
    return {o.id: o.finished_at for o in result.jobs}


def test_fairshare_equal_shares_favour_the_lighter_user_unequal_ones_the_larger_share() -> None:
    equal = _two_users("fairshare", None)
    assert equal[4] < equal[3]  # b used less: b's job first
    assert _two_users("fairshare", Shares(users={"a": 1.0, "b": 1.0})) == equal
    # a holds 90% of the shares: used 80% of the GPU time, so is owed more than b.
    weighted = _two_users("fairshare", Shares(users={"a": 9.0}))
    assert weighted[3] < weighted[4]


def test_default_weights_expected_work_by_share() -> None:
    # Too little history per user: jobs 3 and 4 are predicted alike from everyone's runs, so
    # they tie and go in arrival order; b's weight 8 makes b's job count as 8 times shorter.
    equal = _two_users("default", None)
    assert equal[3] < equal[4]
    assert _two_users("default", Shares(users={"a": 1.0, "b": 1.0}, teams={"x": 1.0})) == equal
    weighted = _two_users("default", Shares(users={"b": 8.0}))
    assert weighted[4] < weighted[3]
