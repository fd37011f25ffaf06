"""Ray as gpuyard's multi-node executor (`gpuyard server --backend ray`).

gpuyard's own scheduler decides which nodes and GPUs a job gets; Ray only carries it out:
`cluster.RayConnection` connects (or starts a loopback-only local cluster) and lists the nodes;
`gang.launch` runs one command per node in a placement group pinned to those nodes and returns a
`GangHandle` (output to one log, outcome, cancel). `node.NodeRunner` is the actor on each node,
`shim.py` the process that guarantees a job's processes die with it.

Importing this package imports Ray (`gang` needs it at import time); only the Ray backend does.
"""

from gpuyard.adapters.ray.cluster import LocalNodeSpec, RayConnection, RayNode
from gpuyard.adapters.ray.gang import (
    GangHandle,
    GangLaunchError,
    GangNode,
    GangOutcome,
    GangResult,
    launch,
)

__all__ = [
    "GangHandle",
    "GangLaunchError",
    "GangNode",
    "GangOutcome",
    "GangResult",
    "LocalNodeSpec",
    "RayConnection",
    "RayNode",
    "launch",
]
