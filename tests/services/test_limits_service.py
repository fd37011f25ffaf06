"""LimitService through the live decision path (LiveRig): an admin sets limits and shares that
the scheduler applies at once; `share` and `usage` give known numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuyard.domain.accounts import Account, Team
from gpuyard.domain.errors import Forbidden, InvalidRequest, NotFound, QuotaExceeded
from gpuyard.domain.job import JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.scheduling.quotas import REASON_TEAM_GPUS
from gpuyard.services.access.quotas import LimitService
from tests.services.conftest import MakeRig
from tests.services.live_harness import LiveRig

ADMIN = Principal("ada", role="admin")
ALICE = Principal("alice", team="vision")
BOB = Principal("bob", team="vision")
CAROL = Principal("carol", team="nlp")


@pytest.fixture
def rig(live_rig: MakeRig) -> LiveRig:
    live = live_rig("fairshare", gpus=4)
    for team in ("default", "vision", "nlp"):
        live.store.add_team(Team(team, 0.0))
    for name, team in (("ada", "default"), ("alice", "vision"), ("bob", "vision"),
                       ("carol", "nlp")):  # fmt: skip
        live.store.add_account(Account(name, "user", team, 0.0))
    _limits(live).load()
    return live


def _limits(rig: LiveRig) -> LimitService:
    assert rig.limits is not None
    return rig.limits


def test_a_team_limit_set_by_an_admin_holds_and_releases(rig: LiveRig) -> None:
    limits = _limits(rig)
    entry = limits.set_limits(ADMIN, "team", "vision", max_gpus=2)
    assert (entry.max_gpus, entry.max_pending) == (2, None)
    limits.set_limits(ADMIN, "team", "vision", max_pending=5)  # the other limit stays
    assert [(e.name, e.max_gpus, e.max_pending) for e in limits.limits(ADMIN)] == [("vision", 2, 5)]
    a = rig.submits.submit(rig_spec(gpus=2), ALICE).id
    b = rig.submits.submit(rig_spec(gpus=1), BOB).id
    c = rig.submits.submit(rig_spec(gpus=2), CAROL).id
    rig.processes.work_s.update({a: 100.0, b: 100.0, c: 100.0})
    rig.settle()
    assert rig.state(a) is JobState.RUNNING and rig.state(c) is JobState.RUNNING
    assert rig.scheduler.reason_for(b) == REASON_TEAM_GPUS
    with pytest.raises(QuotaExceeded, match="job asks 3 GPUs; team vision may hold at most 2"):
        rig.submits.submit(rig_spec(gpus=3), BOB)
    rig.advance(100)
    assert rig.state(b) is JobState.RUNNING
    limits.clear(ADMIN, "team", "vision")
    assert limits.limits(ADMIN) == []
    rig.submits.submit(rig_spec(gpus=3), BOB)  # no limit any more


def test_only_admins_set_limits_on_what_exists(rig: LiveRig) -> None:
    limits = _limits(rig)
    with pytest.raises(Forbidden):
        limits.set_limits(ALICE, "user", "alice", max_gpus=99)
    with pytest.raises(NotFound, match="no team robots; add it first"):
        limits.set_limits(ADMIN, "team", "robots", max_gpus=1)
    with pytest.raises(NotFound, match="no user zed"):
        limits.set_limits(ADMIN, "user", "zed", max_gpus=1)
    with pytest.raises(InvalidRequest, match="--shares must be more than 0"):
        limits.set_limits(ADMIN, "user", "alice", shares=0)
    with pytest.raises(NotFound, match="user bob has no limits set"):
        limits.clear(ADMIN, "user", "bob")
    limits.set_limits(ADMIN, "user", "alice", max_gpus=1)
    assert [e.name for e in limits.limits(ALICE)] == ["alice"]
    assert limits.limits(CAROL) == []


def test_share_and_usage_numbers(rig: LiveRig) -> None:
    limits = _limits(rig)
    limits.half_life_s = 1e12  # no decay within the test: usage is plain GPU-hours
    limits.set_limits(ADMIN, "team", "vision", shares=3.0)
    a = rig.submits.submit(rig_spec(gpus=2), ALICE).id
    c = rig.submits.submit(rig_spec(gpus=1), CAROL).id
    rig.processes.work_s.update({a: 3600.0, c: 1800.0})
    rig.settle()
    rig.advance(1800)
    rig.advance(3600)
    assert rig.state(a) is JobState.COMPLETED
    rows = {r.user: r for r in limits.share(ADMIN)}
    assert set(rows) == {"ada", "alice", "bob", "carol"}
    # Teams default 1, vision 3, nlp 1: vision 3/5 split by alice and bob.
    assert rows["alice"].norm_shares == pytest.approx(0.3)
    assert rows["carol"].norm_shares == pytest.approx(0.2)
    assert rows["alice"].raw_usage_gpu_h == pytest.approx(2.0)
    assert rows["alice"].norm_usage == pytest.approx(0.8)
    assert rows["alice"].factor == pytest.approx(2 ** (-0.8 / 0.3))
    assert [r.user for r in limits.share(CAROL)] == ["carol"]
    usage = {r.key: r for r in limits.usage(ADMIN, since=0.0)}
    assert usage["alice"].allocated_gpu_h == pytest.approx(2.0)
    assert usage["carol"].allocated_gpu_h == pytest.approx(0.5)
    assert usage["alice"].states == {"COMPLETED": 1}
    assert usage["alice"].used_gpu_h is None  # no telemetry in the rig
    teams = {r.key: r.allocated_gpu_h for r in limits.usage(ADMIN, by="team", since=0.0)}
    assert teams == pytest.approx({"vision": 2.0, "nlp": 0.5})
    assert [r.key for r in limits.usage(CAROL, since=0.0)] == ["carol"]


def rig_spec(**kw: Any) -> JobSpec:
    return JobSpec(**{"argv": ("train",), "name": "t", "workdir": "/", **kw})


def test_the_half_life_reaches_fairshare_and_share(tmp_path: Path) -> None:
    live = LiveRig(tmp_path, make_policy("fairshare", for_server=True), gpus=1)
    limits = live.limits
    assert limits is not None and limits.half_life_s == 7 * 86400.0
    limits.half_life_s = 3600.0
    limits.load()
    live.settle()  # the pass gives the shares (and the half-life) to the policy
    assert live.policy._half_life_s == 3600.0  # type: ignore[attr-defined]
    live.close()


def test_limits_and_past_gpu_hours_survive_a_restart(tmp_path: Path) -> None:
    day = 86400.0
    first = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=4)
    try:
        first.store.add_team(Team("nlp", 0.0))
        first.store.add_account(Account("dave", "user", "nlp", 0.0))
        _limits(first).load()
        _limits(first).set_limits(ADMIN, "user", "dave", max_gpu_hours=2.0, window_s=day)
        ran = first.submits.submit(rig_spec(gpus=2), Principal("dave", team="nlp")).id
        first.processes.work_s[ran] = 3600.0
        first.settle()
        first.advance(3600)
        assert first.state(ran) is JobState.COMPLETED
    finally:
        first.close()
    again = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=4)
    try:
        again.now = 3700.0
        waiting = again.submits.submit(rig_spec(gpus=1), Principal("dave", team="nlp"))
        again.processes.work_s[waiting.id] = 10.0
        again.settle()
        assert again.reads.reason(again.job(waiting.id)) == "QOSMaxGpuHoursPerUser"
    finally:
        again.close()



def test_a_submitters_team_is_noted_without_waiting_for_a_stalled_database(
    rig: LiveRig, tmp_path: Path
) -> None:
    """A submit notes its user's team on the event loop (`note_team`): it must not wait for a
    database that does not answer (issue 22): the rules are rebuilt from the entries kept."""
    import sqlite3
    import threading

    limits = _limits(rig)
    limits.set_limits(ADMIN, "team", "vision", max_gpus=2)
    # Every transaction of the store begins IMMEDIATE: with another connection holding the
    # write lock, each store call waits (up to its busy timeout), as on a stalled disk.
    blocker = sqlite3.connect(tmp_path / "gpuyard.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        noted = threading.Thread(target=limits.note_team, args=("dave", "vision"))
        noted.start()
        noted.join(timeout=2.0)
        assert not noted.is_alive(), "noting a team waited for the database"
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    rules = rig.scheduler.quota_rules
    assert rules.team_of.get("dave") == "vision" and rules.limited("dave")  # the team's limit
