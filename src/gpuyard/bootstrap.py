"""The one place that wires adapters into services."""

from __future__ import annotations

import fcntl
import getpass
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

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
from gpuyard.services.ports import Executor, ExitStatus
from gpuyard.services.telemetry import GpuMonitor
from gpuyard.settings import Settings


@dataclass
class Server:
    """Everything one server process runs, ready for the API to serve."""

    settings: Settings
    service: JobService
    controller: Controller
    store: SqlJobStore
    executor: Executor
    token: str
    owner: str
    _lock_file: IO[str]
    monitor: GpuMonitor
    ray: RayParts | None = None

    def start(self) -> None:
        self.controller.recover()
        self.controller.start(self.settings.tick_s)
        self.controller.wake()
        self.monitor.start()
        if self.ray is not None:
            self.ray.watch.start()

    def close(self) -> None:
        """Stop serving; running local jobs keep running under their supervisors (Ray jobs
        end with the server's Ray connection)."""
        self.monitor.stop()
        if self.ray is not None:
            self.ray.watch.stop()
        self.controller.stop()
        self.executor.close()
        if self.ray is not None:
            self.ray.connection.close()
        self.store.close()
        self._lock_file.close()


@dataclass
class RayParts:
    """The Ray backend's connection and node watch (`--backend ray`)."""

    connection: Any
    watch: Any


def build_server(settings: Settings) -> Server:
    state = settings.state_dir
    state.mkdir(parents=True, exist_ok=True)
    lock_file = _lock_state_dir(state)
    holder: list[Controller] = []

    def on_exit(job_id: int, status: ExitStatus) -> None:
        holder[0].on_exit(job_id, status)

    ray: RayParts | None = None
    executor: Executor
    if settings.backend == "ray":
        inventory, executor, ray = _ray_backend(settings, on_exit)
    else:
        gpus, source = choose_gpus(settings.gpus, declared_mem_mib=settings.declared_gpu_mem_mib)
        node = NodeCapacity(
            name=socket.gethostname(),
            cpus=settings.cpus or os.cpu_count() or 1,
            mem_mib=settings.mem_mib or psutil.virtual_memory().total // 2**20,
        )
        inventory = Inventory(tuple(gpus), node, source)
        executor = LocalExecutor(state / "jobs", on_exit, grace_s=settings.kill_grace_s)
    store = SqlJobStore(settings.database_url or sqlite_url(state / "gpuyard.db"))
    book = JobBook(store.load_jobs())
    scheduler = LiveScheduler(make_policy(settings.policy, for_server=True), inventory, time.time)
    metrics = QueueMetrics()
    controller = Controller(
        book, store, executor, inventory, scheduler, base_env=os.environ, metrics=metrics
    )
    holder.append(controller)
    if ray is not None:
        _settle_ray_restart(controller)
    scheduler.rebuild(book.jobs(include_finished=True))
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
    if ray is not None:
        ray.watch.on_lost = lambda name: _node_lost(service, inventory, name)
        ray.watch.on_back = lambda name: _node_back(service, inventory, name)
    return Server(
        settings, service, controller, store, executor, ensure_token(settings.token_path),
        getpass.getuser(), lock_file, monitor, ray,
    )  # fmt: skip


def _ray_backend(
    settings: Settings, on_exit: Callable[[int, ExitStatus], None]
) -> tuple[Inventory, Executor, RayParts]:
    """Connect to Ray (or start a local cluster) and take its nodes as the inventory."""
    from gpuyard.adapters.ray import backend
    from gpuyard.adapters.ray.executor import RayExecutor

    try:
        connection = backend.connect(
            settings.state_dir, settings.ray_address, settings.ray_token_file,
            settings.ray_local_nodes, settings.ray_node_timeout_s,
        )  # fmt: skip
    except (ValueError, RuntimeError, ConnectionError, TimeoutError) as exc:
        where = settings.ray_address or "a local cluster"
        raise Unavailable(f"cannot use the Ray cluster ({where}): {exc}") from None
    try:
        found = backend.inventory(connection.nodes(), settings.declared_gpu_mem_mib)
        where = settings.ray_address or "a local cluster on 127.0.0.1"
        source = (
            f"{len(found.gpus)} GPUs on {len(found.nodes)} Ray node(s) of {where} "
            f"({', '.join(n.name for n in found.nodes)})"
        )
        inventory = Inventory(
            tuple(found.gpus), found.nodes[0], source, tuple(found.nodes[1:]), sharing=False
        )
        watch = backend.NodeWatch(connection, found.ray_nodes)
        executor = RayExecutor(
            connection, settings.state_dir / "jobs", on_exit, watch.node_ids,
            grace_s=settings.kill_grace_s,
        )  # fmt: skip
    except BaseException:
        connection.close()
        raise
    return inventory, executor, RayParts(connection, watch)


def _settle_ray_restart(controller: Controller) -> None:
    """Before the scheduler is rebuilt: Ray jobs never outlive the server (end them now: the
    cluster may have changed under them), and drains made by lost Ray nodes are lifted (the
    inventory holds only machines alive now, numbered afresh)."""
    controller.recover()
    for gpu, drain in list(controller.drains.items()):
        if drain.source == "ray":
            controller.resume_gpu(gpu)


def _node_lost(service: JobService, inventory: Inventory, name: str) -> None:
    """A Ray node died: its GPUs go out of service (a job still there ends NODE_FAIL)."""
    drains = service.drains()
    for gpu in inventory.gpus_of(name):
        if gpu not in drains:
            service.drain(gpu, f"Ray node {name} was lost", "ray")


def _node_back(service: JobService, inventory: Inventory, name: str) -> None:
    """A lost Ray node is back: the GPUs its loss took out of service return."""
    drains = service.drains()
    for gpu in inventory.gpus_of(name):
        drain = drains.get(gpu)
        if drain is not None and drain.source == "ray":
            service.resume(gpu)


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
