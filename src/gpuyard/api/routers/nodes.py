"""/api/v1/nodes: the machines, as Slurm's `sinfo -N` shows nodes."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter

from gpuyard.api.deps import Actor, Server
from gpuyard.schemas.v1 import NodeOut

router = APIRouter(prefix="/api/v1/nodes", tags=["gpus"])


@router.get("")
def list_nodes(server: Server, actor: Actor) -> list[NodeOut]:
    """Every machine: its state, GPUs (total, in use, drained, types), CPUs, memory, agent."""
    return [
        NodeOut(**{**asdict(view), "gpu_types": list(view.gpu_types)})
        for view in server.gpus.machines()
    ]
