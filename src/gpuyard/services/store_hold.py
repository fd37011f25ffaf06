"""Whether this server may write its database, and taking it back when it may not (issue 22).

On PostgreSQL the server is the one server of its database by a lock held on a session of its
own, which its job writes go through (`adapters/store/advisory_lock.py`). A database restart
or a network cut ends that session: the lock is gone, and with it the right to write, since a
standby may have taken over meanwhile. Before, the server then refused every write for ever
while `/healthz` said ok and the process lived on, so nothing restarted it.

`StoreHold` asks every `CHECK_S` whether the hold is still there. Once it is lost:
- `problem` says so in one line (`/healthz` answers 503 with it, writes answer 503 with
  Retry-After: clients wait and send again);
- it tries to take the database back (`retake`: a new store, a new lock), first at once, then
  with a backoff doubling up to `RETAKE_BACKOFF_CAP_S`, saying once a minute that it still
  tries. A store taken back is handed over (`Retaken`): the server is built again on it and
  reloads what it knows from the database, as a restart does (the running jobs re-adopted,
  the ends they had meanwhile read from their folders: nothing launched twice, no end lost);
- if another server holds the lock now, it hands over `Fenced`: this server exits non-zero at
  once (two servers must never drive one database's jobs).
Without a `retake` (a server not run by `gpuyard server`, e.g. a test's app) it only says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpuyard.domain.errors import Unavailable
from gpuyard.services.ticker import Ticker

log = logging.getLogger("gpuyard.server")

CHECK_S = 1.0  # how often the hold is asked for while it is held
RETAKE_FIRST_S = 0.5  # the first pause between tries to take the database back
RETAKE_BACKOFF_CAP_S = 2.0  # ... doubling up to this (a try is one connection: cheap)
SAY_EVERY_S = 60.0  # "still trying", once a minute


@dataclass(frozen=True)
class Retaken:
    """The database taken back: `store`, opened and locked, for a server built anew on it."""

    store: object
    lost_for_s: float


@dataclass(frozen=True)
class Fenced:
    """Another server holds the database now: this one must stop, saying `message`."""

    message: str


HoldOutcome = Retaken | Fenced


class StoreHold:
    """The watch on one store's hold (`check`: its one-line problem, or None) and the tries to
    take the database back (`retake`: a new locked store, None while the database cannot be
    reached, Unavailable when another server holds it), handing the outcome to `handover`
    once."""

    def __init__(
        self,
        check: Callable[[], str | None],
        retake: Callable[[], object | None] | None = None,
        handover: Callable[[HoldOutcome], None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._check = check
        self._retake = retake
        self._handover = handover
        self._clock = clock
        self._problem: str | None = None
        self._lost_at = 0.0
        self._next_try = 0.0
        self._pause_s = RETAKE_FIRST_S
        self._said_at = 0.0
        self._outcome: HoldOutcome | None = None
        self._ticker = Ticker(
            "gpuyard-store-hold", self.tick, self._period, log, "checking the database failed"
        )

    @property
    def problem(self) -> str | None:
        """Why the server cannot write now (one line), or None while it can."""
        return self._problem

    def start(self) -> None:
        self._ticker.start()

    def stop(self) -> None:
        self._ticker.stop()

    def _period(self) -> float:
        return CHECK_S if self._problem is None else min(self._pause_s, CHECK_S)

    def tick(self) -> None:
        """One look: is the hold still there; if not, is it time to try to take it back. Called
        by its one thread (the ticker's; a test's): its state has no other writer."""
        if self._outcome is not None:
            return
        now = self._clock()
        if self._problem is None:
            problem = self._check()
            if problem is None:
                return
            self._problem = problem
            self._lost_at = self._said_at = now
            self._next_try = now
            log.error("%s", problem)
        if self._retake is None or now < self._next_try:
            return
        try:
            store = self._retake()
        except Unavailable as exc:
            self._hand(Fenced(f"{exc.message}; this server stops: that server drives the jobs"))
            return
        if store is None:
            self._next_try = now + self._pause_s
            self._pause_s = min(self._pause_s * 2, RETAKE_BACKOFF_CAP_S)
            if now - self._said_at >= SAY_EVERY_S:
                log.warning(
                    "still cannot reach the database after %.0f s; trying again every %g s",
                    now - self._lost_at, RETAKE_BACKOFF_CAP_S,
                )  # fmt: skip
                self._said_at = now
            return
        lost_for_s = now - self._lost_at
        log.warning(
            "took the database back after %.1f s without it; reloading from it as a restart"
            " does", lost_for_s,
        )  # fmt: skip
        self._hand(Retaken(store, lost_for_s))

    def _hand(self, outcome: HoldOutcome) -> None:
        self._outcome = outcome
        if self._handover is not None:
            self._handover(outcome)
