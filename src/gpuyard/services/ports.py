"""Ports: what the services need from the outside world, as Protocols adapters implement."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from gpuyard.domain.job import Gpu, Job


class JobStore(Protocol):
    """Durable job records. `write` returns only once the rows are on disk."""

    def load_jobs(self) -> list[Job]:
        """Every job, for the server's start."""
        ...

    def write(self, inserts: Sequence[Job], updates: Sequence[Job]) -> None:
        """Insert new jobs and update existing ones (compare-and-set on `version - 1`),
        durably, in one transaction. Raises Conflict if an update lost a race."""
        ...

    def write_future(self, inserts: Sequence[Job], updates: Sequence[Job]) -> Future[None]:
        """`write` without blocking: the Future completes once the rows are on disk."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How a job's process ended, as its supervisor recorded it."""

    exit_code: int | None
    signal: int | None = None
    timed_out: bool = False
    ended_at: float | None = None
    lost: bool = False  # the supervisor vanished without recording anything
    stop_requested: bool = False  # it was told to stop (cancel, preemption) before it ended


@dataclass(frozen=True, slots=True)
class Launched:
    """Identity of a job's supervisor process: pid plus start time, so a reused pid never
    passes for ours."""

    pid: int
    started_at: float


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a restarted server finds for a job it believed RUNNING."""

    alive: Launched | None = None
    ended: ExitStatus | None = None
    never_started: bool = False


class Executor(Protocol):
    """Runs jobs in supervised process trees and reports when they end."""

    def launch(self, job: Job, argv: list[str], env: dict[str, str]) -> Launched:
        """Start the job's supervisor running `argv` with `env`; returns once the process
        exists."""
        ...

    def stop(self, job: Job) -> None:
        """Ask the job's supervisor to stop the whole tree (TERM, grace, KILL)."""
        ...

    def recover(self, job: Job) -> Recovered:
        """Re-find a job after a server restart: still running, ended, or never started."""
        ...

    def watch(self, job: Job) -> None:
        """Report the job's end through the callback given at construction."""
        ...

    def log_path(self, job_id: int) -> str: ...

    def close(self) -> None: ...


ExitCallback = Callable[[int, ExitStatus], None]


class GpuProbe(Protocol):
    """Where the GPU inventory comes from: NVML (detected) or the admin (declared)."""

    def inventory(self) -> list[Gpu]: ...

    def describe(self) -> str:
        """One line for the server's start banner."""
        ...
