"""Quota rules (scheduling/quotas.py) on hand-made two-user, two-team cases with known answers."""

from __future__ import annotations

from gpuyard.scheduling.quotas import (
    REASON_TEAM_GPUS,
    REASON_TEAM_HOURS,
    REASON_USER_GPUS,
    REASON_USER_HOURS,
    RECHECK_S,
    Limits,
    QuotaJob,
    QuotaLedger,
    QuotaRules,
    admission,
    next_recheck_at,
)

TEAMS = {"alice": "vision", "bob": "vision", "carol": "nlp", "dave": "nlp"}


def test_worked_example_user_then_team_limit() -> None:
    rules = QuotaRules(
        users={"alice": Limits(max_gpus=3)}, teams={"vision": Limits(max_gpus=4)}, team_of=TEAMS
    )
    ledger = QuotaLedger()
    ledger.sync([(1, "alice", 2, 0.0), (2, "bob", 1, 0.0)], 0.0)
    pending = [
        QuotaJob(3, "alice", 2, submitted_at=1.0),
        QuotaJob(4, "bob", 1, submitted_at=2.0),
        QuotaJob(5, "bob", 2, submitted_at=3.0),
        QuotaJob(6, "carol", 8, submitted_at=4.0),  # nlp has no limit
    ]
    assert admission(rules, ledger, pending, 5.0) == {3: REASON_USER_GPUS, 5: REASON_TEAM_GPUS}
    ledger.sync([(2, "bob", 1, 0.0)], 10.0)  # alice's job ended
    assert admission(rules, ledger, pending, 10.0) == {5: REASON_TEAM_GPUS}


def test_priority_orders_admission_within_a_limit() -> None:
    rules = QuotaRules(users={"alice": Limits(max_gpus=2)}, team_of=TEAMS)
    pending = [QuotaJob(1, "alice", 2, submitted_at=0.0), QuotaJob(2, "alice", 2, 5, 1.0)]
    assert admission(rules, QuotaLedger(), pending, 2.0) == {1: REASON_USER_GPUS}


def test_gpu_hours_in_a_rolling_window() -> None:
    day = 86400.0
    rules = QuotaRules(
        users={"alice": Limits(max_gpu_hours=2.0, window_s=day)},
        teams={"nlp": Limits(max_gpu_hours=3.0, window_s=day)},
        team_of=TEAMS,
    )
    ledger = QuotaLedger()
    ledger.past_run("alice", 2, 0.0, 3600.0)  # 2 GPU-h
    ledger.past_run("carol", 1, 0.0, 3600.0)  # 1 GPU-h
    ledger.start(9, "dave", 2, 0.0)  # running: 2 GPU-h by t = 1 h
    assert ledger.gpu_hours({"alice"}, 0.0, 3600.0) == 2.0
    pending = [QuotaJob(1, "alice", 1), QuotaJob(2, "bob", 1), QuotaJob(3, "carol", 1)]
    held = admission(rules, ledger, pending, 3600.0)
    assert held == {1: REASON_USER_HOURS, 3: REASON_TEAM_HOURS}
    assert next_recheck_at(held, 3600.0) == 3600.0 + RECHECK_S
    ledger.end(9, 3600.0)
    # A day and a half hour later half of alice's run has left the window: 1 GPU-h < 2.
    assert admission(rules, ledger, pending, day + 1800.0) == {}


def test_submit_refusals_in_one_line() -> None:
    rules = QuotaRules(
        users={"alice": Limits(max_gpus=3, max_pending=2)},
        teams={"nlp": Limits(max_pending=3, max_gpu_hours=10.0)},
        team_of=TEAMS,
    )
    assert rules.submit_refusal("alice", 4, None, 0, 0) == (
        "job asks 4 GPUs; user alice may hold at most 3 GPUs at once"
    )
    assert rules.submit_refusal("alice", 1, None, 2, 2) == (
        "user alice has 2 jobs pending, the most allowed is 2; wait for some to start or "
        "cancel some"
    )
    assert rules.submit_refusal("alice", 3, None, 1, 5) is None
    assert rules.submit_refusal("carol", 1, None, 0, 3) is not None
    assert rules.submit_refusal("dave", 4, 3 * 3600.0, 0, 0) == (
        "job may use 12 GPU-hours (GPUs x --time); team nlp may use at most 10 per 7 days"
    )
    assert rules.submit_refusal("bob", 64, None, 99, 99) is None  # no limit for bob's team
    assert not rules.limited("bob") and rules.limited("dave")
    for line in ("alice", "carol", "dave"):
        why = rules.submit_refusal(line, 99, 99 * 3600.0, 99, 99)
        assert why is not None and "\n" not in why


def test_empty_rules_hold_nothing() -> None:
    rules = QuotaRules(users={"alice": Limits()})
    assert rules.empty
    assert admission(rules, QuotaLedger(), [QuotaJob(1, "alice", 8)], 0.0) == {}
