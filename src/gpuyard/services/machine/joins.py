"""A machine that joins a running cluster: its GPUs are scheduled from the next pass, without a
restart.

The backend (the Ray node watch) finds the new machine and its agent's GPUs; this service
numbers them after every GPU the server knows (indices only ever grow, so no running job's GPU
numbers move), adds the machine to the one shared inventory, tells the scheduler (an inbox
event: the pass adds its nodes to the policy's cluster), starts sampling its GPUs and says so
on the events page. One join at a time: the numbering reads the inventory it then extends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from gpuyard.domain.job import Gpu, NodeCapacity
from gpuyard.services.jobs.drains import DrainService
from gpuyard.services.machine.event_ring import NODE_JOIN, EventLog
from gpuyard.services.machine.telemetry import GpuMonitor
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler

log = logging.getLogger("gpuyard.machines")


class MachineJoins:
    """Adds machines to a running server's inventory and scheduler."""

    def __init__(
        self,
        inventory: Inventory,
        scheduler: LiveScheduler,
        events: EventLog,
        wake: Callable[[], object],
        monitor: GpuMonitor | None = None,
        drains: DrainService | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._inventory = inventory
        self._drains = drains
        self._scheduler = scheduler
        self._events = events
        self._wake = wake
        self._monitor = monitor
        self._clock = clock
        self._lock = threading.Lock()

    def join(self, node: NodeCapacity, gpus: Sequence[Gpu]) -> list[Gpu]:
        """Machine `node` with its `gpus` (in its own order) is the server's from now on, its
        GPUs under the server's next indices. Returns its GPUs as numbered."""
        with self._lock:
            if any(known.name == node.name for known in self._inventory.nodes):
                raise ValueError(f"machine {node.name} is already one of the server's")
            first = len(self._inventory.gpus)
            gpus = [replace(gpu, index=first + i, node=node.name) for i, gpu in enumerate(gpus)]
            machine = self._inventory.add_machine(node, gpus)
            self._scheduler.joined(machine, node, gpus, self._clock())
            if self._drains is not None:
                self._drains.machine_joined(gpus)  # a drain kept from its earlier life
        if self._monitor is not None:
            if self._monitor.history is not None:  # its charts, from its first sample
                self._monitor.history.add_gpus({g.index: g.uuid for g in gpus if g.detected})
            self._monitor.machines_changed()
        what = f"{len(gpus)} GPU(s)" if gpus else "no GPUs"
        self._events.add(
            NODE_JOIN, f"machine {node.name} joined: {what}, {node.cpus} CPUs, "
            f"{node.mem_mib} MiB", at=self._clock(),
        )  # fmt: skip
        log.info("machine %s joined with %s", node.name, what)
        self._wake()
        return gpus
