"""The one place that wires adapters into services."""

from __future__ import annotations

import fcntl
import getpass
import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

from gpuyard.adapters.executor.local import LocalExecutor
from gpuyard.adapters.gpus.nvml import NvmlTelemetry
from gpuyard.adapters.gpus.processes import PsutilProcessOwners
from gpuyard.adapters.gpus.select import choose_gpus
from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.domain.errors import Unavailable
from gpuyard.domain.job import Job, NodeCapacity
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.controller import Controller
from gpuyard.services.gpu_mem import GpuMemLimit
from gpuyard.services.health import AfterSample, HealthGuard
from gpuyard.services.idle import IdleWatch
from gpuyard.services.inventory import Inventory
from gpuyard.services.jobbook import JobBook
from gpuyard.services.jobs import JobService
from gpuyard.services.live_scheduler import LiveScheduler
from gpuyard.services.metrics import QueueMetrics
from gpuyard.services.telemetry import GpuMonitor
from gpuyard.settings import Settings


@dataclass
class Server:
    """Everything one server process runs, ready for the API to serve."""

    settings: Settings
    service: JobService
    controller: Controller
    store: SqlJobStore
    executor: LocalExecutor
    token: str
    owner: str
    _lock_file: IO[str]
    monitor: GpuMonitor

    def start(self) -> None:
        self.controller.recover()
        self.controller.start(self.settings.tick_s)
        self.controller.wake()
        self.monitor.start()

    def close(self) -> None:
        """Stop serving; running jobs keep running under their supervisors."""
        self.monitor.stop()
        self.controller.stop()
        self.executor.close()
        self.store.close()
        self._lock_file.close()


def build_server(settings: Settings) -> Server:
    state = settings.state_dir
    state.mkdir(parents=True, exist_ok=True)
    lock_file = _lock_state_dir(state)
    gpus, source = choose_gpus(settings.gpus, declared_mem_mib=settings.declared_gpu_mem_mib)
    node = NodeCapacity(
        name=socket.gethostname(),
        cpus=settings.cpus or os.cpu_count() or 1,
        mem_mib=settings.mem_mib or psutil.virtual_memory().total // 2**20,
    )
    store = SqlJobStore(settings.database_url or sqlite_url(state / "gpuyard.db"))
    book = JobBook(store.load_jobs())
    inventory = Inventory(tuple(gpus), node, source)
    holder: list[Controller] = []
    executor = LocalExecutor(
        state / "jobs", lambda job_id, status: holder[0].on_exit(job_id, status),
        grace_s=settings.kill_grace_s,
    )  # fmt: skip
    scheduler = LiveScheduler(make_policy(settings.policy, for_server=True), inventory, time.time)
    scheduler.rebuild(book.jobs(include_finished=True))
    metrics = QueueMetrics()
    controller = Controller(
        book, store, executor, inventory, scheduler, base_env=os.environ, metrics=metrics
    )
    holder.append(controller)
    monitor = GpuMonitor(
        NvmlTelemetry, PsutilProcessOwners(), book, inventory, period_s=settings.telemetry_s
    )
    service = JobService(book, store, controller, monitor=monitor, metrics=metrics)
    idle = IdleWatch(
        settings.idle_util_pct, settings.idle_after_s, settings.idle_cancel_s,
        lambda job, why: controller.request_stop(job, JobState.CANCELLED, why),
    )  # fmt: skip
    service.idle = idle
    monitor.restore(store.load_gpu_stats(limit=10_000))
    for job in book.jobs(include_finished=True):
        if job.state.is_terminal:
            service.job_ended(job)  # advice from runs before the restart too

    def on_ended(job: Job) -> None:
        _save_gpu_stats(store, monitor, job.id)
        service.job_ended(job)

    controller.on_ended = on_ended
    controller.gpu_peak_mib = lambda job_id: (
        stats.memory_peak_mib if (stats := monitor.job_stats(job_id)) is not None else None
    )
    gpu_mem_limit = GpuMemLimit(
        lambda job, why: controller.request_stop(job, JobState.OUT_OF_MEMORY, why),
        lambda job_id: (
            stats.memory_peak_per_gpu_mib if (stats := monitor.job_stats(job_id)) else None
        ),
    )
    monitor.on_sample = AfterSample(
        HealthGuard(service.drain), idle, scheduler, book, settings.foreign_mem_mib,
        settings.hot_temp_c, gpu_mem_limit,
    )  # fmt: skip
    return Server(
        settings, service, controller, store, executor, ensure_token(settings.token_path),
        getpass.getuser(), lock_file, monitor,
    )  # fmt: skip


def _save_gpu_stats(store: SqlJobStore, monitor: GpuMonitor, job_id: int) -> None:
    """Keep a finished job's GPU stats across restarts (only jobs telemetry saw)."""
    saved = monitor.saved_form(job_id)
    if saved is not None:
        store.save_gpu_stats(job_id, saved)


def ensure_token(path: Path) -> str:
    """The API token, created on first start with mode 0600."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def _lock_state_dir(state: Path) -> IO[str]:
    """One server per state dir: a second one would run every job twice."""
    lock_file = open(state / "server.lock", "a+")  # noqa: SIM115 - held for the server's life
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.close()
        raise Unavailable(
            f"another gpuyard server already uses {state}; stop it or pass another --state-dir"
        ) from None
    return lock_file
