"""Turning the submit command line into a job request: scripts, environment, workdir."""

from __future__ import annotations

import os

from gpuyard.domain.errors import InvalidRequest

TYPE_CHECKING = False  # typing stays unimported on the CLI's start path
if TYPE_CHECKING:
    from typing import Any

# Passed along by default, so `gpuyard submit -- python train.py` finds the same python.
EXPORTED_VARS = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH",
                 "LD_LIBRARY_PATH", "HOME", "USER", "LANG")  # fmt: skip


def build_submission(
    command: list[str], name: str | None, workdir: str | None, env_pairs: list[str], export: bool
) -> tuple[list[str], dict[str, Any]]:
    """The argv to run and the submission's other fields."""
    if not command or not command[0].strip():
        raise InvalidRequest("nothing to run: give a command after `--` or a script file")
    script_argv = _script_argv(command)
    argv = script_argv or list(command)
    env = {k: os.environ[k] for k in EXPORTED_VARS if export and k in os.environ}
    for pair in env_pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"--env {pair!r}: use KEY=VALUE")
        env[key] = value
    if not name and script_argv is not None and script_argv[0] != os.path.abspath(command[0]):
        # Run by its interpreter: the server would name the job after the interpreter; the
        # user named the script (the server's own default, applied to what they typed).
        from gpuyard.domain.spec_rules import default_name

        name = default_name(command)
    # The client's working directory goes with the job; the server decides only without one.
    fields: dict[str, Any] = {
        "name": name or None,
        "workdir": os.path.abspath(workdir) if workdir else os.getcwd(),
        "env": env,
    }
    return argv, fields


def _script_argv(command: list[str]) -> list[str] | None:
    """A script file is run by its interpreter: its #! line, python for .py, else sh."""
    path = command[0]
    if not os.path.isfile(path):
        return None
    full = os.path.abspath(path)
    if os.access(full, os.X_OK):
        # The kernel runs it (#! included); a bare name must not be looked up in PATH.
        return [full, *command[1:]]
    try:
        with open(full, "rb") as f:
            first = f.readline(256).decode(errors="replace").strip()
    except OSError:
        return None
    if first.startswith("#!"):
        import shlex

        interpreter = shlex.split(first[2:].strip())
    elif full.endswith(".py"):
        interpreter = ["python3"]
    else:
        interpreter = ["/bin/sh"]
    return [*interpreter, full, *command[1:]]
