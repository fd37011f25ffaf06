"""A whole server for its settings: the store, executor, GPUs, accounts and background threads
around `build_core` (`build_server`), and the HTTP API over it (`build_app`)."""

from __future__ import annotations

import getpass
import hashlib
import os
import pwd
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from gpuyard import __version__
from gpuyard.adapters.agent.doctoring import ThisMachineDoctor
from gpuyard.adapters.executor.cgroups import JobCgroups, gpu_device_numbers
from gpuyard.adapters.executor.container_runtime import find_container_runtime
from gpuyard.adapters.executor.local import LocalExecutor
from gpuyard.adapters.gpus.processes import PsutilProcessOwners
from gpuyard.adapters.gpus.select import choose_gpus
from gpuyard.adapters.gpus.telemetry import open_gpu_telemetry
from gpuyard.adapters.identity import mapped_identity
from gpuyard.adapters.store.sql import SqlJobStore
from gpuyard.domain.accounts import DEFAULT_TEAM
from gpuyard.domain.job import NodeCapacity
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.access.accounts import AccountService
from gpuyard.services.access.caps import ConnectionCaps
from gpuyard.services.access.front import AccessRules, HostRules
from gpuyard.services.access.peers import PeerAuth
from gpuyard.services.access.tokens import TokenAuth
from gpuyard.services.access.web_sessions import WebSessions
from gpuyard.services.launch.run_as import RunAsPolicy
from gpuyard.services.machine.event_ring import EventSaver
from gpuyard.services.machine.joins import MachineJoins
from gpuyard.services.machine.machines import ThisMachine
from gpuyard.services.machine.telemetry import GpuMonitor
from gpuyard.services.ports import Executor, ExitCallback
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.server import Background, ServerFacade, ServerInfo
from gpuyard.services.store_hold import HoldOutcome, StoreHold
from gpuyard.services.workflows.sweeps import SweepService
from gpuyard.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI
from gpuyard.bootstrap.core import METRICS_TOKEN_FILE, build_core
from gpuyard.bootstrap.ray_wiring import (
    RayParts,
    fence_machines,
    machine_back,
    machine_joined,
    machine_lost,
    ray_backend,
    service_probe,
    settle_ray_restart,
)
from gpuyard.bootstrap.state_dir import (
    closed_to_owners,
    current_umask,
    ensure_token,
    writable_state_dir,
)
from gpuyard.bootstrap.store import open_store, retake_store


def build_server(
    settings: Settings,
    job_umask: int | None = None,
    store: SqlJobStore | None = None,
    on_hold: Callable[[HoldOutcome], None] | None = None,
) -> ServerFacade:
    """The whole server for `settings`: store (locked: one server per database), backend,
    core, telemetry, the API's token. `job_umask`: the umask the server had before it closed
    its own (`serve`), given to the jobs that run as the server's user. `store`: one already
    opened for it (`open_store`: a standby's, which waited for the lock); closed with it.
    `on_hold`: told when the server lost its hold on the database and took it back (a new
    store, to build the server again on) or found it another server's (`serve` does either);
    without it a lost hold is only said (`/healthz`)."""
    state = settings.state_dir
    if store is None:
        writable_state_dir(state)
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
            server_umask=current_umask() if job_umask is None else job_umask,
            closed_to_owners=closed_to_owners(state) if settings.backend == "local" else None,
        )  # fmt: skip
        ray: RayParts | None = None
        if settings.backend == "ray":
            inventory, make_executor, ray = ray_backend(settings)
            closers.append(ray.machines.close)
            closers.append(ray.connection.close)
            fence_machines(ray, [j for j in store.load_active(0) if j.state is JobState.RUNNING])
            confinement = "; ".join(
                f"{name}: {link.hello.get('confinement')}"
                for name, link in ray.machines.links().items()
            )
        else:
            inventory = _local_inventory(settings)
            cgroups = job_cgroups(state / "jobs", settings, inventory)
            confinement = (
                cgroups.describe() if cgroups is not None
                else "none (GPUYARD_JOB_CGROUPS=0): --mem, --cpus and GPU devices are advisory"
            )  # fmt: skip

            def make_executor(exits: ExitCallback) -> Executor:
                reserve = settings.state_disk_reserve_mib
                return LocalExecutor(
                    state / "jobs", exits, grace_s=settings.kill_grace_s, cgroups=cgroups,
                    job_log_max_mib=settings.job_log_max_mib,
                    user_log_max_mib=settings.user_log_max_mib,
                    disk_reserve_mib=None if reserve < 0 else reserve,
                )  # fmt: skip

        core = build_core(
            store.stores(), inventory, make_policy(settings.policy, for_server=True), make_executor,
            settings=settings,
            make_monitor=lambda book: GpuMonitor(
                (lambda: ray.telemetry) if ray is not None
                else lambda: open_gpu_telemetry(inventory.gpus),
                PsutilProcessOwners(), book, inventory,
                period_s=settings.telemetry_s,
            ),
            settle=(
                (lambda c, d: settle_ray_restart(c, d, inventory, ray.away))
                if ray is not None else None
            ),
            identities=identities,
        )  # fmt: skip
    except BaseException:
        for close in closers:
            close()
        store.close()
        raise
    hold = StoreHold(
        store.hold_problem,
        (lambda: retake_store(settings)) if on_hold is not None else None,
        on_hold,
    )
    background: list[Background] = [hold]
    if core.monitor is not None:
        background.append(core.monitor)
    if core.progress is not None:
        background.append(core.progress)
    if core.health is not None:
        background.append(core.health)
    if core.notify is not None:
        core.notify.cache.team_of = lambda name: _team_of(accounts, name)
        core.notify.sender.resume_warnings(core.book.jobs(include_finished=False))
        core.notify.team_exists = lambda team: any(
            t.name == team for t in accounts.teams(auth.principal)
        )
        background.append(core.notify.sender)  # webhooks' sender
    sweeps = SweepService(core.submits, core.verbs, core.desk, store, core.progress)
    background.append(sweeps)  # sweeps' early stop
    if core.monitor is not None and core.monitor.history is not None:
        background.append(core.monitor.history)  # after the sampler: its stop writes the last
    core.gpus.directory = (
        ray.machines if ray is not None else ThisMachine(inventory.node.name, __version__)
    )
    if ray is None:
        core.gpus.doctor = ThisMachineDoctor(inventory.node.name, settings.state_dir, confinement)
    else:
        from gpuyard.adapters.ray.machine_doctor import RayMachineDoctor

        core.gpus.doctor = RayMachineDoctor(ray.machines)
        parts = ray
        parts.watch.on_lost = lambda name: machine_lost(parts, core.drains, inventory, name)
        parts.watch.on_back = lambda name: machine_back(parts, core.drains, inventory, name)
        joins = MachineJoins(
            inventory,
            core.scheduler,
            core.events,
            core.controller.wake,
            monitor=core.monitor,
            drains=core.drains,
        )
        parts.watch.on_join = lambda name, node: machine_joined(parts, joins, name, node)
        if core.health is not None:  # services are asked on their own machine
            core.health.check_through(lambda job: service_probe(parts, job))
        background.append(ray.watch)
    background.append(EventSaver(core.events))  # last: its stop saves what the others told
    return ServerFacade(
        core.controller, auth,
        core.feed, core.metrics, ServerInfo(owner, settings.policy, settings.backend, confinement),
        events=core.events, submits=core.submits, reads=core.reads, verbs=core.verbs,
        gpus=core.gpus, drains=core.drains, scheduler=core.scheduler, limits=core.limits,
        health=core.health, tick_s=settings.tick_s, background=background, hold=hold,
        closers=[core.executor.close, core.scheduler.close, *closers,
                 accounts.flush_last_used, store.close],
        accounts=accounts, progress=core.progress, sweeps=sweeps,
        notify=core.notify,
        access=AccessRules(
            HostRules(settings.host, settings.port, settings.public_names, _machine_names),
            metrics_token=ensure_token(settings.state_dir / METRICS_TOKEN_FILE),
            connections=ConnectionCaps(settings.max_connections_per_user),
        ),
        peers=PeerAuth(
            accounts, auth.principal, os.geteuid(), _unix_name,
            register=settings.register_local_users,
        ) if settings.socket_path is not None else None,
        # Root's own account logs in to the dashboard only when the admin allows it.
        web_sessions=WebSessions(refused_user=(
            owner if os.geteuid() == 0 and not settings.allow_root_dashboard else None
        )),
    )  # fmt: skip


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
        jobs_mem_reserve_mib=settings.jobs_mem_reserve_mib, jobs_pids_max=settings.jobs_pids_max,
        user_pids_max=settings.user_pids_max,
    )  # fmt: skip


def build_app(
    settings: Settings,
    job_umask: int | None = None,
    store: SqlJobStore | None = None,
    on_hold: Callable[[HoldOutcome], None] | None = None,
) -> tuple[ServerFacade, FastAPI]:
    """The server and the HTTP API over it: the only place that calls `create_app`."""
    from gpuyard.api.app import create_app

    server = build_server(settings, job_umask, store, on_hold)
    return server, create_app(server)


def _local_inventory(settings: Settings) -> Inventory:
    gpus, source = choose_gpus(settings.gpus, declared_mem_mib=settings.declared_gpu_mem_mib)
    node = NodeCapacity(
        name=socket.gethostname(),
        cpus=settings.cpus or os.cpu_count() or 1,
        mem_mib=settings.mem_mib or psutil.virtual_memory().total // 2**20,
    )
    return Inventory(tuple(gpus), node, source, container_runtime=find_container_runtime())
