"""The fast start path: parse the hot commands' usual command lines without typer.

It accepts exactly what typer (click) would accept for `submit`, `queue`/`ps`, `show` and
`cancel`, with the same meaning: `--opt VALUE`, `--opt=VALUE`, `-t VALUE`, `-tVALUE`, the last
of a repeated option wins (`--env` accumulates), integers as `int()` reads them, `submit`'s
options end at `--` or at the command's first word. Whenever it is not sure (`--help`, an
unknown option, a bad number, a missing value or argument), it answers None and the typer app
parses the line instead, so usage errors and help read exactly as before. `sbatch` is
`submit`'s reading with its own two options (Slurm's own taken out first); `squeue`, `sacct`
and `scancel` are `cli/slurm_fast.py`'s; `scontrol`, `sinfo`, `srun` read their own words.

    run_fast(["queue", "--all"])        -> runs `queue`, returns its exit status
    run_fast(["submit", "--frobnicate"]) -> None (typer says what is wrong)
"""

from __future__ import annotations

from gpuyard.cli import commands

TYPE_CHECKING = False  # typing stays unimported on this path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeAlias

    # A parsed line: the command body and its arguments.
    # None from the body: it found a value typer must call wrong, before doing anything.
    Parsed: TypeAlias = tuple[Callable[..., int | None], tuple[object, ...]]

# submit's options: typer's option name -> (SubmitOptions field, kind); kind "int", "str",
# "list" (repeatable), or a bool for flags (the value they set).
SUBMIT_OPTIONS: dict[str, tuple[str, str | bool]] = {
    "--gpus": ("gpus", "int"),
    "-G": ("gpus", "int"),
    "--cpus": ("cpus", "int"),
    "-c": ("cpus", "int"),
    "--cpus-per-task": ("cpus", "int"),
    "--mem": ("mem", "str"),
    "--time": ("time", "str"),
    "-t": ("time", "str"),
    "--name": ("name", "str"),
    "-J": ("name", "str"),
    "--priority": ("priority", "int"),
    "--workdir": ("workdir", "str"),
    "-D": ("workdir", "str"),
    "--chdir": ("workdir", "str"),
    "--env": ("env", "list"),
    "--export-env": ("export_env", True),
    "--no-export-env": ("export_env", False),
    "--no-preempt": ("preemptible", False),
    "--preemptible": ("preemptible", True),
    "--requeue": ("preemptible", True),
    "--no-requeue": ("preemptible", False),
    "--signal": ("stop_signal", "str"),
    "--retries": ("retries", "int"),
    "--retry-on": ("retry_on", "str"),
    "--distributed": ("distributed", "str"),
    "--gpu-mem": ("gpu_mem", "str"),
    "--nodes": ("nodes", "int"),
    "-N": ("nodes", "int"),
    "--gpus-per-node": ("gpus_per_node", "int"),
    "--dry-run": ("dry_run", True),
    "--json": ("json", True),
    "--check": ("check", True),
    # sbatch's (cli/submitting.py reads them as the script's directives are read)
    "--output": ("output", "str"),
    "-o": ("output", "str"),
    "--error": ("error", "str"),
    "-e": ("error", "str"),
    "--gres": ("gres", "str"),
    "--ntasks-per-node": ("ntasks_per_node", "int"),
    "--gpus-per-task": ("gpus_per_task", "str"),
    "--mem-per-gpu": ("mem_per_gpu", "str"),
    "--array": ("array", "str"),
    "-a": ("array", "str"),
    "--dependency": ("dependency", "str"),
    "-d": ("dependency", "str"),
    "--export": ("export", "str"),
    "--mail-type": ("mail_type", "str"),
    "--mail-user": ("mail_user", "str"),
    "--notify": ("notify", "list"),
    "--python": ("python", "str"),
    "--venv": ("venv", "str"),
    "--container": ("container", "str"),
    "--gpu-type": ("gpu_type", "str"),
}
# Lower bounds typer enforces (IntRange): below them typer gives the usage error.
_SUBMIT_MIN = {"nodes": 1, "gpus_per_node": 0, "retries": 0, "gpus": 0, "cpus": 1,
               "ntasks_per_node": 1}  # fmt: skip


class Unsure(Exception):
    """The line is not one the fast path is sure to read as typer would."""


def run_fast(args: list[str]) -> int | None:
    """Run a hot command's usual line and return its exit status; None: not handled here."""
    parsed = parse_fast(args)
    if parsed is None:
        return None
    body, arguments = parsed
    return body(*arguments)


def parse_fast(args: list[str]) -> Parsed | None:
    """The command body and its arguments, or None when typer must read this line."""
    parse = _PARSERS.get(args[0]) if args else None
    if parse is None:
        return None
    try:
        return parse(args[1:])
    except Unsure:
        return None


def _split(arg: str, names: dict[str, tuple[str, str | bool]]) -> tuple[str, str | None]:
    """An option token -> (known option name, inline value or None)."""
    if arg.startswith("--"):
        name, eq, value = arg.partition("=")
        if name in names:
            return name, value if eq else None
    elif len(arg) > 2 and arg[:2] in names:  # -t2h
        return arg[:2], arg[2:]
    elif arg in names:
        return arg, None
    raise Unsure


def _int(text: str, low: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise Unsure from None
    if low is not None and value < low:
        raise Unsure
    return value


def _ref(text: str) -> str:
    """A job reference (12, 12_3, 12_[1-3]) as typer's callback checks it."""
    from gpuyard.cli.job_refs import check

    try:
        return check(text)
    except ValueError:
        raise Unsure from None


def _submit(args: list[str]) -> Parsed:
    opts, _ = read_submit(args, SUBMIT_OPTIONS)
    if not opts.command:
        raise Unsure  # typer's "Missing argument" usage error
    return commands.submit, (opts,)


# sbatch's own options (cli/sbatch_cmd.py), beside submit's: kept apart from SubmitOptions.
SBATCH_OWN: dict[str, tuple[str, str | bool]] = {
    "--parsable": ("parsable", True), "--wrap": ("wrap", "str"),
}  # fmt: skip


def _sbatch(args: list[str]) -> Parsed:
    """submit's options and sbatch's own; Slurm's options before the script taken out as
    typer's sbatch takes them (`cli/sbatching.py`), their warnings said only when this path
    runs the line (typer would say them again)."""
    from gpuyard.cli.sbatching import run_sbatch, take_slurm_options
    from gpuyard.domain.errors import GpuyardError

    table = {**SUBMIT_OPTIONS, **SBATCH_OWN}
    takes_value = {name: not isinstance(kind, bool) for name, (_, kind) in table.items()}
    warnings: list[str] = []
    try:
        kept, values = take_slurm_options(args, takes_value, warnings.append)
    except GpuyardError:  # a directive's bad value (`-n x`): typer says it, once
        raise Unsure from None
    opts, own = read_submit(kept, table)
    parsable, wrap = own.get("parsable", False), own.get("wrap")
    return run_sbatch, (opts, parsable, wrap, values, warnings)


def read_submit(args: list[str], table: dict[str, tuple[str, str | bool]]
                ) -> tuple[commands.SubmitOptions, dict[str, object]]:  # fmt: skip
    """submit's options (`table`'s) as typer reads them, up to the command, which may be
    empty; SBATCH_OWN's values apart. Unsure when typer must read the line."""
    opts = commands.SubmitOptions()
    own: dict[str, object] = {}
    lists: dict[str, list[str]] = {"env": [], "notify": []}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break  # the command's first word: options end here (no interspersed options)
        name, inline = _split(arg, table)
        field, kind = table[name]
        i += 1
        value: object
        if isinstance(kind, bool):
            if inline is not None:
                raise Unsure
            value = kind
        else:
            if inline is None:
                if i >= len(args):
                    raise Unsure
                inline = args[i]
                i += 1
            value = _int(inline, _SUBMIT_MIN.get(field)) if kind == "int" else inline
        if kind == "list":
            lists[field].append(inline or "")
        elif name in SBATCH_OWN:
            own[field] = value
        else:
            setattr(opts, field, value)
    opts.command = args[i:]
    opts.env, opts.notify = lists["env"], lists["notify"]
    return opts, own


_LIST_FLAGS: dict[str, tuple[str, str | bool]] = {
    "--all": ("all", True),
    "-a": ("all", True),
    "--json": ("json", True),
    "--array": ("array", True),
    "-r": ("array", True),
}
_JSON_FLAG: dict[str, tuple[str, str | bool]] = {"--json": ("json", True)}


def _flags_and_words(args: list[str], flags: dict[str, tuple[str, str | bool]]
                     ) -> tuple[set[str], list[str]]:  # fmt: skip
    """Flags (anywhere, as click allows) and the positional words."""
    seen: set[str] = set()
    words: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            words.extend(args[i + 1 :])
            break
        if arg.startswith("-") and arg != "-":
            name, inline = _split(arg, flags)
            if inline is not None:
                raise Unsure
            seen.add(flags[name][0])
        else:
            words.append(arg)
    return seen, words


def _queue(args: list[str]) -> Parsed:
    seen, words = _flags_and_words(args, _LIST_FLAGS)
    if words:
        raise Unsure
    return commands.queue, ("all" in seen, "json" in seen, None, None, None, "array" in seen)


def _show(args: list[str]) -> Parsed:
    seen, words = _flags_and_words(args, _JSON_FLAG)
    if len(words) != 1:
        raise Unsure
    return commands.show, (_ref(words[0]), "json" in seen)


def _cancel(args: list[str]) -> Parsed:
    _, words = _flags_and_words(args, {})
    if not words:
        raise Unsure
    return commands.cancel, ([_ref(word) for word in words],)


def _slurm_flags(args: list[str], name: str) -> Parsed | None:
    """squeue, sacct, scancel: getopt-style flags read by `cli/slurm_fast.py`."""
    from gpuyard.cli.slurm_fast import parse_slurm

    return parse_slurm(name, args)


def _slurm_named(args: list[str], name: str) -> Parsed:
    """Slurm's commands that read their own words (typer only lists them): run from here."""
    if name == "scontrol":
        from gpuyard.cli.scontrol_cmd import scontrol as body
    elif name == "sinfo":
        from gpuyard.cli.sinfo_cmd import sinfo as body
    elif name == "srun":
        from gpuyard.cli.srun_cmd import srun as body
    elif name == "salloc":
        from gpuyard.cli.srun_cmd import salloc as body
    else:
        from gpuyard.cli.srun_cmd import slurm_commands as body
    return body, (args,)


_PARSERS: dict[str, Callable[[list[str]], Parsed | None]] = {
    "submit": _submit,
    "queue": _queue,
    "ps": _queue,
    "show": _show,
    "cancel": _cancel,
    "scontrol": lambda args: _slurm_named(args, "scontrol"),
    "sinfo": lambda args: _slurm_named(args, "sinfo"),
    "srun": lambda args: _slurm_named(args, "srun"),
    "salloc": lambda args: _slurm_named(args, "salloc"),
    "slurm-commands": lambda args: _slurm_named(args, "slurm-commands"),
    "squeue": lambda args: _slurm_flags(args, "squeue"),
    "sacct": lambda args: _slurm_flags(args, "sacct"),
    "scancel": lambda args: _slurm_flags(args, "scancel"),
    "sbatch": _sbatch,
}
