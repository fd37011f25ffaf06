"""Which job a GPU process belongs to: walk up its parents (psutil) to a job's supervisor."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import psutil

_START_TIME_TOLERANCE_S = 1.0  # as the executor: a reused pid never passes for a supervisor
_MAX_DEPTH = 64


class PsutilProcessOwners:
    """ProcessOwners over /proc. The supervisor is a child subreaper, so every process a job
    starts, even one that left its process group, stays below it."""

    def owners(
        self, pids: Collection[int], supervisors: Mapping[int, tuple[int, float | None]]
    ) -> dict[int, int]:
        found: dict[int, int] = {}
        for pid in pids:
            job_id = _owner(pid, supervisors)
            if job_id is not None:
                found[pid] = job_id
        return found


def _owner(pid: int, supervisors: Mapping[int, tuple[int, float | None]]) -> int | None:
    current = pid
    try:
        for _ in range(_MAX_DEPTH):
            if current in supervisors:
                job_id, started_at = supervisors[current]
                created = float(psutil.Process(current).create_time())
                if started_at is None or abs(created - started_at) < _START_TIME_TOLERANCE_S:
                    return job_id
                return None
            if current <= 1:
                return None
            current = psutil.Process(current).ppid()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return None
