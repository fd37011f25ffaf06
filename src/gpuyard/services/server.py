"""What the API serves: the services of one running server, typed by services and ports only
(the API never sees bootstrap, settings or an adapter)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Protocol

from gpuyard.services.access.accounts import AccountService
from gpuyard.services.access.front import AccessRules
from gpuyard.services.access.peers import PeerAuth
from gpuyard.services.access.quotas import LimitService
from gpuyard.services.access.tokens import TokenAuth
from gpuyard.services.access.web_sessions import WebSessions
from gpuyard.services.jobs.change_feed import ChangeFeed
from gpuyard.services.jobs.controller import Controller
from gpuyard.services.jobs.drains import DrainService
from gpuyard.services.jobs.reads import JobReads
from gpuyard.services.jobs.submit import JobSubmits
from gpuyard.services.jobs.verbs import JobVerbs
from gpuyard.services.launch.service_check import ServiceHealth
from gpuyard.services.machine.event_ring import EventLog
from gpuyard.services.machine.gpu_stream import GpuSampler
from gpuyard.services.machine.gpus import GpuDesk
from gpuyard.services.metrics import QueueMetrics
from gpuyard.services.scheduler.live import LiveScheduler
from gpuyard.services.store_hold import StoreHold
from gpuyard.services.workflows.notify import NotifyService
from gpuyard.services.workflows.progress import ProgressService
from gpuyard.services.workflows.sweeps import SweepService


class Background(Protocol):
    """A thread of the server's (GPU sampling, the Ray node watch)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What `GET /api/v1/info` tells about the server."""

    owner: str
    policy: str
    backend: str
    # How jobs are held to their --mem, --cpus and GPUs (cgroups), or why they are not.
    confinement: str = ""


@dataclass
class ServerFacade:
    """One server process's services, ready for the API: start once, close once."""

    controller: Controller
    auth: TokenAuth
    feed: ChangeFeed
    metrics: QueueMetrics
    info: ServerInfo
    # The events page's ring, told by the journal, the drains and the telemetry (build_core).
    events: EventLog
    _: KW_ONLY
    # The use cases on jobs (services/jobs/): submit (and dry run), read, the verbs.
    submits: JobSubmits
    reads: JobReads
    verbs: JobVerbs
    # The GPUs as shown and drained by admins (machine/gpus.py), the drains in force, and the
    # live scheduler (pending jobs' reasons and estimated starts, GPUs placed last when hot).
    gpus: GpuDesk
    drains: DrainService
    scheduler: LiveScheduler
    # Quotas, shares and usage (None: a store without their tables, e.g. a test's).
    limits: LimitService | None = None
    # Services' health checks (`serve --health`), read by a job's record (None: not checked).
    health: ServiceHealth | None = None
    tick_s: float = 1.0
    background: Sequence[Background] = ()
    # Run in order at close, after the threads stopped: the executor, the Ray connection, the
    # store, the server's lock.
    closers: Sequence[Callable[[], object]] = field(default_factory=list)
    # Accounts, teams and tokens (None: a server built without them, e.g. by a test rig).
    accounts: AccountService | None = None
    # Host/Origin rules, the failed-authentication throttle, the metrics token (front door).
    access: AccessRules = field(default_factory=AccessRules)
    # Who a caller on the root server's Unix socket is, from the kernel (None: no socket).
    peers: PeerAuth | None = None
    # Jobs' progress and metric series (None: a server built without it, e.g. by a test rig).
    progress: ProgressService | None = None
    # Webhooks: settings, deliveries, the delivery log (None: a server built without them).
    notify: NotifyService | None = None
    # Sweeps and their early stop (None: a server built without them, e.g. by a test rig).
    sweeps: SweepService | None = None
    # The dashboard's sessions (in memory: a restart logs every browser out).
    web_sessions: WebSessions = field(default_factory=WebSessions)
    # The GPU stream's one sampler, for every open dashboard.
    gpu_sampler: GpuSampler = field(default_factory=GpuSampler)
    # Whether the server may write its database now (`/healthz`; None: not watched, e.g. a
    # test rig's), and its taking the database back (services/store_hold.py).
    hold: StoreHold | None = None

    def start(self) -> None:
        self.controller.recover()
        self.controller.start(self.tick_s)
        self.controller.wake()
        for thread in self.background:
            thread.start()

    def close(self) -> None:
        """Stop serving; running jobs keep running under their supervisors, on every machine
        (a restarted server re-adopts them)."""
        for thread in self.background:
            thread.stop()
        self.controller.stop()
        for close in self.closers:
            close()
