"""sbatch's `-o/--output` and `-e/--error` file names: Slurm's `%` patterns, expanded for a job.

    expand_output_path("logs/%x-%A_%a.out", job 42 task 3 of array 40 named "train", ...)
        -> "<workdir>/logs/train-40_3.out"

What each pattern means (as Slurm's batch step expands them):
    %j %J   the job's id (for a batch script %J has no step part)
    %A      the array's id (its first task's job id); a job outside an array: its own id
    %a      the task's index; outside an array 4294967294 (Slurm's NO_VAL), as Slurm writes
    %b      the task's index modulo 10
    %x      the job's name          %u  the job's user
    %N      the machine's short name          %n %t  0 (the first node, the first task)
    %s      "batch" (the step)      %%  a single %
A number between `%` and the letter zero-pads a number (`%4j` -> 0042; at most 10). Any
other `%` sequence stays as written; a pattern holding a backslash is not expanded at all
(its backslashes are dropped), as in Slurm. A relative result is under the job's workdir.

Folders named by a pattern (`logs/%j/out.log`: submitit's per-job folder) are made for the job
(`job_folders`): nobody could have made them before the submit answered with the id, and on
Slurm the job waits in the queue while its client makes them; here it may start at once.
Folders written out in full are not made (a typo fails the job, as on Slurm).
"""

from __future__ import annotations

import posixpath

from gpuyard.domain.job import Job

NO_TASK = 4294967294  # Slurm's NO_VAL: %a of a job that is not an array's task
_NUMBERS = frozenset("jJAabnt")
_WORDS = frozenset("xuNs")
_MAX_PAD = 10


def expand_output_path(pattern: str, job: Job, user: str, node: str) -> str:
    """The file `pattern` names for `job` run by `user` on `node` (absolute)."""
    if "\\" in pattern:
        expanded = pattern.replace("\\", "")
    else:
        expanded = _expand(pattern, _values(job, user, node))
    return posixpath.join(job.spec.workdir, expanded)


def job_folders(pattern: str, job: Job, user: str, node: str) -> list[str]:
    """The folders of `pattern`'s file whose names hold a pattern, outermost first, each with
    all those under it down to the file's own (`logs/%j/a/x.out` of job 7: `<workdir>/logs/7`,
    `<workdir>/logs/7/a`); the fixed part above (`logs`) must exist. A pattern taken as
    written (a backslash), or a name that expands to a path (`/`, `..`), makes none."""
    if "\\" in pattern:
        return []
    names = pattern.split("/")[:-1]
    values = _values(job, user, node)
    folders: list[str] = []
    path = job.spec.workdir
    for name in names:
        expanded = _expand(name, values)
        if expanded != name and ("/" in expanded or expanded in ("", ".", "..")):
            return []
        path = posixpath.join(path, expanded) if name else "/"
        if folders or expanded != name.replace("%%", "%"):
            folders.append(path)
    return folders


def _values(job: Job, user: str, node: str) -> dict[str, int | str]:
    task = NO_TASK if job.array_task_id is None else job.array_task_id
    return {
        "j": job.id,
        "J": job.id,
        "A": job.id if job.array_job_id is None else job.array_job_id,
        "a": task,
        "b": task % 10,
        "n": 0,
        "t": 0,
        "x": job.spec.name,
        "u": user,
        "N": node.split(".", 1)[0],
        "s": "batch",
    }


def _expand(pattern: str, values: dict[str, int | str]) -> str:
    out: list[str] = []
    i, size = 0, len(pattern)
    while i < size:
        char = pattern[i]
        if char != "%" or i + 1 == size:
            out.append(char)
            i += 1
            continue
        if pattern[i + 1] == "%":
            out.append("%")
            i += 2
            continue
        end = i + 1
        while end < size and pattern[end].isdigit():
            end += 1
        letter = pattern[end] if end < size else ""
        if letter in _NUMBERS or letter in _WORDS:
            pad = min(int(pattern[i + 1 : end] or 0), _MAX_PAD)
            value = values[letter]
            out.append(f"{value:0{pad}d}" if isinstance(value, int) and pad else str(value))
            i = end + 1
        else:
            out.append(pattern[i:end])  # not a pattern: kept as written
            i = end
    return "".join(out)
