"""The one place that wires adapters into services: `build_core` (the decision path, also
what the tests' rigs run), `build_server` (a whole server for its settings) and `build_app`
(the HTTP API over it)."""

from __future__ import annotations

import gc
import getpass
import hashlib
import logging
import os
import pwd
import secrets
import socket
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import psutil
from sqlalchemy import make_url
from sqlalchemy.exc import DBAPIError

from gpuyard.adapters.executor.cgroups import JobCgroups, gpu_device_numbers
from gpuyard.adapters.executor.container_runtime import find_container_runtime
from gpuyard.adapters.executor.local import LocalExecutor
from gpuyard.adapters.gpus.processes import PsutilProcessOwners
from gpuyard.adapters.gpus.select import choose_gpus
from gpuyard.adapters.gpus.telemetry import open_gpu_telemetry
from gpuyard.adapters.identity import mapped_identity
from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.adapters.webhook import HttpPoster
from gpuyard.domain.accounts import DEFAULT_TEAM
from gpuyard.domain.errors import Unavailable
from gpuyard.domain.job import NodeCapacity
from gpuyard.domain.principal import Principal
from gpuyard.domain.retry import RetryRules
from gpuyard.domain.states import JobState
from gpuyard.domain.webhooks import UrlPolicy
from gpuyard.locations import is_loopback
from gpuyard.scheduling.policies import make_policy
from gpuyard.scheduling.policy import Policy
from gpuyard.services.access.accounts import AccountService
from gpuyard.services.access.front import AccessRules, HostRules
from gpuyard.services.access.peers import PeerAuth
from gpuyard.services.access.quotas import LimitService
from gpuyard.services.access.tokens import TokenAuth
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
from gpuyard.services.server import Background, ServerFacade, ServerInfo
from gpuyard.services.stores import Stores
from gpuyard.services.workflows.notify import NotifyService
from gpuyard.services.workflows.progress import ProgressService
from gpuyard.services.workflows.sweeps import SweepService
from gpuyard.settings import TOKEN_FILE as TOKEN
from gpuyard.settings import Settings, masked_url

if TYPE_CHECKING:
    from fastapi import FastAPI


METRICS_TOKEN_FILE = "metrics-token"  # accepted for GET /metrics only (a Prometheus scraper's)

# A restarted policy learns from this many finished runs (histories, decayed usage); the book
# keeps fewer in memory (older jobs are paged from the store).
_REBUILD_HISTORY_JOBS = 20_000


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
    active = store.load_active(_REBUILD_HISTORY_JOBS)
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
    events = EventLog()  # the events page's (machine/event_ring.py): cheap, in commit order
    journal = Journal(
        book, store,
        in_order=[scheduler_events(scheduler), queue_metrics(metrics), release_ports(ports), feed,
                  wakeup, events.job_change, *([notify] if notify is not None else [])],
        after=after,
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
        local=settings.backend == "local", clock=clock,
    )  # fmt: skip
    return Core(
        book, journal, scheduler, controller, drains, desk, submits, reads, verbs, gpus, feed,
        metrics, executor, monitor, progress, health, notify=notify, events=events, limits=limits,
    )  # fmt: skip


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
    return NotifyService(
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


def build_server(
    settings: Settings, job_umask: int | None = None, store: SqlJobStore | None = None
) -> ServerFacade:
    """The whole server for `settings`: store (locked: one server per database), backend,
    core, telemetry, the API's token. `job_umask`: the umask the server had before it closed
    its own (`serve`), given to the jobs that run as the server's user. `store`: one already
    opened for it (`open_store`: a standby's, which waited for the lock); closed with it."""
    state = settings.state_dir
    if store is None:
        _writable_state_dir(state)
        store = open_store(settings)
    owner = getpass.getuser()
    closers: list[Callable[[], object]] = []
    try:
        # The state dir's token is the server's own user's, the first admin (an account made
        # at the first start); every other token is an account's, looked up in memory.
        auth = TokenAuth(ensure_token(settings.token_path), Principal(owner, "admin", DEFAULT_TEAM))
        accounts = AccountService(store, auth, server_user=owner)
        accounts.start()
        identities = RunAsPolicy(
            mapped_identity(lambda name: _unix_user_of(accounts, name)), os.geteuid(), owner,
            allow_root_jobs=settings.allow_root_jobs,
            server_umask=_current_umask() if job_umask is None else job_umask,
        )  # fmt: skip
        ray: RayParts | None = None
        confinement = "none (--backend ray: Ray's workers run the jobs): limits are advisory"
        if settings.backend == "ray":
            inventory, make_executor, ray = _ray_backend(settings)
            closers.append(ray.connection.close)
        else:
            inventory = _local_inventory(settings)
            cgroups = job_cgroups(state / "jobs", settings, inventory)
            confinement = (
                cgroups.describe() if cgroups is not None
                else "none (GPUYARD_JOB_CGROUPS=0): --mem, --cpus and GPU devices are advisory"
            )  # fmt: skip

            def make_executor(exits: ExitCallback) -> Executor:
                return LocalExecutor(
                    state / "jobs", exits, grace_s=settings.kill_grace_s, cgroups=cgroups
                )

        core = build_core(
            store.stores(), inventory, make_policy(settings.policy, for_server=True), make_executor,
            settings=settings,
            make_monitor=lambda book: GpuMonitor(
                lambda: open_gpu_telemetry(inventory.gpus), PsutilProcessOwners(), book, inventory,
                period_s=settings.telemetry_s,
            ),
            settle=_settle_ray_restart if ray is not None else None, identities=identities,
        )  # fmt: skip
    except BaseException:
        for close in closers:
            close()
        store.close()
        raise
    background: list[Background] = [core.monitor] if core.monitor is not None else []
    if core.progress is not None:
        background.append(core.progress)
    if core.health is not None:
        background.append(core.health)
    if core.notify is not None:
        core.notify.team_of = lambda name: _team_of(accounts, name)
        core.notify.resume_warnings(core.book.jobs(include_finished=False))
        core.notify.team_exists = lambda team: any(
            t.name == team for t in accounts.teams(auth.principal)
        )
        background.append(core.notify)
    sweeps = SweepService(core.submits, core.verbs, core.desk, store, core.progress)
    background.append(sweeps)  # sweeps' early stop
    if core.monitor is not None and core.monitor.history is not None:
        background.append(core.monitor.history)  # after the sampler: its stop writes the last
    if ray is not None:
        ray.watch.on_lost = lambda name: _node_lost(core.drains, inventory, name)
        ray.watch.on_back = lambda name: _node_back(core.drains, inventory, name)
        background.append(ray.watch)
    return ServerFacade(
        core.controller, auth,
        core.feed, core.metrics, ServerInfo(owner, settings.policy, settings.backend, confinement),
        events=core.events, submits=core.submits, reads=core.reads, verbs=core.verbs,
        gpus=core.gpus, drains=core.drains, scheduler=core.scheduler, limits=core.limits,
        health=core.health, tick_s=settings.tick_s, background=background,
        closers=[core.executor.close, core.scheduler.close, *closers,
                 accounts.flush_last_used, store.close],
        accounts=accounts, progress=core.progress, sweeps=sweeps,
        notify=core.notify,
        access=AccessRules(
            HostRules(settings.host, settings.port, settings.public_names, _machine_names),
            metrics_token=ensure_token(settings.state_dir / METRICS_TOKEN_FILE),
        ),
        peers=PeerAuth(
            accounts, auth.principal, os.geteuid(), _unix_name,
            register=settings.register_local_users,
        ) if settings.socket_path is not None else None,
    )  # fmt: skip


STANDBY_POLL_S = 1.0  # how often a standby asks for the database's lock


def database_of(settings: Settings) -> str:
    """The URL of the server's database: `--db`, else `gpuyard.db` in the state dir."""
    return settings.database_url or sqlite_url(settings.state_dir / "gpuyard.db")


def describe_database(url: str) -> str:
    """The database as the start banner names it; a password never shown."""
    if url.startswith("sqlite"):
        return f"SQLite {url.partition(':///')[2] or url}"
    return f"PostgreSQL {masked_url(url)}"


def open_store(settings: Settings, say: Callable[[str], object] | None = None) -> SqlJobStore:
    """The server's store, locked for it before its migrations run (a second server must
    neither upgrade the schema under a running one nor run its jobs twice): one line and no
    server when another holds it. A standby (`--standby`) waits instead: it asks again every
    `STANDBY_POLL_S` (the lock goes with the active server's process or database session)
    and says once that it waits. A database it cannot reach is one line naming it, its
    password masked."""
    url = database_of(settings)
    say = say or _say
    waiting = False
    while True:
        try:
            store = SqlJobStore(url, exclusive=True)
        except Unavailable as exc:
            if not settings.standby:
                raise Unavailable(
                    f"{exc.message} (or start this one with --standby: it waits, then takes "
                    "over when that server stops)"
                ) from None
            if not waiting:
                say(
                    f"standby: another gpuyard server holds {describe_database(url)}; waiting "
                    f"for it to stop (asking every {STANDBY_POLL_S:g} s), then taking over"
                )
                waiting = True
            time.sleep(STANDBY_POLL_S)
            continue
        except DBAPIError as exc:
            raise Unavailable(
                f"cannot use the database {describe_database(url)}: {_db_reason(exc, url)}; "
                "check --db (or GPUYARD_DATABASE_URL) and that the database server is up"
            ) from None
        if waiting:
            say("standby: the database is free (its server is gone); taking over")
        return store


def _say(line: str) -> None:
    print(line, flush=True)


def _db_reason(exc: DBAPIError, url: str) -> str:
    """The driver's own reason, on one line, any password in the URL scrubbed from it."""
    reason = " ".join(str(exc.orig or exc).split()) or type(exc).__name__
    password = make_url(url).password
    return reason.replace(str(password), "***") if password else reason


def _unix_name(uid: int) -> str | None:
    """The Unix user name of a uid (a Unix socket caller's), None when it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _team_of(accounts: AccountService, owner: str) -> str | None:
    """The team an account is in (its team's webhook defaults apply to its jobs)."""
    account = accounts.account(owner)
    return account.team if account is not None else None


def _unix_user_of(accounts: AccountService, owner: str) -> str | None:
    """The Unix user an account's jobs run as, when it names one (`--unix-user`)."""
    account = accounts.account(owner)
    return account.unix_user if account is not None else None


def _machine_names() -> list[str]:
    """This machine's addresses and name: what clients of a server bound to all interfaces
    may put in Host (a rebinding attacker's name is none of them)."""
    names = [socket.gethostname()]
    for addresses in psutil.net_if_addrs().values():
        names += [a.address.split("%")[0] for a in addresses
                  if a.family in (socket.AF_INET, socket.AF_INET6)]  # fmt: skip
    return names


def job_cgroups(jobs_dir: Path, settings: Settings, inventory: Inventory) -> JobCgroups | None:
    """Per-job control groups under this server's own (`adapters/executor/cgroups.py`), in a
    folder named after its jobs folder (two servers on one machine both have a job 1); None
    when the admin turned them off."""
    if not settings.job_cgroups:
        return None
    scope = hashlib.sha256(str(jobs_dir.resolve()).encode()).hexdigest()[:12]
    return JobCgroups(
        scope, pids_max=settings.job_pids_max or None, all_gpus=tuple(inventory.gpu_indices()),
        gpu_devices=gpu_device_numbers(inventory.gpus),
    )  # fmt: skip


def _writable_state_dir(state: Path) -> None:
    """Make the state dir and prove it takes a file, so that a read-only or full file system
    is one line naming the path and a fix (a bare "Read-only file system" named nothing);
    then close it (`close_state_dir`)."""
    probe = state / f".write-test-{os.getpid()}"
    try:
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as exc:
        raise Unavailable(
            f"the state dir {state} cannot be written ({exc.strerror or exc}): choose a "
            "writable one with --state-dir or GPUYARD_STATE_DIR (`gpuyard doctor --state-dir "
            "DIR` checks one)"
        ) from None
    close_state_dir(state)
    if os.geteuid() == 0:
        _warn_unreachable(state)


def _warn_unreachable(state: Path) -> None:
    """A root server runs jobs as their owners, who must cross every folder above their own
    job's folder to run the script copied at submit: say which one shuts them out (the
    default state dir under /root does)."""
    for folder in (state.resolve(), *state.resolve().parents):
        if not os.stat(folder).st_mode & 0o001:
            logging.getLogger("gpuyard.server").warning(
                "jobs run as their owners cannot reach their folders under %s (%s is not "
                "searchable by others): submitted scripts will not run; use a state dir such "
                "as /var/lib/gpuyard (--state-dir)", state, folder,
            )  # fmt: skip
            return


def close_state_dir(state: Path) -> None:
    """The state dir holds every job's command and `--env` secrets, the database and the
    token: refused when another user owns it or may write in it (they could plant a token or
    a database), else made 0700 (0711 on a root server: each job, run as its owner, reaches
    its own folder by path; nobody lists it) and its files the server's alone (0600)."""
    _refuse_foreign(state, "state dir")
    os.chmod(state, 0o711 if os.geteuid() == 0 else 0o700)
    for name in ("gpuyard.db", "gpuyard.db-wal", "gpuyard.db-shm", "gpuyard.db.lock", TOKEN):
        path = state / name
        if path.exists() and not path.is_symlink():
            _refuse_foreign(path, "token file" if name == TOKEN else "database file")
            os.chmod(path, 0o600)


def _refuse_foreign(path: Path, what: str) -> None:
    """One line with the fix when `path` is another user's or others may write to it."""
    info = os.stat(path)
    if info.st_uid != os.geteuid():
        raise Unavailable(
            f"the {what} {path} belongs to uid {info.st_uid}, not to the server's user "
            f"(uid {os.geteuid()}): use one of your own (--state-dir) or `chown -R "
            f"{os.geteuid()} {path}`"
        )
    if info.st_mode & 0o022:
        raise Unavailable(
            f"the {what} {path} may be written by other users (mode {info.st_mode & 0o777:o}): "
            f"`chmod go-w {path}` after checking what is in it"
        )


def _current_umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def build_app(
    settings: Settings, job_umask: int | None = None, store: SqlJobStore | None = None
) -> tuple[ServerFacade, FastAPI]:
    """The server and the HTTP API over it: the only place that calls `create_app`."""
    from gpuyard.api.app import create_app

    server = build_server(settings, job_umask, store)
    return server, create_app(server)


def _local_inventory(settings: Settings) -> Inventory:
    gpus, source = choose_gpus(settings.gpus, declared_mem_mib=settings.declared_gpu_mem_mib)
    node = NodeCapacity(
        name=socket.gethostname(),
        cpus=settings.cpus or os.cpu_count() or 1,
        mem_mib=settings.mem_mib or psutil.virtual_memory().total // 2**20,
    )
    return Inventory(tuple(gpus), node, source, container_runtime=find_container_runtime())


@dataclass
class RayParts:
    """The Ray backend's connection and node watch (`--backend ray`)."""

    connection: Any
    watch: Any


def _ray_backend(
    settings: Settings,
) -> tuple[Inventory, Callable[[ExitCallback], Executor], RayParts]:
    """Connect to Ray (or start a local cluster) and take its nodes as the inventory."""
    try:
        from gpuyard.adapters.ray import backend
        from gpuyard.adapters.ray.executor import RayExecutor
    except ImportError as exc:
        raise Unavailable(
            f"--backend ray needs Ray, which is not installed ({exc.name}): "
            "pip install 'gpuyard[ray]'"
        ) from None

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
    except BaseException:
        connection.close()
        raise

    def make_executor(exits: ExitCallback) -> Executor:
        return RayExecutor(
            connection, settings.state_dir / "jobs", exits, watch.node_ids,
            grace_s=settings.kill_grace_s,
        )  # fmt: skip

    return inventory, make_executor, RayParts(connection, watch)


def _settle_ray_restart(controller: Controller, drains: DrainService) -> None:
    """Before the scheduler is rebuilt: Ray jobs never outlive the server (end them now: the
    cluster may have changed under them), and drains made by lost Ray nodes are lifted (the
    inventory holds only machines alive now, numbered afresh)."""
    controller.recover()
    for gpu, drain in drains.current().items():
        if drain.source == "ray":
            drains.resume(gpu)


def _node_lost(drains: DrainService, inventory: Inventory, name: str) -> None:
    """A Ray node died: its GPUs go out of service (a job still there ends NODE_FAIL)."""
    drained = drains.current()
    for gpu in inventory.gpus_of(name):
        if gpu not in drained:
            drains.drain(gpu, f"Ray node {name} was lost", "ray")


def _node_back(drains: DrainService, inventory: Inventory, name: str) -> None:
    """A lost Ray node is back: the GPUs its loss took out of service return."""
    drained = drains.current()
    for gpu in inventory.gpus_of(name):
        drain = drained.get(gpu)
        if drain is not None and drain.source == "ray":
            drains.resume(gpu)


def ensure_token(path: Path) -> str:
    """The API token, created on first start with mode 0600; one found there is used only if
    it is the server's own and nobody else may write it (a planted token admits its planter)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        if path.is_symlink():
            raise Unavailable(
                f"the token file {path} is a symbolic link: remove it (the server makes a new one)"
            ) from None
        _refuse_foreign(path, "token file")
        os.chmod(path, 0o600)
        return path.read_text().strip()
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


class OneLineFormatter(logging.Formatter):
    """Every log record on one line: a newline or a control character in the message (a drain
    reason, a job's name: text a user chose) is written as an escape (`\\n`, `\\x1b`), so it
    cannot forge a line of the server's log nor move an admin's terminal. A traceback keeps its
    lines, each marked `  | ` (an exception's text may hold a user's newline too): no line
    after a record's first can pass for a record of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = record.message
        if not text.isprintable():
            record.message = _escaped(text)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        first, newline, rest = super().format(record).partition("\n")
        if not newline:
            return first
        lines = (_escaped(line) for line in rest.split("\n"))
        return first + "".join(f"\n  | {line}" for line in lines)


def _escaped(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def configure_logging(stream: TextIO) -> None:
    """The server's log: INFO and up, one line per record (`OneLineFormatter`), to `stream`."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    logging.getLogger("alembic").setLevel(logging.WARNING)


def serve(settings: Settings) -> None:
    """`gpuyard server`: bind first (a wrong name or a taken port is one line, before anything
    is built), build the server and its API, then listen and serve in the foreground."""
    from gpuyard.api.http_server import serve as serve_http

    make_policy(settings.policy, for_server=True)  # a wrong name: one line, before binding
    # Everything the server creates is its own alone (database, logs, launch files); jobs
    # run as the server's user get back the umask it was started with.
    job_umask = os.umask(0o077)
    store: SqlJobStore | None = None
    if settings.standby:
        # A standby binds only once it holds the database: the server it replaces may be
        # on this machine, on the same port and socket, until it dies.
        _writable_state_dir(settings.state_dir)
        store = open_store(settings)
    try:
        sock = _bind(settings.host, settings.port)
    except BaseException:
        if store is not None:
            store.close()
        raise
    path = settings.socket_path
    try:
        local = bind_unix(path, explicit=settings.socket is not None) if path else None
    except BaseException:
        sock.close()
        if store is not None:
            store.close()
        raise
    socks = [sock] if local is None else [sock, local]
    inode = os.lstat(path).st_ino if local is not None and path is not None else None
    try:
        server, app = build_app(settings, job_umask, store)
    except BaseException:
        for each in socks:
            each.close()
        if inode is not None and path is not None:
            _unlink_own_socket(path, inode)
        raise
    for each in socks:  # only now: a client that connects finds the token and a ready server
        each.listen(1024)
    for line in (
        f"gpuyard server listening on {settings.url}",
        f"  state dir: {settings.state_dir}",
        f"  database:  {describe_database(database_of(settings))}",
        f"  GPUs:      {server.gpus.inventory.source}",
        f"  policy:    {settings.policy}",
        f"  job limits: {server.info.confinement}",
        f"  API token: {settings.token_path} (the CLI on this machine finds it)",
        f"  metrics:   {settings.state_dir / METRICS_TOKEN_FILE} (GET /metrics only)",
        *_local_line(settings, local),
        *_remote_warning(settings),
    ):
        print(line, flush=True)
    # What the start made (modules, the book's jobs, the policy's replayed history) lives as
    # long as the server: moved out of the cyclic collector's reach, so that a full collection
    # no longer scans it all inside a pass or a submit (bench/dependency_chain.py: the chain's
    # worst link 84-102 ms with it scanned, 14-24 ms frozen). Refcounting still frees it.
    gc.freeze()
    try:
        serve_http(
            app, socks, header_timeout_s=settings.header_timeout_s,
            max_connections=settings.max_connections,
        )  # fmt: skip
    finally:
        if inode is not None and path is not None:
            _unlink_own_socket(path, inode)


def _local_line(settings: Settings, local: socket.socket | None) -> list[str]:
    """The start banner's line on the Unix socket: where local users reach the server."""
    if local is None:
        return []
    who = (
        "a new local user gets an account on first use"
        if settings.register_local_users
        else "local users need an account (`gpuyard admin user add`)"
    )
    return [f"  local users: {settings.socket_path} (no token: the kernel says who; {who})"]


def bind_unix(path: str, *, explicit: bool) -> socket.socket | None:
    """The root server's Unix socket for local users, bound (not yet listening): mode 0666
    (anyone may connect: the kernel says who they are) in a folder only root may write (0755:
    nobody can put another socket in its place). A stale socket (nobody listening) is
    replaced; one a running server holds is an error when asked for (`--socket`), a warning
    for the default (the server then serves TCP only)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=0o755)
        os.chmod(folder, 0o755)  # the server's umask is 077: made 0700 otherwise
    _refuse_foreign(Path(folder), "socket folder")
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise Unavailable(f"{path} exists and is not a socket: remove it, or pick --socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(path)  # stale: its server is gone
        else:
            if explicit:
                raise Unavailable(
                    f"another server listens on {path}: stop it, or pick another --socket"
                )
            logging.getLogger("gpuyard.server").warning(
                "another server listens on %s: local users reach that one", path
            )
            return None
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o666)
    except OSError as exc:
        sock.close()
        raise Unavailable(
            f"cannot listen on {path} ({exc.strerror}): pick another --socket, or --socket off"
        ) from None
    sock.set_inheritable(False)
    return sock


def _unlink_own_socket(path: str, inode: int) -> None:
    """Remove the socket file at close if it is still this server's (not a newer one's)."""
    try:
        if os.lstat(path).st_ino == inode:
            os.unlink(path)
    except OSError:
        pass


def _remote_warning(settings: Settings) -> list[str]:
    """What a server reachable from other machines says first: its API is plain HTTP."""
    if is_loopback(settings.host):
        return []
    return [
        f"WARNING: listening on {settings.host} (--allow-remote): other machines can reach this "
        "server over plain HTTP, so tokens cross the network readable; put TLS in front (a "
        "reverse proxy such as Caddy or nginx on 127.0.0.1, clients on https://)",
    ]


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise Unavailable(
            f"cannot listen on {host}:{port} ({exc.strerror}); is another server running? "
            "pick another --port"
        ) from None
    sock.set_inheritable(False)
    return sock
