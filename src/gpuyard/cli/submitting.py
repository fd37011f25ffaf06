"""Turning the submit command line into a job request: scripts, environment, workdir."""

from __future__ import annotations

import os

from gpuyard.domain.errors import InvalidRequest

TYPE_CHECKING = False  # typing stays unimported on the CLI's start path
if TYPE_CHECKING:
    from typing import Any

# The largest script copied at submit (the server's MAX_SCRIPT_BYTES).
MAX_SCRIPT_READ = 1024 * 1024
# Passed along by default, so `gpuyard submit -- python train.py` finds the same python.
EXPORTED_VARS = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH",
                 "LD_LIBRARY_PATH", "HOME", "USER", "LANG")  # fmt: skip


def build_submission(
    command: list[str], name: str | None, workdir: str | None, env_pairs: list[str], export: bool
) -> tuple[list[str], dict[str, Any]]:
    """The argv to run and the submission's other fields."""
    if not command or not command[0].strip():
        raise InvalidRequest("nothing to run: give a command after `--` or a script file")
    check_program(command[0])
    found = _script_argv(command)
    script_argv, script_index = found if found else (None, 0)
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
    if script_argv is not None:
        text = script_copy(argv[script_index], run_by_kernel=script_index == 0)
        if text is not None:
            fields.update(script=text, script_index=script_index)
            _keep_imports(argv[script_index], argv[:script_index], env)
    return argv, fields


def signal_fields(text: str) -> dict[str, Any]:
    """`--signal`: `SIG` is the stop signal (cancel, preemption, time limit); `SIG@SECONDS`
    (Slurm's meaning) is sent that long before the time limit, so the job can checkpoint."""
    if "@" not in text:
        return {"stop_signal": text}
    from gpuyard.domain.signals import parse_warning

    number, seconds = parse_warning(text)
    return {"warn_signal": str(number), "warn_before_s": seconds}


def retry_fields(retries: int, retry_on: str | None) -> dict[str, Any]:
    """`--retries N` and `--retry-on CLASS[,CLASS]` (the server checks the classes)."""
    fields: dict[str, Any] = {"retries": retries} if retries else {}
    if retry_on is not None:
        fields["retry_on"] = [c.strip() for c in retry_on.split(",") if c.strip()]
    return fields


def _keep_imports(path: str, interpreter: list[str], env: dict[str, str]) -> None:
    """A Python script runs from its copy: its own folder stays first on the import path
    (PYTHONPATH), so `import helpers` beside it still works as before the copy."""
    program = " ".join(interpreter) or _first_line(path)
    if "python" not in program:
        return
    here = os.path.dirname(path)
    current = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{here}{os.pathsep}{current}" if current else here


def _first_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.readline(256).decode(errors="replace")
    except OSError:
        return ""


def check_program(path: str) -> None:
    """A script path that does not exist fails now, in one line, not with 127 after the wait:
    a path with a `/`, or a bare `train.sh`/`train.py` that is neither here nor on PATH."""
    if os.path.exists(path):
        return
    if "/" not in path:
        import shutil

        if not path.endswith((".sh", ".py", ".bash")) or shutil.which(path):
            return
    where = "" if os.path.isabs(path) else f" in {os.getcwd()}"
    raise InvalidRequest(
        f"{path}: no such file{where}: give the script's path, or a command after --"
    )


def _script_argv(command: list[str]) -> tuple[list[str], int] | None:
    """A script file is run by its interpreter: its #! line, python for .py, else sh; with
    the index of the script's path in the argv."""
    path = command[0]
    if not os.path.isfile(path):
        return None
    full = os.path.abspath(path)
    if os.access(full, os.X_OK):
        # The kernel runs it (#! included); a bare name must not be looked up in PATH.
        return [full, *command[1:]], 0
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
    return [*interpreter, full, *command[1:]], len(interpreter)


def script_copy(path: str, run_by_kernel: bool) -> str | None:
    """The script's text, copied at submit as sbatch does (the job runs the copy, so editing
    the file after submit changes nothing); None for what is not a text script (a binary)."""
    try:
        with open(path, "rb") as f:
            if run_by_kernel and f.read(2) != b"#!":
                return None  # a program (`.venv/bin/python`), not a script: run in place
            f.seek(0)
            data = f.read(MAX_SCRIPT_READ + 1)
    except OSError as exc:
        raise InvalidRequest(f"{path}: cannot read the script: {exc.strerror}") from None
    if len(data) > MAX_SCRIPT_READ:
        raise InvalidRequest(
            f"{path}: larger than {MAX_SCRIPT_READ // 1024 // 1024} MiB, the most a script "
            "copied at submit may be: submit a small script that runs it"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None  # not text the submission can carry: run in place, as before
