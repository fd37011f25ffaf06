"""The stores the contract suite runs over, and the jobs it writes.

Each backend factory makes one empty database and opens stores on it (as many as a test asks:
a reopen, a second server); `STORE_BACKENDS` lists them. PostgreSQL's is a fresh database on
the session's loopback server (`postgres_server`, tests/conftest.py), dropped after the test.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpuyard.adapters.store.memory import MemoryDatabase, MemoryJobStore
from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.domain.job import Attempt, Job, JobSpec, JobStep
from gpuyard.domain.states import JobState
from gpuyard.services.ports import JobStore

if TYPE_CHECKING:
    from tests.postgres_server import PostgresServer


class Backend:
    """One database of one kind; `open()` gives a new store on it, closed at the test's end."""

    def __init__(
        self,
        name: str,
        open_store: Callable[[], JobStore],
        remove: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self._open_store = open_store
        self._remove = remove  # the database's own cleanup, after its stores are closed
        self._opened: list[JobStore] = []

    def open(self) -> JobStore:
        store = self._open_store()
        self._opened.append(store)
        return store

    def close_all(self) -> None:
        for store in self._opened:
            store.close()

    def remove(self) -> None:
        """Close every store, then remove the database (at the test's end)."""
        try:
            self.close_all()
        finally:
            if self._remove is not None:
                self._remove()


def memory_backend(_tmp_path: Path, _request: pytest.FixtureRequest) -> Backend:
    database = MemoryDatabase(name="memory")
    return Backend("memory", lambda: MemoryJobStore(database))


def sqlite_backend(tmp_path: Path, _request: pytest.FixtureRequest) -> Backend:
    url = sqlite_url(tmp_path / "gpuyard.db")
    return Backend("sqlite", lambda: SqlJobStore(url))


_DATABASES = itertools.count(1)
_AT_HEAD = "contract_at_head"  # migrated once; each test's database is a copy of it
_AT_HEAD_ON: set[int] = set()  # the servers (by port) that have it


def postgresql_backend(_tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    """A fresh database already at the newest schema (the migrations from an empty database
    are test_postgres_store's): copying a migrated template is faster than migrating."""
    server: PostgresServer = request.getfixturevalue("postgres_server")
    if server.port not in _AT_HEAD_ON:
        SqlJobStore(server.create_database(_AT_HEAD)).close()
        _AT_HEAD_ON.add(server.port)
    name = f"contract_{next(_DATABASES)}"
    url = server.create_database(name, template=_AT_HEAD)
    return Backend("postgresql", lambda: SqlJobStore(url), lambda: server.drop_database(name))


BackendFactory = Callable[[Path, pytest.FixtureRequest], Backend]
STORE_BACKENDS: list[BackendFactory] = [memory_backend, sqlite_backend, postgresql_backend]


def pending_job(job_id: int, **spec_changes: object) -> Job:
    spec = JobSpec(argv=("python", "train.py"), name=f"job{job_id}", workdir="/home/ada")
    spec = dataclasses.replace(spec, **spec_changes)  # type: ignore[arg-type]
    return Job(id=job_id, spec=spec, owner="ada", state=JobState.PENDING, submitted_at=1000.5)


def ended_job(
    job_id: int,
    *,
    ended_at: float,
    state: JobState = JobState.COMPLETED,
    owner: str = "ada",
    name: str | None = None,
    submitted_at: float | None = None,
) -> Job:
    """A job that ran and ended (version 3, as the server writes it)."""
    job = pending_job(job_id, name=name or f"job{job_id}")
    job = dataclasses.replace(job, owner=owner, submitted_at=submitted_at or float(job_id))
    running = job.transition(JobState.RUNNING, gpus=(0,), started_at=job.submitted_at)
    return running.transition(state, ended_at=ended_at, exit_code=0)


# Every JobSpec field set to something other than its default (the codec test checks that a
# new field is added here).
EVERY_SPEC_FIELD: dict[str, object] = {
    "argv": ("torchrun", "--nproc-per-node=2", "train.py", "--lr", "3e-4", "naïve ü 日本"),
    "name": "resnet 50 'quoted' \"x\"",
    "workdir": "/srv/data/ada/run-7",
    "gpus": 2,
    "cpus": 12,
    "mem_mib": 65536,
    "time_limit_s": 2 * 86400 + 5,
    "priority": -3,
    "env": (("A", "1"), ("EMPTY", ""), ("PATHS", "a:b=c")),
    "preemptible": True,
    "distributed": "torchrun",
    "gpu_mem_mib": 20 * 1024,
    "nodes": 2,
    "stop_signal": 10,  # SIGUSR1
    "script": "#!/bin/sh\n# naïve ü 日本 'quoted'\ntorchrun \"$@\"\n",
    "script_index": 2,
    "retries": 4,
    "retry_on": ("failed", "launch"),
    "warn_signal": 10,
    "warn_before_s": 90,
    "warn_target": "steps",
    "output_path": "logs/%x-%A_%a.out",
    "error_path": "logs/%x-%j.err",
    "ntasks_per_node": 4,
    "ntasks_given": True,
    "gpus_per_task": 2,
    "dependency": "afterok:7:8,singleton",
    "array_max_running": 8,
    "array": "0-15:4%8",
    "kind": "service",
    "service_port": 18_080,
    "health_path": "/health",
    "health_grace_s": 15,
    "python": "/opt/envs/ü/bin/python",
    "venv": "/opt/venvs/train",
    "container": "docker://pytorch:2.13",
    "notify": ("https://hooks.example.org/T0/secret", "http://127.0.0.1:9/hook"),
    "notify_events": ("begin", "end", "fail"),
    "gpu_type": "h100",
    "hold": True,
}


def finished_job_with_every_field_set() -> Job:
    return Job(
        id=41,
        spec=JobSpec(**EVERY_SPEC_FIELD),  # type: ignore[arg-type]
        owner="grace",
        state=JobState.CANCELLED,
        submitted_at=1_700_000_000.123456,
        reason="Cancelled by user",
        gpus=(3, 1),
        exit_code=-15,
        started_at=1_700_000_010.25,
        ended_at=1_700_000_999.75,
        pid=4_194_303,
        pid_started_at=123456.78,
        stop_intent=JobState.CANCELLED,
        version=9,
        node="gpu-box-2",
        attained_gpu_s=7_200.5,
        restarts=3,
        held=True,
        restart_of=12,
        attempts=(
            Attempt(
                1,
                1_699_999_000.5,
                1_699_999_100.25,
                JobState.FAILED,
                3,
                "NonZeroExit",
                "b1",
                (0, 2),
            ),
            Attempt(2, 1_699_999_200.0, 1_699_999_300.0, JobState.NODE_FAIL, None, "GPU 2 lost"),
        ),
        idempotency_key="7f0c2a9e-retry ü",
        not_before=1_700_000_005.5,
        log_dropped_bytes=65_536,
        array_job_id=40,
        array_task_id=3,
        max_rss_kib=3_145_728,
        cpu_time_s=12.5,
        steps=(
            JobStep(0, "true", 1, 1_700_000_001.0, 1_700_000_001.5, 0),
            JobStep(1, "python3 ü", 4, 1_700_000_002.0, 1_700_000_090.0, 143, 15),
            JobStep(2, "sleep", 1, 1_700_000_091.0),  # killed with its job: no end
        ),
    )
