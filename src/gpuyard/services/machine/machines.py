"""The machines of the server as `sinfo` shows nodes: each machine's state, its GPUs (total,
in use, drained, their types), CPUs, memory, and its agent (version, when last heard).

A machine's state, Slurm's words: `down` (its agent is not answering: lost past the grace or
not back yet), `drain` (every GPU out of service), `alloc` (every GPU in use), `mix` (some),
`idle` (none). A machine without GPUs is `idle` or `alloc` by its running jobs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuyard.domain.job import Job
from gpuyard.services.ports import MachineStatus
from gpuyard.services.scheduler.inventory import Inventory


@dataclass(frozen=True, slots=True)
class MachineView:
    """One machine as `gpuyard nodes` lists it."""

    name: str
    state: str
    gpus: int
    gpus_used: int
    gpus_drained: int
    gpu_types: tuple[str, ...]
    cpus: int
    cpus_used: int
    mem_mib: int
    jobs: int
    agent_version: str
    last_heard: float | None
    alive: bool


def machine_views(
    inventory: Inventory,
    running: Sequence[Job],
    drained: set[int],
    agents: Mapping[str, MachineStatus],
) -> list[MachineView]:
    """Every machine of the inventory, in its order."""
    views = []
    for node in inventory.nodes:
        gpus = [g for g in inventory.gpus if g.index in set(inventory.gpus_of(node.name))]
        mine = [j for j in running if node.name in j.node.split(",")]
        indices = {g.index for g in gpus}
        used = {i for j in mine for i in j.gpus if i in indices}
        out = {g.index for g in gpus if g.index in drained}
        cpus_used = sum(-(-j.spec.cpus // max(1, len(j.node.split(",")))) for j in mine)
        status = agents.get(node.name)
        alive = status.alive if status is not None else True
        views.append(MachineView(
            node.name, _state(alive, len(gpus), len(used - out), len(out), bool(mine)),
            len(gpus), len(used), len(out), tuple(sorted({g.name for g in gpus})),
            node.cpus, min(cpus_used, node.cpus), node.mem_mib, len(mine),
            status.version if status is not None else "", status.last_heard if status else None,
            alive,
        ))  # fmt: skip
    return views


def _state(alive: bool, gpus: int, used: int, drained: int, busy: bool) -> str:
    if not alive:
        return "down"
    if gpus and drained == gpus:
        return "drain"
    if not gpus:
        return "alloc" if busy else "idle"
    if used + drained >= gpus and used:
        return "alloc"
    return "mix" if used else "idle"


class ThisMachine:
    """The MachineDirectory of a one-box server: its one machine, answering while it serves."""

    def __init__(self, name: str, version: str) -> None:
        self._name = name
        self._version = version

    def statuses(self) -> dict[str, MachineStatus]:
        return {self._name: MachineStatus(True, self._version, time.time())}
