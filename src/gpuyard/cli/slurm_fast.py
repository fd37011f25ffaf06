"""The fast start path of `squeue`, `sacct` and `scancel`: their usual lines without typer.

Slurm's flags are getopt's (`-u alice`, `-ualice`, `--user=alice`), which click reads the
same way: this reads exactly the lines whose meaning it is sure of, into the values typer's
parser would give (`cli/slurm_queries_cmd.py`'s signatures: a list option not given is None,
the last of a repeated value wins), and runs the same bodies (`cli/slurm_queries.py`).
Whenever it is not sure (`--help`, an unknown option, `-hr` clustered, a value that looks
like an option, a word where none is taken), it answers None and typer reads the line, so
help and usage errors read exactly as before. A value only the body can judge (an unknown
`--format` field, a bad `--starttime`) is found before anything is printed: the line then
goes to typer too, which says so in its words. (`sbatch`'s options are `submit`'s: its
line is read in `cli/fast.py`.)

    parse_slurm("squeue", ["-u", "alice", "-h"])   -> (run, (squeue, {...}))
    parse_slurm("squeue", ["--frobnicate"])        -> None
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing stays unimported on this path
if TYPE_CHECKING:
    from collections.abc import Callable

    # option name -> (the body's parameter, kind): "flag", "str" (last wins), "list"
    Spec = dict[str, tuple[str, str]]
    Parsed = tuple[Callable[..., int | None], tuple[object, ...]]

_SQUEUE: Spec = {
    "--user": ("user", "list"), "-u": ("user", "list"),
    "--jobs": ("jobs", "list"), "-j": ("jobs", "list"),
    "--states": ("states", "list"), "-t": ("states", "list"),
    "--name": ("name", "list"), "-n": ("name", "list"),
    "--format": ("fmt", "str"), "-o": ("fmt", "str"),
    "--noheader": ("noheader", "flag"), "-h": ("noheader", "flag"),
    "--array": ("expand", "flag"), "-r": ("expand", "flag"),
    "--long": ("long", "flag"), "-l": ("long", "flag"),
    "--me": ("me", "flag"),
    "--partition": ("partition", "str"), "-p": ("partition", "str"),
}  # fmt: skip
_SACCT: Spec = {
    "--jobs": ("jobs", "list"), "-j": ("jobs", "list"),
    "--user": ("user", "list"), "-u": ("user", "list"),
    "--allusers": ("allusers", "flag"), "-a": ("allusers", "flag"),
    "--allocations": ("allocations", "flag"), "-X": ("allocations", "flag"),
    "--format": ("fmt", "str"), "-o": ("fmt", "str"),
    "--brief": ("brief", "flag"), "-b": ("brief", "flag"),
    "--long": ("long", "flag"), "-l": ("long", "flag"),
    "--parsable": ("parsable", "flag"), "-p": ("parsable", "flag"),
    "--parsable2": ("parsable2", "flag"), "-P": ("parsable2", "flag"),
    "--noheader": ("noheader", "flag"), "-n": ("noheader", "flag"),
    "--state": ("states", "list"), "-s": ("states", "list"),
    "--starttime": ("starttime", "str"), "-S": ("starttime", "str"),
    "--name": ("name", "list"),
    "--endtime": ("endtime", "str"), "-E": ("endtime", "str"),
    "--clusters": ("clusters", "list"), "-M": ("clusters", "list"),
    "--allclusters": ("allclusters", "flag"), "-L": ("allclusters", "flag"),
    "--units": ("units", "str"),
    "--noconvert": ("noconvert", "flag"),
}  # fmt: skip
_SCANCEL: Spec = {
    "--user": ("user", "str"), "-u": ("user", "str"),
    "--name": ("name", "str"), "-n": ("name", "str"),
    "--state": ("state", "str"), "-t": ("state", "str"),
    "--signal": ("signal", "str"), "-s": ("signal", "str"),
    "--quiet": ("quiet", "flag"), "-q": ("quiet", "flag"),
}  # fmt: skip
# command (its body's name in cli/slurm_queries.py) -> (its options, the parameter its words
# go to; None: it takes none)
COMMANDS: dict[str, tuple[Spec, str | None]] = {
    "squeue": (_SQUEUE, None),
    "sacct": (_SACCT, None),
    "scancel": (_SCANCEL, "job_ids"),
}


class Unsure(Exception):
    """The line is not one this path is sure to read as typer would."""


def parse_slurm(command: str, args: list[str]) -> Parsed | None:
    """`run` and its arguments for `gpuyard COMMAND ARGS`, or None: typer reads this line."""
    from gpuyard.cli import slurm_queries  # here: sbatch's line needs none of it

    spec, words_param = COMMANDS[command]
    try:
        return run, (getattr(slurm_queries, command), read_options(args, spec, words_param))
    except Unsure:
        return None


def run(body: Callable[..., int], params: dict[str, object]) -> int | None:
    """The body's exit status; None when it found a value typer must call wrong (nothing
    has been printed or changed yet: `cli/slurm_queries.py`)."""
    try:
        return body(**params)
    except Exception as exc:
        errors = sys.modules.get("click.exceptions")  # imported only to raise the error
        if errors is not None and isinstance(exc, errors.UsageError):
            return None
        raise


def read_options(args: list[str], spec: Spec, words_param: str | None
                 ) -> dict[str, object]:  # fmt: skip
    """The body's keyword arguments as typer makes them of `args`, or Unsure."""
    params: dict[str, object] = {}
    for field, kind in spec.values():
        params[field] = False if kind == "flag" else None
    words: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--" or arg == "-" or not arg.startswith("-"):
            if words_param is None or arg == "--":
                raise Unsure  # typer's "Got unexpected extra argument"; `--` left to it
            words.append(arg)  # click takes words between options
            continue
        name, inline = split_option(arg, spec)
        field, kind = spec[name]
        if kind == "flag":
            if inline is not None:
                raise Unsure  # `--noheader=1`, `-hr`: typer's to read
            params[field] = True
            continue
        if inline is None:
            if i >= len(args) or args[i].startswith("-"):
                raise Unsure  # a missing value, or one that looks like an option
            inline = args[i]
            i += 1
        if kind == "list":
            listed = params[field]
            params[field] = [*listed, inline] if isinstance(listed, list) else [inline]
        else:
            params[field] = inline
    if words_param is not None:
        params[words_param] = words or None
    return params


def split_option(arg: str, spec: Spec) -> tuple[str, str | None]:
    """An option token -> (its name in `spec`, the value joined to it or None), or Unsure."""
    if arg.startswith("--"):
        name, eq, value = arg.partition("=")
        if name in spec:
            return name, value if eq else None
    elif arg[:2] in spec:
        return arg[:2], arg[2:] if len(arg) > 2 else None
    raise Unsure
