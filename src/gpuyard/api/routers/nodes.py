"""/api/v1/nodes: the machines, as Slurm's `sinfo -N` shows nodes."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter

from gpuyard.api.deps import Actor, Server
from gpuyard.schemas.v1 import NodeDoctorOut, NodeOut

router = APIRouter(prefix="/api/v1/nodes", tags=["gpus"])


@router.get("")
def list_nodes(server: Server, actor: Actor) -> list[NodeOut]:
    """Every machine: its state, GPUs (total, in use, drained, types), CPUs, memory, agent."""
    return [
        NodeOut(**{**asdict(view), "gpu_types": list(view.gpu_types)})
        for view in server.gpus.machines()
    ]


@router.get("/{name}/doctor")
def node_doctor(name: str, server: Server, actor: Actor) -> NodeDoctorOut:
    """`gpuyard doctor --node NAME`: that machine's doctor facts, gathered there by its agent
    (admins only: they name its paths); the CLI judges them as it judges its own machine's."""
    return NodeDoctorOut(node=name, facts=server.gpus.doctor_facts(name, actor))
