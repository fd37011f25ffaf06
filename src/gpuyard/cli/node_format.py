"""`gpuyard nodes`: the machines in Slurm's `sinfo -N -l` manner (one row a machine)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gpuyard.cli.render import table
from gpuyard.domain.units import format_size_mib


def node_rows(nodes: Sequence[dict[str, Any]], now: float | None = None) -> str:
    """NODE STATE GPUS (used/total, drained) GPU_TYPES CPUS (used/total) MEMORY JOBS AGENT
    LAST_HEARD."""
    now = time.time() if now is None else now
    rows = [
        [
            n["name"], n["state"],
            f"{n['gpus_used']}/{n['gpus']}" + (f" ({n['gpus_drained']} drained)"
                                                if n["gpus_drained"] else ""),
            ",".join(n["gpu_types"]) or "-",
            f"{n['cpus_used']}/{n['cpus']}",
            format_size_mib(n["mem_mib"]),
            str(n["jobs"]),
            n["agent_version"] or "-",
            _ago(n.get("last_heard"), now),
        ]
        for n in nodes
    ]  # fmt: skip
    header = ["NODE", "STATE", "GPUS", "GPU_TYPES", "CPUS", "MEMORY", "JOBS", "AGENT", "HEARD"]
    return table(header, rows)


def _ago(at: float | None, now: float) -> str:
    if not at:
        return "-"
    return f"{max(0, round(now - at))}s ago"
