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
        from gpuyard.domain.job_names import default_name

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


# The submitting shell's variables that never go with `--export=ALL`: the CLI's own (its
# token), a Slurm job's around the CLI, and the shell's bookkeeping of where it is.
_NOT_EXPORTED_PREFIXES = ("GPUYARD_", "SLURM_")
_NOT_EXPORTED = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
# submit's Slurm-style flags -> the directive they mean (read by domain/sbatch.py's handlers).
_SLURM_FLAGS = (("gres", "gres"), ("ntasks_per_node", "ntasks-per-node"),
                ("gpus_per_task", "gpus-per-task"),
                ("mem_per_gpu", "mem-per-gpu"), ("array", "array"), ("export", "export"),
                ("mail_type", "mail-type"), ("mail_user", "mail-user"))  # fmt: skip
# submit's flags whose value is a directive's value as it is: SubmitOptions field -> key.
_PLAIN_FLAGS = (("name", "name"), ("time", "time"), ("mem", "mem_total"),
                ("priority", "priority"),
                ("gpu_mem", "gpu_mem"), ("distributed", "distributed"), ("output", "output"),
                ("error", "error"), ("dependency", "dependency"), ("python", "python"),
                ("venv", "venv"), ("container", "container"), ("gpu_type", "gpu_type"),
                ("preemptible", "preemptible"), ("export_env", "export_env"),
                ("nodes", "nodes"), ("gpus_per_node", "gpus_per_node"),
                ("cpus", "cpus"))  # fmt: skip


def flag_values(opts: Any) -> dict[str, object]:
    """The values submit's flags set (SubmitOptions; None: not given), keyed as directives'
    (domain/sbatch.py), so that `merge(script, flags)` lets each flag win. `--cpus` (`-c`)
    and `--mem` keep gpuyard's meaning: the job's in all, split over its nodes."""
    from gpuyard.domain.sbatch import merge, read_option

    values: dict[str, object] = {}
    for attr, key in _SLURM_FLAGS:
        value = getattr(opts, attr, None)
        if value is not None:
            values.update(read_option(key, str(value)))
    for attr, key in _PLAIN_FLAGS:
        value = getattr(opts, attr, None)
        if value is not None:
            values[key] = value
    if opts.gpus is not None and not (opts.gpus == 0 and opts.gpus_per_node is not None):
        values["gpus"] = opts.gpus
    if opts.notify:
        values["notify"] = tuple(opts.notify)
    if getattr(opts, "style", "id") != "id":
        # `gpuyard sbatch`: --signal in sbatch's meaning ([B:]SIG[@TIME], before the time
        # limit), and sbatch's options submit has no flag for (`-n 4`: cli/sbatch_cmd.py).
        if opts.stop_signal is not None:
            values.update(read_option("signal", opts.stop_signal, dialect="sbatch"))
        values = merge(values, getattr(opts, "slurm_values", {}))
    return values


def apply_batch(opts: Any, argv: list[str], fields: dict[str, Any],
                defaults: dict[str, object] | None = None) -> None:  # fmt: skip
    """Complete `fields` (build_submission's) with the script's directives, then the flags
    over them (sbatch's order), and `defaults` (`gpuyard sbatch`'s) under both. Directive
    warnings go to stderr, one line each; a value that cannot mean what it says raises."""
    import sys

    from gpuyard.domain import sbatch

    values = dict(defaults or {})
    path = opts.command[0] if opts.command else ""
    where = "gpuyard: warning: "
    text = fields.get("script")
    if text is not None and ("#SBATCH" in text or "#GPUYARD" in text):
        found = sbatch.parse_directives(text, path)
        for warning in found.warnings:
            sys.stderr.write(f"{where}{path}:{warning.line}: {warning.message}\n")
        values = sbatch.merge(values, found.values)
    values = sbatch.merge(values, flag_values(opts))
    sbatch_style = getattr(opts, "style", "id") != "id"
    if sbatch_style and values.get("output") is None:  # sbatch's default, in the workdir
        values["output"] = "slurm-%A_%a.out" if values.get("array") else "slurm-%j.out"
    resolved = sbatch.resolve(values)
    # sbatch's --wait and --test-only: what `commands.submit` does after (or instead of) the
    # submit; `gpuyard submit` has its own (`gpuyard wait`, `--dry-run`).
    opts.sbatch_wait, opts.test_only = resolved.wait, resolved.test_only
    for note in resolved.notes:
        sys.stderr.write(f"{where}{path + ': ' if text is not None else ''}{note}\n")
    # Paths on this machine, as the server needs them: `--venv .venv`, `--python python3`.
    venv, python = resolved.fields.get("venv"), resolved.fields.get("python")
    if isinstance(venv, str) and venv:
        resolved.fields["venv"] = os.path.abspath(venv)
    if isinstance(python, str) and python:
        import shutil

        where_python = python if "/" in python else shutil.which(python)
        resolved.fields["python"] = os.path.abspath(where_python) if where_python else python
    fields.update(resolved.fields)
    if opts.workdir is None and resolved.chdir:
        fields["workdir"] = os.path.abspath(resolved.chdir)
    is_script = sbatch_style or os.path.isfile(path)
    mode, names = resolved.export
    if mode != "default" or names or resolved.env or is_script:
        fields["env"] = _batch_env(mode, names, [*resolved.env, *opts.env])
        if "script" in fields:
            index = fields["script_index"]
            _keep_imports(argv[index], argv[:index], fields["env"])
    if is_script:  # sbatch's: where the script was submitted from (srun, -o paths)
        fields["env"]["SLURM_SUBMIT_DIR"] = os.getcwd()


def _batch_env(mode: str, names: tuple[str, ...], pairs: list[str]) -> dict[str, str]:
    """The job's environment for `--export`: the usual exports (EXPORTED_VARS: "default"),
    all of this shell's variables ("all") or none, then the variables named, then K=V pairs
    (#GPUYARD --env, then the command line's --env)."""
    if mode == "all":
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(_NOT_EXPORTED_PREFIXES) and k not in _NOT_EXPORTED}  # fmt: skip
    elif mode == "none":
        env = {}
    else:
        env = {k: os.environ[k] for k in EXPORTED_VARS if k in os.environ}
    for name in names:
        key, eq, value = name.partition("=")
        if eq:
            env[key] = value
        elif key in os.environ:
            env[key] = os.environ[key]
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"--env {pair!r}: use KEY=VALUE")
        env[key] = value
    return env
