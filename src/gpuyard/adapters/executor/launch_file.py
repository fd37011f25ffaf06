"""The per-job launch file: what a supervisor (`supervisor.py`) is told to do.

Written by the executor into the job's folder as `launch.json`, mode 0600 (it holds the job's
environment, which may carry the user's secrets), read once by the supervisor at its start.
A file rather than positional argv: it has room for run-as, the stop signal, cgroups and the
rest without a new calling convention each time, and the job's environment never passes through
the supervisor's own environment (which would load an `LD_PRELOAD` into the supervisor).

Fields (`version` 1):
    argv, env, workdir        the job's command, its whole environment, where it runs (its
                              GPUYARD_RESTART_COUNT: which run of the job the file launched;
                              a restarted server tells an earlier run's leftovers by it)
    time_limit_s              0: none; else the supervisor stops the job at this age
    warn_signal, warn_before_s  `--signal SIG@SECONDS`: `warn_signal` once to the job
                              `warn_before_s` before the time limit (0: none); both
                              on the supervisor's monotonic interval timer
    warn_target               who gets it: "all" (every process), "steps" (every process but
                              the batch shell, the job's main process: Slurm's --signal
                              without B:), "batch" (the batch shell alone: B:); absent: all
    grace_s, stop_signal      stop = `stop_signal` to the tree, `grace_s`, then SIGKILL
    run_as                    null, or {user, uid, gid, groups, home, shell}: the identity the
                              job takes before chdir and exec
    cgroups                   the job's control groups (folders; `cgroups.py`): the job joins
                              each before it drops its privileges; [] or absent: none
    log_path                  the job's log (appended): the supervisor copies the job's
                              stdout and stderr (one pipe) there, dropping and counting what a
                              full disk refuses
    log_room_bytes,           what the log may still grow by (-1: no budget) and the free
    disk_reserve_bytes        space of the state disk it never takes (0: none); past either the
                              rest of the run's output is cut, after one line saying so
    status_path               where the supervisor records the end
    output_file, error_file   sbatch's -o and -e, expanded (`domain/output_paths.py`), absolute:
                              the job's stdout (and stderr, without -e) and its stderr are
                              also appended there; opened by the supervisor with the job's
                              user's identity (one that cannot be opened: the job does not
                              run, exit 127 with the reason in its log); absent: none
    output_folders            the folders of those files named by a pattern (`logs/%j/`), made
                              first by the supervisor with the same identity, outermost
                              first (`domain/output_paths.py` job_folders); absent: none
    pty, attach_path,         an interactive job (`gpuyard run`): the job gets a pty (its
    attach_timeout_s          controlling terminal) and the supervisor relays it to clients
                              of the Unix socket `attach_path` (frames: `supervisor_pty.py`);
                              its program runs once a client is there, and never if none
                              comes within `attach_timeout_s` (exit 127, LaunchFailed)
    marker                    a random token, also put in the job's environment as
                              GPUYARD_LAUNCH_ID: how the executor finds the job's processes
                              after its supervisor is lost (`tree.py`)

Beside it, `stop_signal` (a number as text, written whole by the executor just before it
sends the supervisor SIGTERM, removed at each launch): the signal a `cancel --signal` asked
for, instead of the launch's.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuyard.services.ports import LaunchPlan

LAUNCH_FILE = "launch.json"
STOP_SIGNAL_FILE = "stop_signal"  # supervisor.py reads it by this name (it imports nothing)
_MAX_LAUNCH_FILE = 64 << 20  # read back at most this much (the job may have grown the file)
MARKER_VAR = "GPUYARD_LAUNCH_ID"
RUN_VAR = "GPUYARD_RESTART_COUNT"  # in `env`: which run of the job the file launched


def new_marker() -> str:
    """A token no other launch shares (also across servers on one machine)."""
    return os.urandom(12).hex()


def launch_instructions(
    plan: LaunchPlan, jobdir: Path, grace_s: float, marker: str, **fields: Any
) -> dict[str, Any]:
    """The launch file's content for `plan`, plus the executor's own `fields` (cgroups, the
    job's -o/-e and pty, the log's budgets)."""
    instructions: dict[str, Any] = {
        "version": 1,
        "argv": list(plan.argv),
        "env": {**plan.env, MARKER_VAR: marker},
        "workdir": plan.workdir,
        "time_limit_s": plan.time_limit_s or 0,
        "grace_s": grace_s,
        "stop_signal": plan.stop_signal,
        "warn_signal": plan.warn_signal,
        "warn_before_s": plan.warn_before_s,
        "warn_target": plan.warn_target,
        "run_as": None if plan.run_as is None else asdict(plan.run_as),
        "log_path": plan.log_path,
        "status_path": str(jobdir / "status.json"),
        "marker": marker,
    }
    instructions.update(fields)
    return instructions


def write_launch_file(jobdir: Path, instructions: dict[str, Any]) -> None:
    """`jobdir/launch.json`, mode 0600 from its creation (no moment where others may read)."""
    path = jobdir / LAUNCH_FILE
    path.unlink(missing_ok=True)  # an earlier run's: O_CREAT would keep its mode
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(instructions, f)


@dataclass(frozen=True)
class LaunchFacts:
    """What the executor needs of a past launch to end its job: read back from the file."""

    marker: str | None = None
    stop_signal: int = signal.SIGTERM
    uid: int = os.getuid()  # whose processes the job's are
    run: int | None = None  # which run of the job it launched (its GPUYARD_RESTART_COUNT)


def read_facts(jobdir: Path) -> LaunchFacts:
    """The facts of the job's last launch (also after a restart); defaults where unknown.
    The job may have rewritten the file (while it runs as the server's user): the marker only
    widens the search beyond the supervisor's session, a bad signal falls back to SIGTERM and
    a bad uid to the server's own."""
    try:
        with open(jobdir / LAUNCH_FILE, "rb") as f:
            data = json.loads(f.read(_MAX_LAUNCH_FILE + 1)[:_MAX_LAUNCH_FILE])
    except (OSError, ValueError, RecursionError):  # cut short, or garbage: defaults
        return LaunchFacts()
    if not isinstance(data, dict):
        return LaunchFacts()
    marker, who, env = data.get("marker"), data.get("run_as"), data.get("env")
    run = env.get(RUN_VAR) if isinstance(env, dict) else None
    return LaunchFacts(
        marker if isinstance(marker, str) else None,
        _int_in(data.get("stop_signal"), 1, 64, signal.SIGTERM),
        _int_in(who.get("uid") if isinstance(who, dict) else None, 0, 2**32 - 2, os.getuid()),
        int(run) if isinstance(run, str) and run.isdigit() else None,
    )


def _int_in(value: Any, low: int, high: int, default: int) -> int:
    """`value` if it is an int (not a bool) in [low, high], else `default`."""
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    return int(value) if ok else default
