"""`gpuyard doctor --node` on a Ray cluster: the named machine's agent gathers its facts
(`MachineAgent.doctor_facts`); the server's own machine's agent answers in the server's
process, every other one as its actor."""

from __future__ import annotations

from typing import Any

import ray

from gpuyard.adapters.ray.agents import AgentGone
from gpuyard.adapters.ray.machines import Machines
from gpuyard.services.ports import MachineNotAnswering

DOCTOR_TIMEOUT_S = 60.0


class RayMachineDoctor:
    """The MachineDoctor of a Ray server."""

    def __init__(self, machines: Machines) -> None:
        self._machines = machines

    def doctor_facts(self, name: str) -> dict[str, Any] | None:
        link = self._machines.links().get(name)
        if link is None:
            if name in self._machines.statuses():
                raise MachineNotAnswering("its agent is not answering (lost)")
            return None
        try:
            facts: dict[str, Any] = link.call("doctor_facts", timeout_s=DOCTOR_TIMEOUT_S)
        except AgentGone as exc:
            raise MachineNotAnswering(str(exc)) from exc
        except ray.exceptions.RayTaskError as exc:  # the agent's own error
            cause = getattr(exc, "cause", None)
            cause = cause if isinstance(cause, MachineNotAnswering) else exc
            raise MachineNotAnswering(str(cause).splitlines()[0][:300]) from exc
        return facts
