"""Finding and ending a job's processes when its supervisor can no longer do it.

A job can kill its own supervisor (`kill -9 $PPID`) or stop it (`kill -STOP $PPID`). Its
processes then run on, on GPUs the server is about to give to the next job, so before the
executor reports such an end it finds them itself:

- every process in the supervisor's session (the executor starts the supervisor as a session
  leader, so its session id is the supervisor's pid; the job's process groups stay in it), and
- every process whose environment holds the launch's marker (`GPUYARD_LAUNCH_ID=<token>`, a
  token unique to the launch): processes that left the session with `setsid`.

Only processes of the job's Unix user count, and of the session's only those started no
earlier than the supervisor (a pid cannot be reused while a session with that id lives, and
the start time rules out older ones). The marker needs no such check (no other launch has it),
and must not get one: a start time here is the kernel's boot time in wall-clock terms plus
ticks, and a step of the wall clock moves it, so after a step back the job's processes would
all look older than their supervisor and be left running. Each one is held by a
pidfd from the moment it is found, so a signal never reaches a reused pid. They get the stop
signal, the grace period, then SIGKILL, and the call returns once they are gone.
"""

from __future__ import annotations

import os
import signal
import time

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def boot_time() -> float:
    """When this machine booted (epoch seconds), for /proc start times."""
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    return 0.0


def find_job_processes(
    session_id: int, marker: str | None, since: float, uid: int | None = None
) -> dict[int, int]:
    """`{pid: pidfd}` of the job's processes (see the module docstring), the supervisor
    itself (`session_id`) left out; `since`: the supervisor's start time (epoch s); `uid`:
    the job's user (None: any). The caller closes the pidfds."""
    booted = boot_time()
    needle = f"GPUYARD_LAUNCH_ID={marker}".encode() if marker else None
    found: dict[int, int] = {}
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (me, session_id):
            continue
        pid = int(name)
        try:
            if uid is not None and os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            sid, ticks = int(fields[3]), int(fields[19])
            in_session = sid == session_id and booted + ticks / _CLOCK_TICKS >= since - 1.0
            if not in_session and not (needle and _has_env(pid, needle)):
                continue  # neither of the session since it began nor marked: not the job's
            pidfd = os.pidfd_open(pid)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
        found[pid] = pidfd
    return found


def _has_env(pid: int, needle: bytes) -> bool:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return needle in f.read().split(b"\0")


def end_processes(pidfds: dict[int, int], stop_signal: int, grace_s: float) -> None:
    """Stop signal (and SIGCONT, so a stopped process can act on it), grace, then SIGKILL;
    returns once every one is gone (or 10 s after the SIGKILL). Closes the pidfds."""
    try:
        for sig in (stop_signal, signal.SIGCONT):
            _send(pidfds, sig)
        deadline = time.monotonic() + grace_s
        while _alive(pidfds) and time.monotonic() < deadline:
            time.sleep(0.02)
        deadline = time.monotonic() + 10
        while _alive(pidfds) and time.monotonic() < deadline:
            _send(pidfds, signal.SIGKILL)
            time.sleep(0.02)
    finally:
        for pidfd in pidfds.values():
            os.close(pidfd)


def _send(pidfds: dict[int, int], sig: int) -> None:
    for pidfd in pidfds.values():
        try:
            signal.pidfd_send_signal(pidfd, sig)
        except OSError:
            pass  # already gone


def _alive(pidfds: dict[int, int]) -> bool:
    """Any of them still running (a zombie counts as gone: its parent reaps it)."""
    for pid, pidfd in pidfds.items():
        try:
            signal.pidfd_send_signal(pidfd, 0)
        except ProcessLookupError:
            continue
        if not _is_zombie(pid):
            return True
    return False


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True
