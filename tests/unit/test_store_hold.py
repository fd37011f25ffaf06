"""The store's hold watch (services/store_hold.py) on a clock of the test's: what it says, when
it tries to take the database back, and what it hands over. The real database path is in
tests/e2e/test_postgres_heal.py."""

from __future__ import annotations

import pytest

from gpuyard.domain.errors import Unavailable
from gpuyard.services.store_hold import (
    RETAKE_BACKOFF_CAP_S,
    Fenced,
    HoldOutcome,
    Retaken,
    StoreHold,
)

LOST = "this gpuyard server lost its hold on PostgreSQL database jobs"


class Rig:
    def __init__(self, *, retake_answers: list[object] | None = None) -> None:
        self.now = 100.0
        self.problem: str | None = None
        self.answers = list(retake_answers or [])
        self.tries: list[float] = []
        self.handed: list[HoldOutcome] = []
        self.hold = StoreHold(
            lambda: self.problem,
            self._retake if retake_answers is not None else None,
            self.handed.append if retake_answers is not None else None,
            clock=lambda: self.now,
        )

    def _retake(self) -> object | None:
        self.tries.append(self.now)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def run_for(self, seconds: float, step: float = 0.25) -> None:
        end = self.now + seconds
        while self.now < end:
            self.hold.tick()
            self.now += step


def test_a_held_store_says_nothing_and_takes_nothing() -> None:
    rig = Rig(retake_answers=[])
    rig.run_for(10)
    assert rig.hold.problem is None and rig.tries == [] and rig.handed == []


def test_a_lost_hold_is_said_then_taken_back_with_a_backoff_once_the_database_answers() -> None:
    store = object()
    rig = Rig(retake_answers=[None, None, None, None, None, None, store])
    rig.run_for(2)
    rig.problem = LOST
    lost_at = rig.now
    rig.run_for(60)
    assert rig.hold.problem == LOST  # /healthz says it until the server is built again
    pauses = [b - a for a, b in zip(rig.tries, rig.tries[1:], strict=False)]
    assert rig.tries[0] == lost_at  # at once, then doubling, never past the cap
    assert pauses == sorted(pauses) and max(pauses) <= RETAKE_BACKOFF_CAP_S
    assert pauses[-1] == RETAKE_BACKOFF_CAP_S
    assert len(rig.handed) == 1
    outcome = rig.handed[0]
    assert isinstance(outcome, Retaken) and outcome.store is store
    assert outcome.lost_for_s == pytest.approx(rig.tries[-1] - lost_at)


def test_a_database_another_server_holds_now_is_handed_over_as_fenced_once() -> None:
    refusal = Unavailable("another gpuyard server already uses PostgreSQL database jobs")
    rig = Rig(retake_answers=[None, refusal])
    rig.problem = LOST
    rig.run_for(30)
    assert len(rig.tries) == 2 and len(rig.handed) == 1
    outcome = rig.handed[0]
    assert isinstance(outcome, Fenced)
    assert outcome.message.startswith("another gpuyard server already uses PostgreSQL")


def test_without_a_way_to_take_it_back_a_lost_hold_is_only_said() -> None:
    rig = Rig()
    rig.problem = LOST
    rig.run_for(30)
    assert rig.hold.problem == LOST and rig.handed == []
