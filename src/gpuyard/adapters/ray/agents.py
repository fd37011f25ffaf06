"""The server's links to its machines' agents: the server's own machine in its process, every
other one as a detached Ray actor on that machine.

An agent actor is named `gpuyard-agent-<machine>-<node id>` in gpuyard's namespace,
`lifetime="detached"` (it belongs to no driver: the server's exit, crash or restart leaves it
and its jobs running) and pinned to its Ray node (`NodeAffinitySchedulingStrategy`, not soft:
it never runs anywhere else). An agent whose worker died is made again by the server (not by
Ray's actor restarts, whose pending calls can wait on a restart for long); the new one has a
new `incarnation`, and the server has it re-adopt that machine's jobs.
It holds all of its node's Ray GPUs (`num_gpus` = the node's), so Ray never hands a GPU
gpuyard schedules to anything else on the cluster; gpuyard's scheduler chooses which of them
each job gets. A restarted server finds its agents by name (`get_if_exists`).

`AgentLink.call(method, *args)` is the one way to talk to an agent, whichever kind: a call
that fails because the agent or its machine is gone raises `AgentGone`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import ray

from gpuyard.adapters.agent.machine import MachineAgent

log = logging.getLogger("gpuyard.agents")

NAMESPACE = "gpuyard"
_CALL_TIMEOUT_S = 60.0
_RemoteAgent: Any = None
# One actor made at a time: two threads making agents at once (two machines' agents replaced
# together) once got each other's placement (seen as one machine's telemetry under another's
# GPUs); `Machines.connect` also refuses an agent that answers from the wrong node.
_making = threading.Lock()


class AgentGone(RuntimeError):
    """The agent did not answer: its worker, raylet or machine is gone (for now); `dead`: Ray
    says that actor is gone for good (a new one must be made)."""

    def __init__(self, message: str, dead: bool = False) -> None:
        super().__init__(message)
        self.dead = dead


class AgentLink:
    """How the server calls one machine's agent; `local` is the server's own machine."""

    def __init__(self, name: str, node_id: str, ip: str, target: Any, local: bool) -> None:
        self.name = name
        self.node_id = node_id
        self.ip = ip
        self.local = local
        self._target = target  # a MachineAgent (local) or its actor handle
        self.hello: dict[str, Any] = {}
        self.last_heard = 0.0  # time.time() of its last answer

    def call(self, method: str, *args: Any, timeout_s: float = _CALL_TIMEOUT_S) -> Any:
        if self.local:
            return getattr(self._target, method)(*args)
        try:
            return ray.get(getattr(self._target, method).remote(*args), timeout=timeout_s)
        except ray.exceptions.RayTaskError:
            raise  # the agent's own error (a bad request): not a lost machine
        except (ray.exceptions.RayError, SystemExit) as exc:
            why = f"the agent of {self.name} did not answer ({type(exc).__name__})"
            raise AgentGone(why, isinstance(exc, ray.exceptions.ActorDiedError)) from exc


def local_link(name: str, agent: MachineAgent) -> AgentLink:
    return AgentLink(name, "", "127.0.0.1", agent, local=True)


def actor_link(
    name: str, node_id: str, ip: str, ray_gpus: int, agent_args: tuple[Any, ...],
    agent_kwargs: dict[str, Any],
) -> AgentLink:  # fmt: skip
    """The agent actor of Ray node `node_id` (made if it is not there yet)."""
    global _RemoteAgent
    with _making:
        if _RemoteAgent is None:
            _RemoteAgent = ray.remote(MachineAgent)
        strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
            node_id, soft=False
        )
        handle = _make(strategy, name, node_id, ray_gpus, agent_args, agent_kwargs)
    return AgentLink(name, node_id, ip, handle, local=False)


def _make(
    strategy: Any, name: str, node_id: str, ray_gpus: int, agent_args: tuple[Any, ...],
    agent_kwargs: dict[str, Any],
) -> Any:  # fmt: skip
    return _RemoteAgent.options(
        name=f"gpuyard-agent-{name}-{node_id[:12]}",
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        scheduling_strategy=strategy,
        num_cpus=0,
        num_gpus=ray_gpus,
        max_restarts=0,
        max_task_retries=0,
        max_concurrency=32,
    ).remote(*agent_args, **agent_kwargs)


def kill_actor(link: AgentLink) -> None:
    """End an agent actor for good (a machine removed from the cluster); its jobs run on."""
    if not link.local:
        try:
            ray.kill(link._target, no_restart=True)
        except Exception:
            pass
