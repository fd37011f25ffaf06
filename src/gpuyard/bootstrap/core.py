"""The decision path's wiring: journal, book, scheduler, controller, use cases and observers
over the stores (`build_core`; the tests' rigs run it too), registered once."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpuyard.adapters.service_probe import probe
from gpuyard.adapters.webhook import HttpPoster
from gpuyard.domain.machine_share import default_mem_per_cpu_mib
from gpuyard.domain.retry import RetryRules
from gpuyard.domain.states import JobState
from gpuyard.domain.webhooks import UrlPolicy
from gpuyard.scheduling.policy import Policy
from gpuyard.services.access.quotas import LimitService
from gpuyard.services.jobs.admission import Admission
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.jobs.change_feed import ChangeFeed
from gpuyard.services.jobs.controller import Controller, ExitInbox, Wakeup
from gpuyard.services.jobs.dependencies import NamedJobs
from gpuyard.services.jobs.desk import JobDesk
from gpuyard.services.jobs.drains import DrainService
from gpuyard.services.jobs.journal import JobObserver, Journal
from gpuyard.services.jobs.observers import queue_metrics, release_ports, scheduler_events
from gpuyard.services.jobs.reads import JobReads
from gpuyard.services.jobs.stops import StopRequests, StopSignals, signal_new_stops
from gpuyard.services.jobs.submit import JobSubmits
from gpuyard.services.jobs.verbs import JobVerbs
from gpuyard.services.launch.rendezvous import RendezvousPorts
from gpuyard.services.launch.run_as import RunAsPolicy
from gpuyard.services.launch.service_check import ServiceHealth
from gpuyard.services.machine.event_ring import EventLog
from gpuyard.services.machine.gpu_health import AfterSample, HealthGuard
from gpuyard.services.machine.gpu_history import GpuHistory
from gpuyard.services.machine.gpu_mem import GpuMemLimit, PeakHistory
from gpuyard.services.machine.gpus import GpuDesk
from gpuyard.services.machine.idle import IdleWatch
from gpuyard.services.machine.observers import finished_job_stats
from gpuyard.services.machine.telemetry import GpuMonitor
from gpuyard.services.metrics import QueueMetrics
from gpuyard.services.ports import Executor, ExitCallback, JobStore
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler
from gpuyard.services.scheduler.rebuild import REBUILD_HISTORY_JOBS
from gpuyard.services.stores import Stores
from gpuyard.services.workflows.notify import NotifyService, make_notify
from gpuyard.services.workflows.progress import ProgressService
from gpuyard.settings import Settings

METRICS_TOKEN_FILE = "metrics-token"  # accepted for GET /metrics only (a Prometheus scraper's)


@dataclass
class Core:
    """The server's decision path, wired: everything but the HTTP front and the threads."""

    book: JobBook
    journal: Journal
    scheduler: LiveScheduler
    controller: Controller
    drains: DrainService
    desk: JobDesk  # what the job use cases share
    submits: JobSubmits
    reads: JobReads
    verbs: JobVerbs
    gpus: GpuDesk
    feed: ChangeFeed
    metrics: QueueMetrics
    executor: Executor
    monitor: GpuMonitor | None
    progress: ProgressService | None = None  # jobs' progress and metric series
    health: ServiceHealth | None = None  # services' health checks (`serve --health`)
    notify: NotifyService | None = None  # webhooks (None: a store without their tables)
    # The events page's ring: told by the journal, the drains and the telemetry samples.
    events: EventLog = field(default_factory=EventLog)
    limits: LimitService | None = None  # quotas, shares, usage (None: a store without them)


def build_core(
    stores: Stores,
    inventory: Inventory,
    policy: Policy,
    make_executor: Callable[[ExitCallback], Executor],
    *,
    settings: Settings,
    clock: Callable[[], float] = time.time,
    base_env: Mapping[str, str] = os.environ,
    make_monitor: Callable[[JobBook], GpuMonitor] | None = None,
    settle: Callable[[Controller, DrainService], None] | None = None,
    identities: RunAsPolicy | None = None,
) -> Core:
    """Wire one server's services over its stores (none over a store it lacks), an inventory and
    an executor (also what the tests' rigs run: the same wiring, other adapters). `settle` runs
    before the scheduler is rebuilt (the Ray backend ends the jobs that cannot have survived).
    `identities`: as whom jobs run (None: as the server, whoever owns them: the tests' rigs)."""
    store = stores.jobs
    wakeup = Wakeup()
    exits = ExitInbox(wakeup)
    executor = make_executor(exits)
    active = store.load_active(REBUILD_HISTORY_JOBS)
    book = JobBook(active, next_id=store.max_job_id() + 1)
    scheduler = LiveScheduler(policy, inventory, clock)
    metrics, feed, ports, peaks = QueueMetrics(), ChangeFeed(), RendezvousPorts(), PeakHistory()
    monitor = make_monitor(book) if make_monitor is not None else None
    if monitor is not None and monitor.enabled and stores.gpu_history is not None:
        monitor.history = GpuHistory(  # charts: every sample kept (gpu_history.py)
            {g.index: g.uuid for g in inventory.gpus if g.detected},
            stores.gpu_history, period_s=monitor.period_s, clock=clock,
        )  # fmt: skip
    stop_signals = StopSignals()  # `cancel --signal`: from the request to the executor
    after: list[JobObserver] = [signal_new_stops(executor, stop_signals)]
    if monitor is not None:
        after.append(finished_job_stats(store, monitor, peaks))
    notify = _notifier(stores, settings, clock)  # in order: it only queues (workflows/notify.py)
    # The events page's (machine/event_ring.py): cheap, in commit order; kept in the store.
    events = EventLog(store=stores.events)
    journal = Journal(
        book, store,
        in_order=[scheduler_events(scheduler), queue_metrics(metrics), release_ports(ports), feed,
                  wakeup, events.job_change, *([notify] if notify is not None else [])],
        after=after,
        unwritten=[signal_new_stops(executor, stop_signals)],  # a stop never waits for the disk
    )  # fmt: skip
    controller = Controller(
        journal, executor, inventory, scheduler, ports, base_env=base_env, wakeup=wakeup,
        exits=exits, clock=clock, metrics=metrics,
        gpu_peak_mib=lambda job_id: _peak_mib(monitor, job_id), identities=identities,
        retry_rules=RetryRules(
            settings.retry_backoff_s, settings.retry_backoff_max_s, settings.node_fail_requeues,
            settings.service_backoff_s, settings.service_backoff_max_s,
            settings.service_healthy_s,
        ),
    )  # fmt: skip
    drains = DrainService(
        store, journal, scheduler, inventory, binds_devices=executor.binds_devices, clock=clock,
        wake=wakeup, listeners=[events.drain_changed],
    )  # fmt: skip
    if settle is not None:
        settle(controller, drains)
    events.drains_in_force(drains.current())  # those still in force once settled: told once
    scheduler.set_job_lookup(NamedJobs(book, store))  # the jobs a dependency names
    scheduler.rebuild(active)
    stops = StopRequests(journal, clock, stop_signals)
    idle = IdleWatch(
        settings.idle_util_pct, settings.idle_after_s, settings.idle_cancel_s,
        lambda job, why: stops.request(job.id, JobState.CANCELLED, why),
    )  # fmt: skip
    desk = JobDesk(
        journal, store, scheduler, stops, inventory, executor.log_path, wakeup, clock,
        executor.remove_files,
    )  # fmt: skip
    limits = _limits(stores, scheduler, clock, settings.fair_share_half_life_s)
    reads = JobReads(desk)
    admission = Admission(desk, reads, limits=limits, identities=identities)
    submits = JobSubmits(
        desk, admission, reads, identities=identities,
        preemptible_default=settings.preemptible_default,
        default_mem_per_cpu_mib=_default_mem_per_cpu(settings, inventory),
    )  # fmt: skip
    verbs = JobVerbs(desk, reads, admission, submits)
    gpus = GpuDesk(inventory, book, scheduler, drains, monitor=monitor, idle=idle, peaks=peaks)
    if monitor is not None:
        _watch_samples(
            monitor, store, book, peaks, drains, stops, idle, scheduler, settings,
            on_hot=events.hot_now,
        )  # fmt: skip
    progress = (
        ProgressService(book, stores.progress, executor.log_path, clock=clock)
        if stores.progress is not None else None
    )  # fmt: skip
    health = ServiceHealth(
        book, lambda job, why: stops.request(job.id, JobState.PENDING, why),
        period_s=settings.service_check_s, failures=settings.service_check_failures,
        check=probe, clock=clock,
    )  # fmt: skip
    return Core(
        book, journal, scheduler, controller, drains, desk, submits, reads, verbs, gpus, feed,
        metrics, executor, monitor, progress, health, notify=notify, events=events, limits=limits,
    )  # fmt: skip


def _default_mem_per_cpu(settings: Settings, inventory: Inventory) -> int:
    """What a job without --mem gets per CPU: the admin's (-1: nothing), else the smallest
    machine's share for jobs per CPU (`domain/machine_share.py`)."""
    if settings.def_mem_per_cpu_mib:
        return max(0, settings.def_mem_per_cpu_mib)
    return min(
        default_mem_per_cpu_mib(node.mem_mib, node.cpus, settings.jobs_mem_reserve_mib)
        for node in inventory.nodes
    )


def _limits(
    stores: Stores, scheduler: LiveScheduler, clock: Callable[[], float], half_life_s: float
) -> LimitService | None:
    """Quotas, shares and usage over the store's tables, given to the scheduler; None (no
    limits) for a store without them."""
    if stores.limits is None or stores.accounts is None or stores.usage is None:
        return None
    limits = LimitService(
        stores.limits, stores.accounts, stores.usage, scheduler, clock, half_life_s=half_life_s
    )
    limits.load()
    return limits


def _notifier(
    stores: Stores, settings: Settings, clock: Callable[[], float]
) -> NotifyService | None:
    """Webhooks over the store's tables, POSTing through the standard library to the hosts
    GPUYARD_NOTIFY_ALLOW allows (never this server's own API port)."""
    if stores.notify is None:
        return None
    policy = UrlPolicy.parse(settings.notify_allow, own_ports=(settings.port,))
    return make_notify(
        stores.notify, HttpPoster(policy), policy, clock=clock,
        retry_first_s=settings.notify_retry_s,
    )  # fmt: skip


def _watch_samples(
    monitor: GpuMonitor,
    store: JobStore,
    book: JobBook,
    peaks: PeakHistory,
    drains: DrainService,
    stops: StopRequests,
    idle: IdleWatch,
    scheduler: LiveScheduler,
    settings: Settings,
    *,
    on_hot: Callable[[Mapping[int, str]], None],
) -> None:
    """What each telemetry sample drives: health drains, the --gpu-mem hard limit, idle jobs,
    GPUs busy with foreign memory or too hot (told `on_hot`); and the stats and advice of
    earlier runs."""
    monitor.restore(store.load_gpu_stats(limit=10_000))
    for job in book.jobs(include_finished=True):
        if job.state.is_terminal:
            stats = monitor.job_stats(job.id)
            if stats is not None and stats.memory_peak_per_gpu_mib:
                peaks.record(job.owner, job.spec.name, stats.memory_peak_per_gpu_mib)
    gpu_mem_limit = GpuMemLimit(
        lambda job, why: stops.request(job.id, JobState.OUT_OF_MEMORY, why),
        lambda job_id: _peak_per_gpu_mib(monitor, job_id),
    )
    monitor.on_sample = AfterSample(
        HealthGuard(drains.drain), idle, scheduler, book, settings.foreign_mem_mib,
        settings.hot_temp_c, gpu_mem_limit, on_hot=on_hot,
    )  # fmt: skip


def _peak_per_gpu_mib(monitor: GpuMonitor, job_id: int) -> int | None:
    stats = monitor.job_stats(job_id)
    return stats.memory_peak_per_gpu_mib if stats is not None else None


def _peak_mib(monitor: GpuMonitor | None, job_id: int) -> int | None:
    stats = monitor.job_stats(job_id) if monitor is not None else None
    return stats.memory_peak_mib if stats is not None else None
