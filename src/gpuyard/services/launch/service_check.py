"""Services' health checks: each running service is asked every few seconds, on loopback.

A service with a health path (`serve --health /health`) is healthy when `GET
http://127.0.0.1:PORT/health` answers 2xx or 3xx within the check's timeout; one without is
healthy when its port accepts a TCP connection. Worked example (every 3 s, grace 60 s, 3
failures): a model server starts at 10:00:00 and loads its weights for 40 s: its checks are
refused, it is `starting`. At 10:00:42 it answers: `healthy` since 10:00:42. At 11:00:00 it
hangs: `unhealthy` since 11:00:00, and after the third failure in a row (11:00:06), past its
grace, it is stopped with stop intent PENDING and reason `Unhealthy: ...`; the controller
requeues it with a service's back-off (`domain/retry.py`) and it starts again on its port. One
that never answers is stopped the same way once its grace is over.

What the checks saw is kept in memory only (a restarted server asks again: a fresh grace,
less what the run already had), per run: a run that starts again starts `starting`. Services
on another machine of a cluster are asked by that machine's agent, on its own loopback
(`check_through`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Literal

from gpuyard.domain.job import Job
from gpuyard.domain.retry import REASON_UNHEALTHY
from gpuyard.domain.states import JobState
from gpuyard.services.ports import LiveJobs
from gpuyard.services.ticker import Ticker

log = logging.getLogger("gpuyard.services")

LOOPBACK = "127.0.0.1"
_MAX_PARALLEL = 8
_ERROR_CHARS = 200

HealthWord = Literal["starting", "healthy", "unhealthy", "unchecked"]
# What one check answers: None when healthy, else what was wrong, in a few words.
Probe = Callable[[str, int, str, float], str | None]


def service_url(job: Job) -> str | None:
    """The service's local address on the server's machine; None for other jobs."""
    if job.spec.kind != "service" or not job.spec.service_port:
        return None
    return f"http://{LOOPBACK}:{job.spec.service_port}"


@dataclass(frozen=True, slots=True)
class HealthState:
    """What the checks of a service's current run saw. Times: wall clock (shown)."""

    state: HealthWord
    since: float | None
    checked_at: float | None = None
    last_error: str | None = None
    failures: int = 0  # failed checks in a row


@dataclass(slots=True)
class _Run:
    started_at: float | None  # the run's start: another value is another run
    due_mono: float  # grace over (monotonic)
    health: HealthState
    restarted: bool = False


class ServiceHealth:
    """Checks the running services of the book every `period_s`; a service past its grace
    with `failures` failed checks in a row is handed to `restart(job, why)` once per run."""

    def __init__(
        self,
        book: LiveJobs,
        restart: Callable[[Job, str], object],
        *,
        period_s: float = 3.0,
        failures: int = 3,
        check: Probe,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._book = book
        self._restart = restart
        self.period_s = period_s
        self.failures = failures
        self._check = check
        self._route: Callable[[Job], Probe] | None = None  # `check_through`
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()  # leaf: the runs' map (the API reads it)
        self._runs: dict[int, _Run] = {}
        self._ticker = Ticker(
            "gpuyard-health", self.check_once, lambda: self.period_s, log,
            "service health checks failed",
        )  # fmt: skip
        self._pool: ThreadPoolExecutor | None = None

    def check_through(self, route: Callable[[Job], Probe]) -> None:
        """Ask each service where it runs: `route(job)` is the check on the job's machine (a
        cluster's machine's agent probes its own loopback). Set before the checks start."""
        self._route = route

    # -- reads ----------------------------------------------------------------------------
    def of(self, job: Job) -> HealthState | None:
        """The health of a running service (None: not a running service)."""
        if job.spec.kind != "service" or job.state is not JobState.RUNNING:
            return None
        with self._lock:
            run = self._runs.get(job.id)
        if run is None or run.started_at != job.started_at:
            return HealthState("starting", job.started_at)
        return run.health

    # -- checks ---------------------------------------------------------------------------
    def check_once(self) -> None:
        """One round: every running service asked once, where it runs, concurrently."""
        services = [
            job for job in self._book.running()
            if job.spec.kind == "service" and job.spec.service_port and job.stop_intent is None
        ]  # fmt: skip
        with self._lock:
            alive = {job.id for job in services}
            for job_id in [j for j in self._runs if j not in alive]:
                del self._runs[job_id]
        if not services:
            return
        timeout_s = min(2.0, max(0.2, self.period_s))
        if len(services) == 1:
            answers = [self._ask(services[0], timeout_s)]
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(_MAX_PARALLEL, "gpuyard-health-check")
            answers = list(self._pool.map(lambda j: self._ask(j, timeout_s), services))
        for job, error in zip(services, answers, strict=True):
            self._note(job, error)

    def _ask(self, job: Job, timeout_s: float) -> str | None:
        try:
            check = self._check if self._route is None else self._route(job)
            return check(LOOPBACK, job.spec.service_port, job.spec.health_path, timeout_s)
        except Exception as exc:  # a check must never end the thread
            return f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]

    def _note(self, job: Job, error: str | None) -> None:
        now, mono = self._clock(), self._monotonic()
        with self._lock:
            run = self._runs.get(job.id)
            if run is None or run.started_at != job.started_at:
                # Grace from its start; a run the server finds already going (a restart of
                # the server) is credited with the time it has had.
                had = max(0.0, now - job.started_at) if job.started_at is not None else 0.0
                due = mono + max(0.0, job.spec.health_grace_s - had)
                run = _Run(job.started_at, due, HealthState("starting", job.started_at))
                self._runs[job.id] = run
            run.health = _next(run.health, error, now, past_grace=mono >= run.due_mono)
            if run.restarted or mono < run.due_mono or run.health.failures < self.failures:
                return
            current = self._book.get(job.id)
            if current is None or current.started_at != job.started_at:
                return  # that run ended meanwhile
            run.restarted = True
            why = _restart_reason(job, run.health)
        log.warning("service %s is unhealthy: restarting it (%s)", job.id, why)
        self._restart(job, why)

    # -- thread ---------------------------------------------------------------------------
    def start(self) -> None:
        self._ticker.start()

    def stop(self) -> None:
        self._ticker.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _next(health: HealthState, error: str | None, now: float, *, past_grace: bool) -> HealthState:
    """The state after one check: healthy on an answer; unhealthy on a failure once the
    service was healthy or its grace is over; starting until then."""
    if error is None:
        since = health.since if health.state == "healthy" else now
        return replace(health, state="healthy", since=since, checked_at=now, failures=0)
    state: HealthWord = "unhealthy" if health.state != "starting" or past_grace else "starting"
    since = health.since if state == health.state else now
    return HealthState(state, since, now, error, health.failures + 1)


def _restart_reason(job: Job, health: HealthState) -> str:
    where = f"{service_url(job)}{job.spec.health_path}"
    return (
        f"{REASON_UNHEALTHY}: {health.failures} health checks of {where} failed in a row "
        f"(last: {health.last_error}); restarted"
    )
