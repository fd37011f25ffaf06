"""A job's default name: its program's file name, or the script its interpreter runs.

Apart from `spec_rules.py` (which re-exports it) because the CLI names a job run by its
interpreter before submitting it (`cli/submitting.py`), on the fast start path, where
`spec_rules`' imports (dataclasses, inspect, the job model: ~40 ms loaded) would cost
`gpuyard sbatch job.sh` a third of its wall time. Standard library only (os, re).
"""

from __future__ import annotations

import os
import re

MAX_NAME_CHARS = 200


def default_name(argv: tuple[str, ...] | list[str]) -> str:
    """The program's file name, like Slurm's job name from the script (`train.sh`); a script
    run by its interpreter is named after the script (`python -u train.py`: `train.py`,
    `python -m pkg.cli`: `pkg.cli`), as sbatch names a job after its script."""
    name = _base(argv[0])
    if _INTERPRETER.fullmatch(name):
        name = _script_of(argv[1:], python=name.startswith(("python", "pypy"))) or name
    return name[:MAX_NAME_CHARS] or "job"


# Programs whose first operand is the script they run: python3.11, pypy3, sh, bash...
_INTERPRETER = re.compile(r"(?:python|pypy)[0-9.]*|(?:ba|da|k|z)?sh")
_PYTHON_VALUED = ("-W", "-X", "--check-hash-based-pycs")  # options that take the next word


def _base(path: str) -> str:
    return os.path.basename(path.rstrip("/"))


def _script_of(args: tuple[str, ...] | list[str], *, python: bool) -> str | None:
    """The script (or, for python, `-m`'s module) an interpreter's arguments run; None for
    `-c CODE`, or none given."""
    words = iter(args)
    for arg in words:
        if arg == "-" or (arg[:1] == "-" and arg[1:2] != "-" and "c" in arg):
            return None  # -c CODE (bash -lc, python -uc too), or a script on stdin
        if python and arg == "-m":
            return next(words, None)
        if python and arg in _PYTHON_VALUED:
            next(words, None)
            continue
        if arg == "--" or not arg.startswith("-"):
            script = arg if arg != "--" else next(words, "")
            return _base(script) or None
    return None
