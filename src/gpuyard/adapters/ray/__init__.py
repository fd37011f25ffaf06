"""Ray as gpuyard's multi-node executor (`gpuyard server --backend ray`).

gpuyard's own scheduler decides which nodes and GPUs a job gets; Ray only carries it out:
`cluster.RayConnection` connects (or starts a loopback-only local cluster) and lists the nodes;
`gang.launch` runs one command per node in a placement group pinned to those nodes and returns a
`GangHandle` (output to one log, outcome, cancel). `node.NodeRunner` is the actor on each node;
it runs the node's command under the same supervisor as a local job, which guarantees that a
job's processes die with it.

The names below are imported on first use: every Ray worker that hosts a node actor imports
this package to unpickle `NodeRunner`, and must not pay for `cluster` and `gang` (≈ 20 ms of a
job's start). Using them imports Ray; only the Ray backend does.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "LocalNodeSpec": "cluster", "RayConnection": "cluster", "RayNode": "cluster",
    "GangHandle": "gang_handle", "GangLaunchError": "gang", "GangNode": "gang_handle",
    "GangOutcome": "gang_handle", "GangResult": "gang_handle", "launch": "gang",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


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
