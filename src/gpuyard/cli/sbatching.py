"""`gpuyard sbatch`'s body and its reading of Slurm's own options, shared by the fast start
path (`cli/slurm_fast.py`) and typer (`cli/sbatch_cmd.py`). Standard library only.

sbatch takes submit's options plus `--parsable` and `--wrap`; before the script, a Slurm
option submit has no flag for is read as the script's directive would read it (`-n 4`,
`--mem-per-cpu 4G`), or, if it means nothing here (`-p gpu`, `--qos=high`), said once on
stderr and dropped, as the same directive in a script is.
"""

from __future__ import annotations

import sys

from gpuyard.cli import commands

TYPE_CHECKING = False  # typing stays unimported on the fast path
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def take_slurm_options(args: list[str], takes_value: dict[str, bool],
                       warn: Callable[[str], object]
                       ) -> tuple[list[str], dict[str, object]]:  # fmt: skip
    """`args` without the sbatch options the command has no flag for (`takes_value`: each of
    its own option names -> whether it takes a value), before the script, and the values
    those set; `warn` gets a line for each one ignored (the fast path keeps them until it is
    sure of the line: one it leaves to typer must not warn twice)."""
    from gpuyard.domain import sbatch

    kept: list[str] = []
    values: dict[str, object] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break  # the script (or --): options end here
        name = arg.partition("=")[0] if arg.startswith("--") else arg[:2]
        if name in takes_value:
            kept.append(arg)
            joined = "=" in arg if arg.startswith("--") else len(arg) > 2
            if takes_value[name] and not joined and i + 1 < len(args):
                kept.append(args[i + 1])
                i += 1
            i += 1
            continue
        after = args[i + 1] if i + 1 < len(args) else None
        taken = sbatch.sbatch_option(arg, after)
        if taken is not None:
            used, found = taken
            values = sbatch.merge(values, found)
            i += used
            continue
        ignored = sbatch.ignored_option(arg, after)
        if ignored is None:
            break  # not Slurm's either: submit's usage error says so
        used, message = ignored
        warn(f"gpuyard: warning: {message}\n")
        i += used
    return [*kept, *args[i:]], values


def run_sbatch(opts: commands.SubmitOptions, parsable: bool, wrap: str | None,
               slurm_values: dict[str, object], warnings: Sequence[str] = ()) -> int:  # fmt: skip
    """Submit `opts` as sbatch does (`Submitted batch job N`; `--parsable`: N); its exit
    status. `warnings`: the ignored options', printed first."""
    for warning in warnings:
        sys.stderr.write(warning)
    if wrap is not None:
        if opts.command:
            sys.stderr.write("gpuyard: --wrap and a script: give one of them\n")
            return 2
        opts.command = ["/bin/sh", "-c", wrap]
    elif not opts.command:
        sys.stderr.write("gpuyard: sbatch: give a batch script (or --wrap COMMAND)\n")
        return 2
    opts.style = "parsable" if parsable else "sbatch"
    opts.defaults = {"export": "ALL"}
    opts.slurm_values = slurm_values
    return commands.submit(opts)
