"""The Ray backend's wiring: its connection, inventory and executor, and the node watch that
drains a lost machine's GPUs and resumes them when it is back."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuyard.domain.errors import Unavailable
from gpuyard.domain.job import Job
from gpuyard.services.jobs.controller import Controller
from gpuyard.services.jobs.drains import DrainService
from gpuyard.services.machine.joins import MachineJoins
from gpuyard.services.ports import Executor, ExitCallback
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.settings import Settings

log = logging.getLogger("gpuyard.ray")


@dataclass
class RayParts:
    """The Ray backend's connection, machines, node watch and GPU telemetry (`--backend ray`)."""

    connection: Any
    watch: Any
    machines: Any
    telemetry: Any
    book: Any  # the MachineBook: the machines in numbering order, kept across restarts
    known: list[Any]  # what it holds: KnownMachine, in numbering order
    away: list[str]  # machines known from before that are not there at the start
    executor: Any = None  # the AgentExecutor, once made
    # Joins run on threads of their own: one numbers and writes the book at a time.
    joining: threading.Lock = field(default_factory=threading.Lock)


def ray_backend(
    settings: Settings,
) -> tuple[Inventory, Callable[[ExitCallback], Executor], RayParts]:
    """Connect to Ray (or start a local cluster), start every machine's agent, and take the
    GPUs the agents report as the inventory."""
    try:
        from gpuyard.adapters.ray import backend
        from gpuyard.adapters.ray.agent_executor import AgentExecutor
        from gpuyard.adapters.ray.cluster_gpus import ClusterTelemetry
        from gpuyard.adapters.ray.machine_book import KnownMachine, MachineBook, numbered
        from gpuyard.adapters.ray.machines import (
            AgentSettings,
            Machines,
            machine_capacity,
            machine_gpus,
        )
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
    except Exception as exc:  # Ray's own start-up errors are plain Exceptions too
        where = settings.ray_address or "a local cluster"
        raise Unavailable(
            f"cannot use the Ray cluster ({where}): {_first_line(exc)}; Ray's logs: "
            f"{_ray_logs(settings)}; on a busy machine start it again, or raise "
            "RAY_raylet_start_wait_time_s"
        ) from None
    try:
        found = backend.inventory(connection.nodes(), settings.declared_gpu_mem_mib)
        machines = Machines(connection, AgentSettings(
            settings.state_dir, settings.kill_grace_s, settings.gpus,
            settings.declared_gpu_mem_mib, settings.job_cgroups, settings.job_pids_max or None,
        ))  # fmt: skip
        links = machines.start(found.ray_nodes)  # the server's own machine first, then by name
        names = backend.unique_names(found.ray_nodes)
        node_of = {names[n.node_id]: n for n in found.ray_nodes}
        present = [
            KnownMachine(machine_capacity(link, node_of[link.name]), tuple(machine_gpus(link)))
            for link in links
        ]
        book = MachineBook(settings.state_dir)
        known, away = numbered(book.load(), present)  # the numbers of every earlier start
        book.save(known)
        gpus = [gpu for machine in known for gpu in machine.gpus]
        nodes = [machine.node for machine in known]
        for name in away:
            machines.awaited(name)
        where = settings.ray_address or "a local cluster on 127.0.0.1"
        each = ", ".join(f"{link.name}: {link.hello.get('gpu_source')}" for link in links)
        each += "".join(f", {name}: away, waited for" for name in away)
        source = f"{len(gpus)} GPUs on {len(nodes)} machine(s) of {where} ({each})"
        inventory = Inventory(tuple(gpus), nodes[0], source, tuple(nodes[1:]), sharing=True)
        watch = backend.NodeWatch(
            connection, found.ray_nodes, away=away, grace_s=settings.machine_grace_s
        )
        telemetry = ClusterTelemetry(lambda: inventory.gpus, machines.links)
    except Exception as exc:
        connection.close()
        raise Unavailable(
            f"the machines' agents did not start on the Ray cluster: {_first_line(exc)}; "
            f"Ray's logs: {_ray_logs(settings)} (each machine needs gpuyard {_VERSION_HINT})"
        ) from None
    except BaseException:
        connection.close()
        raise
    parts = RayParts(connection, watch, machines, telemetry, book, known, away)

    def make_executor(exits: ExitCallback) -> Executor:
        executor = AgentExecutor(
            machines.links, settings.state_dir / "jobs", exits, lambda: inventory.gpus,
            remake=lambda name: new_agent(parts, name), awaited=away,
        )  # fmt: skip
        for link in machines.links().values():
            executor.start_polling(link)
        parts.executor = executor
        return executor

    return inventory, make_executor, parts


_VERSION_HINT = "installed, the same version, in the Python its raylet runs"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _ray_logs(settings: Settings) -> str:
    """Where Ray's session logs are: the local cluster's in the state dir, else Ray's own."""
    if settings.ray_address:
        return "/tmp/ray/session_latest/logs on each machine"
    return str(settings.state_dir / "ray" / "t" / "session_latest" / "logs")


def new_agent(parts: RayParts, name: str) -> Any:
    """A new agent on machine `name` (its old one died, or the machine is back), if the Ray
    node the watch has for it is alive."""
    node_id = parts.watch.node_ids().get(name)
    node = next((n for n in parts.connection.nodes() if n.node_id == node_id and n.alive), None)
    return None if node is None else parts.machines.connect(name, node)


def machine_joined(parts: RayParts, joins: MachineJoins, name: str, node: Any) -> None:
    """A Ray node of a new name is alive: its agent starts, ends anything still running there
    (nothing the server placed: it never knew the machine), and its GPUs are scheduled from
    the next pass. Raises if its agent does not start (the watch tries again later)."""
    from gpuyard.adapters.ray.machine_book import KnownMachine
    from gpuyard.adapters.ray.machines import machine_capacity, machine_gpus

    link = parts.machines.connect(name, node)
    ended = link.call("fence", [], timeout_s=120)
    if ended:
        log.warning("%s joined: ended job(s) %s left running there", name, ended)
    capacity = machine_capacity(link, node)
    with parts.joining:
        gpus = joins.join(capacity, machine_gpus(link))
        parts.known.append(KnownMachine(capacity, tuple(gpus)))
        parts.book.save(parts.known)  # its numbers hold at every later start
    if parts.executor is not None:
        parts.executor.start_polling(link)


def service_probe(parts: RayParts, job: Job) -> Callable[[str, int, str, float], str | None]:
    """The health check of a service, made by the agent of the machine it runs on."""
    name = job.node.split(",")[0]

    def check(host: str, port: int, path: str, timeout_s: float) -> str | None:
        link = parts.machines.links().get(name)
        if link is None:
            return f"its machine {name} is not answering"
        answer: str | None = link.call("probe", port, path, timeout_s, timeout_s=timeout_s + 10)
        return answer

    return check


def fence_machines(parts: RayParts, running: list[Job]) -> None:
    """At start, before anything is scheduled: each other machine's agent ends every job that
    still runs there but that the database does not place there (it was requeued elsewhere
    while the machine was away)."""
    for name, link in parts.machines.links().items():
        if link.local:
            continue  # the server's own machine: `recover` settles its jobs, as on one box
        keep = [job.id for job in running if name in job.node.split(",")]
        ended = link.call("fence", keep, timeout_s=120)
        if ended:
            log.warning("%s: ended job(s) %s still running there from before", name, ended)


def settle_ray_restart(
    controller: Controller, drains: DrainService, inventory: Inventory, away: list[str]
) -> None:
    """Before the scheduler is rebuilt: drains made by lost Ray nodes are lifted from the
    machines there now; the GPUs of machines away are out of service while they are waited for
    (their jobs stay RUNNING: they end NODE_FAIL only once the grace has passed). The jobs are
    re-adopted by their machines' agents as a one-box server's are (`ServerFacade.start`)."""
    waiting = {gpu for name in away for gpu in inventory.gpus_of(name)}
    for gpu, drain in drains.current().items():
        if drain.source == "ray" and gpu not in waiting:
            drains.resume(gpu)
    current = drains.current()
    for name in away:
        for gpu in inventory.gpus_of(name):
            if gpu not in current:
                drains.drain(gpu, f"machine {name} has not come back since the server started",
                             "ray", keep_jobs=True)  # fmt: skip


def machine_lost(parts: RayParts, drains: DrainService, inventory: Inventory, name: str) -> None:
    """A machine is gone past Ray's grace: its GPUs out of service, its jobs NODE_FAIL."""
    node_lost(drains, inventory, name)
    parts.machines.drop(name)
    if parts.executor is not None:
        parts.executor.machine_lost(name)


def machine_back(parts: RayParts, drains: DrainService, inventory: Inventory, name: str) -> None:
    """A lost machine is back (a new Ray node of its name): a new agent there first ends what
    the server no longer places there, then its GPUs return to service."""
    link = new_agent(parts, name)
    if link is None:
        return
    if parts.executor is not None:
        parts.executor.machine_back(link)
        parts.executor.start_polling(link)
    node_back(drains, inventory, name)


def node_lost(drains: DrainService, inventory: Inventory, name: str) -> None:
    """A Ray node died: its GPUs go out of service (a job still there ends NODE_FAIL)."""
    drained = drains.current()
    for gpu in inventory.gpus_of(name):
        if gpu not in drained:
            drains.drain(gpu, f"Ray node {name} was lost", "ray")


def node_back(drains: DrainService, inventory: Inventory, name: str) -> None:
    """A lost Ray node is back: the GPUs its loss took out of service return."""
    drained = drains.current()
    for gpu in inventory.gpus_of(name):
        drain = drained.get(gpu)
        if drain is not None and drain.source == "ray":
            drains.resume(gpu)
