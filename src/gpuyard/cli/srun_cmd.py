"""`gpuyard srun`, `gpuyard salloc` and `gpuyard slurm-commands install`: Slurm's command names.

    srun -G 1 -t 10 python train.py     a one-step job: waits for its GPUs, its output on this
                                        terminal, exits with the step's exit code (Slurm's
                                        srun outside an allocation)
    salloc -G 1                         an interactive shell on the job's GPUs (`gpuyard run`)
    gpuyard slurm-commands install DIR  sbatch squeue sacct scancel scontrol sinfo srun salloc
                                        as commands in DIR (~/.local/bin; /usr/local/bin)

srun's options are sbatch's (`domain/sbatch.py` reads them: `-G`, `--gres`, `-c`, `--mem`,
`-t`, `-J`, `-n`, `-N`...); several tasks (`-n 4`) or `-l` run the command under the job's own
`srun`, which starts the tasks with their ranks. Inside a gpuyard job `srun` is the job's step
launcher, never a new job: the job's own `srun` (`adapters/executor/srun.sh`) is run in its
place. Standard library only, but `salloc`'s session (typer's module, where `gpuyard run` is).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The names a Slurm user types, each run as `gpuyard NAME ...`.
SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "srun", "salloc")
# Written into each command: which command it is, and who wrote it (so `install` replaces its
# own and never a real Slurm's).
_MARK = "# written by `gpuyard slurm-commands install`"
_LAUNCHERS = frozenset(
    {
        "-l",
        "--label",
        "-u",
        "--unbuffered",
        "-K",
        "-K0",
        "-K1",
        "--kill-on-bad-exit",
        "--kill-on-bad-exit=0",
        "--kill-on-bad-exit=1",
    }
)
_QUIET_FLAGS = frozenset(
    {
        "--pty",
        "--overlap",
        "--exact",
        "--whole",
        "-v",
        "--verbose",
        "-Q",
        "--quiet",
        "-X",
        "--disable-status",
        "-i",
        "--input",
    }
)


def _say(name: str, message: str) -> None:
    sys.stderr.write(f"{name}: error: {message}\n")


def _in_job_srun() -> str:
    """The job's own srun (`srun.sh`, shipped with gpuyard), by path: not imported."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(here), "adapters", "executor", "srun.sh")


def _read(name: str, args: list[str]) -> tuple[dict[str, object], list[str], list[str]] | None:
    """srun's/salloc's options as sbatch's directives read them, the launcher flags (`-l`,
    `-K0`: for the job's srun), and the command; None (said) for a usage error."""
    from gpuyard.domain import sbatch
    from gpuyard.domain.errors import GpuyardError

    values: dict[str, object] = {"export": "ALL"}  # srun's default: the whole environment
    launcher: list[str] = []
    i = 0
    try:
        while i < len(args):
            arg = args[i]
            if arg == "--":
                i += 1
                break
            if not arg.startswith("-") or arg == "-":
                break
            after = args[i + 1] if i + 1 < len(args) else None
            if arg in _LAUNCHERS:
                launcher.append(arg)
                i += 1
                continue
            if arg.startswith("--gpu-bind="):  # the job's own srun binds its tasks
                launcher.append(arg)
                i += 1
                continue
            if arg == "--gpu-bind":
                if after is None:
                    _say(name, "--gpu-bind needs a value (e.g. --gpu-bind=map_gpu:0,1)")
                    return None
                launcher += [arg, after]
                i += 2
                continue
            if arg in _QUIET_FLAGS or arg.startswith(("--cpu-bind", "--cpu_bind", "--mpi")):
                i += 2 if arg in ("-i", "--input") else 1
                continue
            taken = sbatch.sbatch_option(arg, after)
            if taken is not None:
                used, found = taken
                values = sbatch.merge(values, found)
                i += used
                continue
            ignored = sbatch.ignored_option(arg, after)
            if ignored is None:
                _say(name, f"unrecognized option '{arg}'")
                return None
            used, message = ignored
            sys.stderr.write(f"{name}: warning: {message}\n")
            i += used
    except GpuyardError as exc:
        _say(name, exc.message)
        return None
    return values, launcher, args[i:]


def _submission(
    command: list[str], values: dict[str, object], kind: str | None = None
) -> tuple[list[str], dict[str, Any]]:
    from gpuyard.cli import commands
    from gpuyard.cli.submitting import apply_batch, build_submission

    argv, fields = build_submission(command, None, None, [], True)
    opts = commands.SubmitOptions(command)
    apply_batch(opts, argv, fields, values)
    if kind is not None:
        fields["kind"] = kind
    return argv, fields


def srun(args: list[str]) -> int:
    """Slurm's srun: inside a gpuyard job, the job's step (its own srun); outside, a job of
    one step, followed to its end: output here, its exit code back (Ctrl-C cancels it)."""
    if os.environ.get("GPUYARD_JOB_ID"):
        shim = _in_job_srun()
        os.execv("/bin/sh", ["/bin/sh", shim, *args])
    read = _read("srun", args)
    if read is None:
        return 1
    values, launcher, command = read
    if not command:
        _say("srun", "no command to run (srun [options] command [arguments...])")
        return 1
    tasks = any(int(str(values.get(key) or 1)) > 1 for key in ("ntasks", "ntasks_per_node"))
    if launcher or tasks:  # the job's own srun starts the tasks, each with its rank
        command = ["srun", *launcher, *command]
    from gpuyard.cli.session import client

    session = client()
    argv, fields = _submission(command, values)
    job = session.submit(argv, **fields)
    job_id = int(job["id"])
    out = sys.stdout.buffer
    try:
        for chunk in session.follow_log(job_id):
            out.write(chunk)
            out.flush()
        ended = session.wait(job_id, raise_on_failure=False)
    except KeyboardInterrupt:
        sys.stderr.write(f"srun: interrupted: cancelling job {job_id}\n")
        session.cancel(job_id)
        return 130
    return _exit_of(ended)


def _exit_of(job: dict[str, Any]) -> int:
    """The step's exit code as srun gives it; a job that did not run to its end says why."""
    state, code = str(job["state"]), job.get("exit_code")
    if state == "COMPLETED":
        return 0
    if isinstance(code, int) and code > 0:
        sys.stderr.write(f"srun: error: {job.get('node') or 'gpuyard'}: task 0: Exited with "
                         f"exit code {code}\n")  # fmt: skip
        return code
    sys.stderr.write(f"srun: error: job {job['id']} {state}: {job.get('reason') or state}\n")
    return 1


def salloc(args: list[str]) -> int:
    """Slurm's salloc: an interactive shell (or the command given) in a job holding what the
    options ask for, this terminal attached, as `gpuyard run` does; its exit code back."""
    if os.environ.get("GPUYARD_JOB_ID"):
        _say(
            "salloc",
            "already inside gpuyard job "
            + os.environ["GPUYARD_JOB_ID"]
            + ": run its steps with srun",
        )
        return 1
    read = _read("salloc", args)
    if read is None:
        return 1
    values, _, command = read
    command = command or [os.environ.get("SHELL") or "/bin/sh"]
    from gpuyard.cli.run_cmd import _refuse_remote, open_session
    from gpuyard.cli.session import client

    session = client()
    _refuse_remote(session)
    argv, fields = _submission(command, values, kind="interactive")
    job = session.submit(argv, **fields)
    sys.stderr.write(f"salloc: Granted job allocation {job['id']}\n")
    return open_session(session, int(job["id"]), submitted=True)


# -- the commands by Slurm's names ----------------------------------------------------------
def command_text(name: str, python: str) -> str:
    """The program `install` writes for `name`: gpuyard's own interpreter runs gpuyard's entry
    point, as the `gpuyard` command does (the same fast start path), as `gpuyard NAME`."""
    return (
        f"#!{python}\n"
        f"{_MARK}: Slurm's `{name}` is `gpuyard {name}`\n"
        "import sys\n"
        f"sys.argv[:1] = ['gpuyard', {name!r}]\n"
        "from gpuyard.cli.main import main\n"
        "main()\n"
    )


def install(args: list[str]) -> int:
    """`gpuyard slurm-commands install [DIR] [--force]`: write the commands into DIR (default
    ~/.local/bin), each whole or not at all; a file of that name gpuyard did not write is left
    alone unless `--force`. Prints what it wrote and whether DIR is on PATH."""
    force = "--force" in args
    words = [a for a in args if a != "--force"]
    if len(words) > 1 or any(w.startswith("-") for w in words):
        _say("gpuyard", "usage: gpuyard slurm-commands install [DIR] [--force]")
        return 2
    folder = os.path.abspath(os.path.expanduser(words[0] if words else "~/.local/bin"))
    os.makedirs(folder, exist_ok=True)
    python = sys.executable
    refused: list[str] = []
    for name in SLURM_COMMANDS:
        path = os.path.join(folder, name)
        if os.path.lexists(path) and not force and not _ours(path):
            refused.append(name)
            continue
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(command_text(name, python))
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    wrote = [n for n in SLURM_COMMANDS if n not in refused]
    if wrote:
        sys.stdout.write(f"wrote {' '.join(wrote)} in {folder}\n")
    if refused:
        sys.stderr.write(
            f"gpuyard: left alone {' '.join(refused)} in {folder}: not gpuyard's "
            "(a real Slurm's?); --force replaces them\n"
        )
    on_path = folder in (os.environ.get("PATH") or "").split(os.pathsep)
    if wrote and not on_path:
        sys.stderr.write(
            f'gpuyard: {folder} is not on your PATH: add it (export PATH="{folder}:$PATH")\n'
        )
    return 1 if refused else 0


def _ours(path: str) -> bool:
    try:
        with open(path, "rb") as text:
            return _MARK.encode() in text.read(4096)
    except OSError:
        return False


def slurm_commands(args: list[str]) -> int:
    if args[:1] == ["install"]:
        return install(args[1:])
    _say(
        "gpuyard",
        "usage: gpuyard slurm-commands install [DIR] [--force]  "
        f"(writes {' '.join(SLURM_COMMANDS)}; DIR: ~/.local/bin, an admin's /usr/local/bin)",
    )
    return 0 if args[:1] in (["--help"], ["-h"]) else 2


def register(app: Any, admin: Any) -> None:
    """`gpuyard srun`, `salloc` and `slurm-commands`, listed by typer; their words are read
    here, not by typer."""
    from gpuyard.cli.cmd_common import raw_command

    raw_command(
        app,
        "srun",
        srun,
        "Slurm's srun: a one-step job, its output on this terminal, its exit code.",
    )
    raw_command(
        app,
        "salloc",
        salloc,
        "Slurm's salloc: an interactive shell in a job holding the GPUs asked for.",
    )
    raw_command(
        app,
        "slurm-commands",
        slurm_commands,
        "Put Slurm's command names on PATH: slurm-commands install [DIR].",
    )
