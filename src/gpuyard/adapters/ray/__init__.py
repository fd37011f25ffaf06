"""Ray as gpuyard's cluster (`gpuyard server --backend ray`).

gpuyard's own scheduler decides which machines and GPUs a job gets; Ray gives the cluster
(membership, liveness, actor placement, calls, token auth): `cluster.RayConnection` connects
(or starts a loopback-only local cluster) and lists the nodes; `machines.Machines` keeps one
agent per machine (`agents.py`: in the server's process for its own machine, a detached actor
elsewhere; the agent is `adapters/agent/machine.py`); `agent_executor.AgentExecutor` runs each
job's part on its machines through them, `mirror.py` copies their logs and progress to the
server, `cluster_gpus.py` reads every machine's GPUs.

The names below are imported on first use: every Ray worker that hosts an agent imports this
package to unpickle it, and must not pay for what it does not use. Using them imports Ray;
only the Ray backend does.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"LocalNodeSpec": "cluster", "RayConnection": "cluster", "RayNode": "cluster"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


__all__ = ["LocalNodeSpec", "RayConnection", "RayNode"]
