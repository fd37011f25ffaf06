"""At submit: whether the job's user could start what the job runs: its working directory, its
`--venv`/`--python` interpreter and its program on the job's PATH, looked at *as that user*.

A job refused now costs its user a line; one queued with a typo fails `LaunchFailed` after its
wait. On a root server the look is made by a short `sh` run with the user's uid, groups and the
job's PATH, never by the server itself: root sees into folders the user cannot, and would tell
them what exists there (a folder they cannot enter is "does not exist or cannot be entered").
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import JobSpec
from gpuyard.services.launch.plan import _with_python, job_environment
from gpuyard.services.ports import RunAs

# A probe that takes longer (a stalled mount) is let through: the launch will tell.
PROBE_TIMEOUT_S = 10.0
_NO_WORKDIR, _NO_INTERPRETER, _NO_PROGRAM = 10, 11, 12
# $1 workdir, $2 program ("" : none to look for), $3 interpreter ("" : none).
_PROBE = """cd -- "$1" 2>/dev/null || exit 10
if [ -n "$3" ]; then [ -f "$3" ] && [ -x "$3" ] || exit 11; fi
case $2 in
  "") ;;
  */*) [ -f "$2" ] && [ -x "$2" ] || exit 12 ;;
  *) command -v -- "$2" >/dev/null 2>&1 || exit 12 ;;
esac
"""


@dataclass(frozen=True, slots=True)
class LaunchProbe:
    """What one submission's job would need at its start, and as whom (None: the server's own
    user, looked at in-process)."""

    workdir: str
    program: str | None  # argv[0] as the job execs it; None: not looked for
    interpreter: str | None  # --python, or the --venv's bin/python
    interpreter_flag: str  # "--python PATH" or "--venv PATH" (for the message)
    path: str  # the job's PATH
    run_as: RunAs | None


def probe_of(spec: JobSpec, run_as: RunAs | None, server_path: str) -> LaunchProbe:
    """The probe for `spec` run as `run_as`; `server_path`: the PATH a job gets when the
    submitter sent none."""
    sent = dict(spec.env).get("PATH")
    path = job_environment(spec, {"PATH": server_path if sent is None else sent})["PATH"]
    argv = _with_python(spec, list(spec.argv))
    program: str | None = argv[0] if argv else None
    if (
        spec.container is not None  # it runs in the image
        or spec.distributed == "torchrun"  # torchrun runs argv[0] with the interpreter
        or (spec.script is not None and spec.script_index == 0)  # the copy is made at launch
        or (program is not None and os.path.basename(program) == "srun")  # gpuyard's shim
    ):
        program = None
    interpreter, flag = None, ""
    if spec.python is not None:
        interpreter, flag = spec.python, f"--python {spec.python}"
    elif spec.venv is not None:
        interpreter, flag = os.path.join(spec.venv, "bin", "python"), f"--venv {spec.venv}"
    return LaunchProbe(spec.workdir, program, interpreter, flag, path, run_as)


def check_launchable(probe: LaunchProbe, server_uid: int) -> None:
    """Raise InvalidRequest (one line) if the probe's user could not start the job; as that
    user (a child process) when it is not the server's own. May block (a stalled mount): a
    submit on the event loop calls it in a thread."""
    run_as = probe.run_as
    if run_as is None or run_as.uid == server_uid:
        return _check_here(probe)
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", _PROBE, "sh", probe.workdir, probe.program or "",
             probe.interpreter or ""],
            env={"PATH": probe.path}, cwd="/", user=run_as.uid, group=run_as.gid,
            extra_groups=list(run_as.groups), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=PROBE_TIMEOUT_S,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return  # could not look: the launch will tell
    _refuse(probe, done.returncode, run_as.user)


def _check_here(probe: LaunchProbe) -> None:
    """The server's own user: what it sees is what the job will."""
    if not os.path.isdir(probe.workdir):
        return  # the workdir check says why, in its words
    interpreter = probe.interpreter
    if interpreter is not None and not _runnable(interpreter):
        return _refuse(probe, _NO_INTERPRETER, None)
    program = probe.program
    if program is None:
        return None
    if "/" in program:
        found = _runnable(os.path.join(probe.workdir, program))
    else:
        found = shutil.which(program, path=probe.path) is not None
    return None if found else _refuse(probe, _NO_PROGRAM, None)


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _refuse(probe: LaunchProbe, code: int, user: str | None) -> None:
    who = f"user {user}" if user is not None else "the server's user"
    if code == _NO_WORKDIR:
        raise InvalidRequest(
            f"workdir {probe.workdir!r} does not exist on the server or {who} cannot enter "
            "it; create it or pass --workdir a folder",
            field="workdir",
        )
    if code == _NO_INTERPRETER:
        fix = ("make one with `python3 -m venv PATH`" if probe.interpreter_flag.startswith(
            "--venv") else "give an interpreter's path")  # fmt: skip
        raise InvalidRequest(
            f"{probe.interpreter_flag}: {probe.interpreter} does not exist or {who} cannot "
            f"run it; {fix} the job's user can run",
            field="venv" if probe.interpreter_flag.startswith("--venv") else "python",
        )
    if code == _NO_PROGRAM:
        program = probe.program or ""
        if "/" in program:
            where = "" if os.path.isabs(program) else f" in workdir {probe.workdir}"
            raise InvalidRequest(
                f"{program}: no such program{where}, or {who} cannot run it: give the "
                "program's path (nothing was queued)",
                field="command",
            )
        raise InvalidRequest(
            f"{program}: not found on the job's PATH (the PATH it was submitted with) for "
            f"{who}: give the program's path, or the --venv it is in (nothing was queued)",
            field="command",
        )
