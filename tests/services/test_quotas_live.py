"""Quotas through the live decision path (LiveRig: the server's wiring in simulated time):
two users in each of two teams, with known answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyard.domain.errors import QuotaExceeded
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.scheduling.quotas import (
    REASON_TEAM_GPUS,
    REASON_USER_GPUS,
    REASON_USER_HOURS,
    RECHECK_S,
    Limits,
    QuotaRules,
)
from tests.services.conftest import MakeRig
from tests.services.live_harness import LiveRig

TEAMS = {"alice": "vision", "bob": "vision", "carol": "nlp", "dave": "nlp"}
RULES = QuotaRules(
    users={"alice": Limits(max_gpus=3)}, teams={"vision": Limits(max_gpus=4)}, team_of=TEAMS
)


@pytest.fixture(params=["fifo", "default"])
def rig(live_rig: MakeRig, request: pytest.FixtureRequest) -> LiveRig:
    live = live_rig(request.param, gpus=16)
    live.scheduler.set_quotas(RULES)
    return live


def test_running_limits_hold_with_slurm_reasons_and_release_when_usage_drops(
    rig: LiveRig,
) -> None:
    a1 = rig.submit(100, user="alice", gpus=2).id
    b1 = rig.submit(1000, user="bob", gpus=1).id
    a2 = rig.submit(1000, user="alice", gpus=2).id
    b2 = rig.submit(1000, user="bob", gpus=1).id
    b3 = rig.submit(1000, user="bob", gpus=2).id
    c1 = rig.submit(1000, user="carol", gpus=8).id  # team nlp has no limit
    rig.settle()
    assert [rig.state(j) for j in (a1, b1, b2, c1)] == [JobState.RUNNING] * 4
    assert rig.state(a2) is JobState.PENDING and rig.state(b3) is JobState.PENDING
    assert rig.scheduler.reason_for(a2) == REASON_USER_GPUS
    assert rig.scheduler.reason_for(b3) == REASON_TEAM_GPUS
    rig.advance(100)  # alice's first job ends: her second fits (alice 2, vision 4)
    assert rig.state(a2) is JobState.RUNNING
    assert rig.scheduler.reason_for(b3) == REASON_TEAM_GPUS
    rig.advance(1000)  # bob's two 1-GPU jobs end: vision 2 + 2 = 4
    assert rig.state(b3) is JobState.RUNNING
    running = [j for j in rig.book.running() if TEAMS[j.owner] == "vision"]
    assert sum(j.spec.gpus for j in running) <= 4


def test_one_pass_never_starts_more_than_a_limit(rig: LiveRig) -> None:
    jobs = [rig.submit(100, user="alice", gpus=1).id for _ in range(5)]
    rig.settle()
    states = [rig.state(j) for j in jobs]
    assert states.count(JobState.RUNNING) == 3
    assert [rig.scheduler.reason_for(j) for j in jobs[3:]] == [REASON_USER_GPUS] * 2


def test_a_user_hold_and_a_quota_hold_together(rig: LiveRig) -> None:
    first = rig.submit(100, user="alice", gpus=3).id
    held = rig.submit(100, user="alice", gpus=1).id
    rig.settle()
    assert rig.scheduler.reason_for(held) == REASON_USER_GPUS
    alice = Principal("alice")
    rig.verbs.hold(held, alice)
    rig.settle()
    assert rig.scheduler.reason_for(held) == "JobHeldUser"
    rig.advance(100)  # the quota frees, the user's hold stays
    assert rig.state(first) is JobState.COMPLETED
    assert rig.state(held) is JobState.PENDING
    assert rig.scheduler.reason_for(held) == "JobHeldUser"
    rig.verbs.release(held, alice)
    rig.settle()
    assert rig.state(held) is JobState.RUNNING


def test_gpu_hours_window_holds_then_releases_as_time_passes(tmp_path: Path) -> None:
    rig = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=4)
    day = 86400.0
    rig.scheduler.set_quotas(
        QuotaRules(users={"dave": Limits(max_gpu_hours=2.0, window_s=day)}, team_of=TEAMS)
    )
    first = rig.submit(3600, user="dave", gpus=2).id
    rig.settle()
    rig.advance(3600)
    assert rig.state(first) is JobState.COMPLETED
    second = rig.submit(60, user="dave", gpus=1).id
    other = rig.submit(60, user="carol", gpus=1).id  # her team-mate is not limited
    rig.settle()
    assert rig.state(other) is JobState.RUNNING
    assert rig.scheduler.reason_for(second) == REASON_USER_HOURS
    while rig.state(second) is JobState.PENDING:
        rig.advance(rig.next_time())
    started = rig.job(second).started_at
    assert started is not None and day < started <= day + RECHECK_S
    rig.close()


def test_submit_refuses_what_can_never_fit_and_past_max_pending(tmp_path: Path) -> None:
    rig = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=16)
    rig.scheduler.set_quotas(
        QuotaRules(
            users={"alice": Limits(max_gpus=3)},
            teams={"nlp": Limits(max_pending=2)},
            team_of=TEAMS,
        )
    )
    with pytest.raises(QuotaExceeded, match=r"^job asks 4 GPUs; user alice may hold at most 3"):
        rig.submit(10, user="alice", gpus=4)
    rig.submit(10, user="carol", gpus=1)
    rig.submit(10, user="dave", gpus=1)
    with pytest.raises(QuotaExceeded, match=r"^team nlp has 2 jobs pending, the most allowed is 2"):
        rig.submit(10, user="carol", gpus=1)
    rig.settle()  # both start: nothing pending any more
    rig.submit(10, user="carol", gpus=1)
    rig.close()
