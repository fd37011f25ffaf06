"""The Ray backend's wiring: its connection, inventory and executor, and the node watch that
drains a lost machine's GPUs and resumes them when it is back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuyard.domain.errors import Unavailable
from gpuyard.services.jobs.controller import Controller
from gpuyard.services.jobs.drains import DrainService
from gpuyard.services.ports import Executor, ExitCallback
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.settings import Settings


@dataclass
class RayParts:
    """The Ray backend's connection and node watch (`--backend ray`)."""

    connection: Any
    watch: Any


def ray_backend(
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


def settle_ray_restart(controller: Controller, drains: DrainService) -> None:
    """Before the scheduler is rebuilt: Ray jobs never outlive the server (end them now: the
    cluster may have changed under them), and drains made by lost Ray nodes are lifted (the
    inventory holds only machines alive now, numbered afresh)."""
    controller.recover()
    for gpu, drain in drains.current().items():
        if drain.source == "ray":
            drains.resume(gpu)


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
