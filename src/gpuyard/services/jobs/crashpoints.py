"""Named crash points: where the chaos tests (tests/chaos) make the server die on purpose.

Random SIGKILLs under load hit most of the server's dangerous moments, but not for certain. A
`crash_point("submit_reply")` call marks one such moment (here: a submit is durable, its reply
not sent yet); it does nothing unless the server was started with `GPUYARD_CRASH_AT` naming
that point, e.g. `GPUYARD_CRASH_AT=submit_reply:3` (SIGKILL the server itself on the third
time it gets there; `:N` may be left out for the first time; several points: comma-separated).

Off (the variable unset: always, outside the chaos tests), a call costs one function call and
one test of a module-level dict that is empty. The variable is read once, at import: a test
arms a point by starting a server process with it.

The points (`POINTS`; grep for `crash_point(` to find them):
- `journal_written`: a job change is in the store, the book and observers not told yet.
- `submit_reply`: a submit is committed, its 201 not sent (the client sees a lost reply).
- `pass_decided`: a scheduling pass has decided, nothing of it recorded yet.
- `start_recorded`: a pass's starts (and preemptions) are durable, no process launched yet.
- `launched`: job processes forked, their pids not recorded yet.
- `preempt_recorded`: a preemption's stop intent is durable, the job not signalled yet.
- `drain_saved`: a GPU's drain is durable, the jobs on it not stopped yet.
"""

from __future__ import annotations

import os
import signal
import threading

ENV_VAR = "GPUYARD_CRASH_AT"
POINTS = (
    "journal_written",
    "submit_reply",
    "pass_decided",
    "start_recorded",
    "launched",
    "preempt_recorded",
    "drain_saved",
)


def parse(value: str) -> dict[str, int]:
    """`name[:N],...` -> {name: N} (N >= 1, default 1); an unknown name is refused, so a
    misspelt point in a test fails loudly instead of never firing."""
    armed: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, _, count = item.partition(":")
        if name not in POINTS:
            raise ValueError(f"{ENV_VAR}: unknown crash point {name!r}; known: {', '.join(POINTS)}")
        armed[name] = max(1, int(count)) if count else 1
    return armed


_armed: dict[str, int] = parse(os.environ.get(ENV_VAR, ""))
_lock = threading.Lock()


def crash_point(name: str) -> None:
    """Die here (SIGKILL, as a power cut or the OOM killer would) if this point is armed and
    this is its Nth hit; otherwise nothing."""
    if _armed:
        _hit(name)


def _hit(name: str) -> None:
    with _lock:
        left = _armed.get(name)
        if left is None:
            return
        if left > 1:
            _armed[name] = left - 1
            return
    os.write(2, f"gpuyard: crash point {name} reached: SIGKILL\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)
