"""The cluster's machines as the server sees them: one agent link per alive Ray node, and the
inventory their agents report.

The server's own machine (the Ray node its driver runs on) gets an in-process agent whose
folder is the server's state dir, so its jobs' folders are where a one-box server keeps them;
every other machine an agent actor (`agents.py`) whose folder is `GPUYARD_AGENT_DIR` on that
machine, else `<state dir>/machines/<name>` there. Each agent detects its machine's GPUs
(NVML/amdsmi, `--gpus`); a machine where none is detected declares the GPUs Ray lists for it.
The server numbers all GPUs across machines, head first; each keeps its machine's name and
its device index there (what CUDA_VISIBLE_DEVICES names on that machine).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray

from gpuyard.adapters.agent.machine import MachineAgent
from gpuyard.adapters.ray.agents import AgentGone, AgentLink, actor_link, kill_actor, local_link
from gpuyard.adapters.ray.backend import unique_names
from gpuyard.adapters.ray.cluster import RayConnection, RayNode
from gpuyard.domain.job import Gpu, NodeCapacity
from gpuyard.services.ports import MachineStatus

log = logging.getLogger("gpuyard.machines")

_HELLO_TIMEOUT_S = 120.0  # a new agent's first answer (a Ray worker to start, on a busy machine)


@dataclass(frozen=True)
class AgentSettings:
    """What every agent is made with (the server's settings that concern a machine)."""

    state_dir: Path
    grace_s: float
    gpus: str = "auto"
    declared_gpu_mem_mib: int | None = None
    job_cgroups: bool = True
    pids_max: int | None = 16384


class Machines:
    """Machine name -> its agent link, for the machines alive now (thread-safe)."""

    def __init__(self, connection: RayConnection, settings: AgentSettings) -> None:
        self._conn = connection
        self._settings = settings
        self._links: dict[str, AgentLink] = {}
        self._gone: dict[str, MachineStatus] = {}  # machines lost, as last heard
        self._lock = threading.Lock()
        self.head_node_id = str(ray.get_runtime_context().get_node_id())

    def links(self) -> dict[str, AgentLink]:
        with self._lock:
            return dict(self._links)

    def start(self, nodes: list[RayNode]) -> list[AgentLink]:
        """An agent for each of `nodes` (alive ones), the head first; each has said hello."""
        names = unique_names(nodes)
        # The server's own machine first, then by name: the same numbering at every start.
        ordered = sorted(nodes, key=lambda n: (n.node_id != self.head_node_id, names[n.node_id]))
        made = [self.connect(names[n.node_id], n) for n in ordered]
        return made

    def connect(self, name: str, node: RayNode) -> AgentLink:
        """The agent of `node` under machine name `name` (made if needed), after its hello."""
        s = self._settings
        server_jobs = str(s.state_dir / "jobs")
        kwargs: dict[str, Any] = {
            "grace_s": s.grace_s, "gpus": s.gpus, "declared_gpus": node.gpus,
            "declared_gpu_mem_mib": s.declared_gpu_mem_mib, "job_cgroups": s.job_cgroups,
            "pids_max": s.pids_max,
        }  # fmt: skip
        if node.node_id == self.head_node_id:
            link = local_link(name, MachineAgent(name, str(s.state_dir), server_jobs, **kwargs))
        else:
            root = str(s.state_dir / "machines" / name)
            link = actor_link(name, node.node_id, node.ip, node.gpus,
                              (name, root, server_jobs), kwargs)  # fmt: skip
        link.hello = link.call("hello", timeout_s=_HELLO_TIMEOUT_S)
        link.last_heard = time.time()
        landed = link.hello.get("ray_node_id")
        if not link.local and landed != node.node_id:  # never a machine's jobs on another
            kill_actor(link)  # so the next try makes one where it belongs
            raise RuntimeError(f"the agent of {name} answered from Ray node {landed}")
        with self._lock:
            self._links[name] = link
            self._gone.pop(name, None)
        log.info("machine %s: agent %s, %s", name, link.hello.get("version"),
                 link.hello.get("gpu_source"))  # fmt: skip
        return link

    def drop(self, name: str) -> AgentLink | None:
        with self._lock:
            link = self._links.pop(name, None)
            if link is not None:
                self._gone[name] = MachineStatus(
                    False, str(link.hello.get("version", "")), link.last_heard or None
                )
            return link

    def awaited(self, name: str) -> None:
        """A machine known from an earlier start that is not there: listed as not answering
        until it is back (`connect`)."""
        with self._lock:
            if name not in self._links:
                self._gone[name] = MachineStatus(False, "", None)

    def statuses(self) -> dict[str, MachineStatus]:
        """Each machine's agent: answering (its link is held) or lost, version, last heard."""
        with self._lock:
            out = dict(self._gone)
            for name, link in self._links.items():
                out[name] = MachineStatus(
                    True, str(link.hello.get("version", "")), link.last_heard or None
                )
            return out

    def close(self) -> None:
        """The in-process agent stops watching; the actors stay (their jobs run on)."""
        for link in self.links().values():
            if link.local:
                link.call("close")

    def retire(self, name: str) -> None:
        """A machine removed for good: its agent actor is ended."""
        link = self.drop(name)
        if link is not None:
            kill_actor(link)


def machine_gpus(link: AgentLink) -> list[Gpu]:
    """One machine's GPUs as its agent reported them, in its own order: each keeps its
    machine's name and its device index there (what CUDA_VISIBLE_DEVICES names). The server
    numbers them across the cluster (`machine_book.numbered`, `MachineJoins`)."""
    out: list[Gpu] = []
    for gpu in link.hello.get("gpus", []):
        uuid = gpu.uuid if gpu.detected else f"{link.name}/gpu{gpu.index}"
        device = gpu.index if gpu.device_index is None else gpu.device_index
        out.append(replace(gpu, node=link.name, uuid=uuid, device_index=device))
    return out


def machine_capacity(link: AgentLink, node: RayNode) -> NodeCapacity:
    """A machine's CPUs and memory as Ray offers them (what the admin gave its raylet)."""
    return NodeCapacity(link.name, max(1, node.cpus), node.mem_mib or link.hello.get("mem_mib", 0))


def answered(link: AgentLink) -> bool:
    try:
        link.call("hello", timeout_s=10)
        return True
    except AgentGone:
        return False
