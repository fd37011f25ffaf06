"""Reading a supervisor's `status.json` without trusting it.

While a job runs as the server's Unix user it can write anything its supervisor can: its own
`status.json` (an end before its start, a string for an exit code) and then kill its supervisor.
So what the file says is checked before it counts:

- every field has its type (an exit code is an int in 0..255 or null, a signal an int in
  1..64 or null, the flags booleans, the end time a finite number, the bytes the log lost to
  a full disk a non-negative int), or the whole status is
  garbage and the job counts as lost (FAILED SupervisorLost), never COMPLETED;
- the end time is clamped to [the job's start, now]: a forged 1970, or a clock stepped back,
  can never put an end before a start (the scheduler's restart replay depends on that order);
- a status found while the supervisor that wrote it was seen killed (not exited 0) is ignored
  by the executor altogether (see `local.py`).

Where the job runs as another user (run-as), the job folder is in the server's 0700 state
directory and the job cannot reach the file at all; the checks stay, as the second guard.

Worked example: `{"exit_code": 0, "signal": null, "timed_out": false, "ended_at": 0}` for a
job started at t=1000, read at t=1060 -> ExitStatus(exit_code=0, ended_at=1000.0);
`{"exit_code": "0", ...}` -> None (lost).
"""

from __future__ import annotations

import json
import math
from typing import Any

from gpuyard.services.ports import ExitStatus

_MAX_SIGNAL = 64
# The store's column is a 32-bit INTEGER (PostgreSQL's int4): a count past it is clamped.
MAX_DROPPED_BYTES = 2**31 - 1


def parse_status(text: str, started_at: float | None, now: float) -> ExitStatus | None:
    """The status a supervisor recorded, checked and clamped; None if it is not one."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: `[[[[...` deeper than Python goes
        return None
    if not isinstance(data, dict):
        return None
    code = data.get("exit_code")
    sig = data.get("signal")
    ended_at = data.get("ended_at")
    flags = [data.get("timed_out"), data.get("stop_requested", False)]
    if not (_int_in(code, 0, 255) and _int_in(sig, 1, _MAX_SIGNAL)):
        return None
    if (code is None) == (sig is None) or not all(isinstance(f, bool) for f in flags):
        return None  # exactly one of them says how it ended
    if not isinstance(ended_at, int | float) or isinstance(ended_at, bool):
        return None
    if not math.isfinite(ended_at):
        return None
    dropped = data.get("log_dropped_bytes", 0)  # bytes a full log disk lost (older: none)
    if dropped is None or not _int_in(dropped, 0, 2**63):
        return None
    low = started_at if started_at is not None else -math.inf
    rss, cpu = data.get("max_rss_kib"), data.get("cpu_time_s")  # older statuses: neither
    return ExitStatus(
        exit_code=code,
        signal=sig,
        timed_out=flags[0],
        ended_at=min(max(float(ended_at), low), now),
        stop_requested=flags[1],
        log_dropped_bytes=min(dropped, MAX_DROPPED_BYTES),
        max_rss_kib=rss if rss is not None and _int_in(rss, 0, 2**53) else None,
        cpu_time_s=float(cpu) if cpu is not None and _seconds(cpu) else None,
    )


def _seconds(value: Any) -> bool:
    """A finite, non-negative number of seconds (not a bool)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return ok and math.isfinite(value) and value >= 0


def _int_in(value: Any, low: int, high: int) -> bool:
    """None, or an int (not a bool) within [low, high]."""
    if value is None:
        return True
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
