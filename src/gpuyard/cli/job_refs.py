"""Job references on the command line, in Slurm's words.

    12           job 12; when 12 is an array's id (its first task's): the whole array, as
                 `scancel 12` means it
    12_3         task 3 of array 12 (SLURM_ARRAY_JOB_ID 12, SLURM_ARRAY_TASK_ID 3)
    12_[1-3,5]   tasks 1, 2, 3 and 5 of array 12 (sbatch's --array syntax inside the brackets)

`check` reads a reference's shape without the server (both the fast path and typer call it, so
they accept the same words); `resolve` asks the server what it names. A command of one job
(`logs`, `restart`, `update`, `attach`) takes `12` or `12_3` (`check_one`, then `one_id`),
never Python's `int("12_3")`, which reads 123. Standard library only: the CLI's start path.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from gpuyard.client import Client

    JobDict = dict[str, Any]

_USAGE = "give a job id (12), an array's task (12_3) or tasks (12_[1-3,5])"


def check(text: str) -> str:
    """The reference as typed (blanks around it dropped); ValueError (one line) if it is not
    one. Nothing is asked of the server."""
    ref = text.strip()
    head, sep, tail = ref.partition("_")
    ok = _is_id(head)
    if sep:
        if tail.startswith("[") and tail.endswith("]"):
            inner = tail[1:-1]
            ok = ok and bool(inner) and all(c.isdigit() or c in ",-:" for c in inner)
        else:
            ok = ok and _is_index(tail)
    if not ok:
        raise ValueError(f"{text!r} is not a job: {_USAGE}")
    return ref


def check_all(texts: Sequence[str]) -> list[str]:
    return [check(text) for text in texts]


def check_one(text: str) -> str:
    """A reference to one job (12, or an array's task 12_3), as typed; ValueError (one line)
    for anything else, several tasks (12_[1-3]) included."""
    ref = check(text)
    if ref.endswith("]"):
        raise ValueError(f"{text!r} names several tasks: give one job (12) or one task (12_3)")
    return ref


def one_id(session: Client, ref: str) -> int:
    """The id of the one job `ref` names: 12 is job 12 (no request); 12_3 is task 3 of array
    12, asked of the server (NotFound in one line when there is no such task)."""
    job_id, indices = split(check_one(ref))
    if indices is None:
        return job_id
    named = resolve(session, ref)
    assert named.job is not None  # one index, no brackets: one task
    return int(named.job["id"])


def _is_id(text: str) -> bool:
    return text.isascii() and text.isdigit() and int(text) > 0


def _is_index(text: str) -> bool:
    return text.isascii() and text.isdigit()


def split(ref: str) -> tuple[int, tuple[int, ...] | None]:
    """(job or array id, the task indices named; None: the job itself, or the whole array)."""
    head, sep, tail = check(ref).partition("_")
    if not sep:
        return int(head), None
    if not tail.startswith("["):
        return int(head), (int(tail),)
    from gpuyard.domain.arrays import parse_array
    from gpuyard.domain.errors import InvalidRequest

    try:
        return int(head), parse_array(tail[1:-1]).indices
    except InvalidRequest:
        raise ValueError(f"{ref!r} is not a job: {_USAGE}") from None


def label(job: JobDict) -> str:
    """How a job is named in a table: `A_i` for an array's task, its id otherwise (a folded
    line of an array's pending tasks: `A_[3-99%8]`, set by `queue_format.fold_arrays`)."""
    shown = job.get("shown_id")
    if shown is not None:
        return str(shown)
    task = job.get("array_task_id")
    if task is None or job.get("array_job_id") is None:
        return str(job["id"])
    return f"{job['array_job_id']}_{task}"


def is_array_head(job: JobDict) -> bool:
    """Whether `job` is an array's first task, whose id is the array's."""
    return job.get("array_job_id") is not None and job["array_job_id"] == job["id"]


class Resolved:
    """What a reference names: `tasks` (an array's tasks, all of them when `whole`) or one job
    (`job`, which is also what a one-task reference names)."""

    __slots__ = ("array_id", "job", "ref", "tasks", "whole")

    def __init__(
        self,
        ref: str,
        job: JobDict | None = None,
        tasks: Sequence[JobDict] | None = None,
        array_id: int | None = None,
        whole: bool = False,
    ) -> None:
        self.ref, self.job, self.tasks = ref, job, tasks
        self.array_id, self.whole = array_id, whole

    def jobs(self) -> list[JobDict]:
        return list(self.tasks) if self.tasks is not None else [self.job] if self.job else []


def resolve(session: Client, ref: str) -> Resolved:
    """Ask the server what `ref` names (NotFound in one line for a job, array or task that
    is not there)."""
    job_id, indices = split(ref)
    if indices is None:
        job = session.job(job_id)
        if is_array_head(job):
            return Resolved(ref, job, session.array(job_id), job_id, whole=True)
        return Resolved(ref, job)
    tasks = _array(session, job_id)
    by_index = {task["array_task_id"]: task for task in tasks}
    missing = [i for i in indices if i not in by_index]
    if missing:
        from gpuyard.domain.errors import NotFound

        which = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        raise NotFound(
            f"array {job_id} has no task {which}: `gpuyard show {job_id}` lists its tasks"
        )
    chosen = [by_index[i] for i in indices]
    if len(chosen) == 1 and not ref.endswith("]"):
        return Resolved(ref, chosen[0], array_id=job_id)
    return Resolved(ref, tasks=chosen, array_id=job_id)


def _array(session: Client, array_id: int) -> Sequence[JobDict]:
    from gpuyard.domain.errors import NotFound

    try:
        return session.array(array_id)
    except NotFound:
        raise NotFound(
            f"array {array_id} not found, or not yours to see: `gpuyard queue --all` lists "
            "every job (an array's id is its first task's)"
        ) from None


def each_job(
    refs: Sequence[str],
    act: Callable[[JobDict], object],
    said: str | None,
    applies: Callable[[JobDict], bool] | None = None,
) -> int:
    """Apply `act` to every job the references name (the verbs of one job: hold, release,
    requeue): `said` (formatted with the job's `label`) on stdout for each, or one line per job
    it could not be done to on stderr; exit 1 if any. Of a reference naming several tasks (a
    whole array, `12_[1-3]`), only those `applies` to are acted on (a hold: the pending ones),
    and none is an error."""
    from gpuyard.cli.session import client
    from gpuyard.client import ServerUnreachable
    from gpuyard.domain.errors import GpuyardError

    session = client()
    failed = False
    for ref in refs:
        try:
            named = resolve(session, ref)
        except ServerUnreachable:
            raise
        except GpuyardError as exc:
            sys.stderr.write(f"gpuyard: {exc.message}\n")
            failed = True
            continue
        jobs = named.jobs()
        if named.tasks is not None and applies is not None:
            jobs = [job for job in jobs if applies(job)]
        for job in jobs:
            try:
                act(job)
            except ServerUnreachable:
                raise
            except GpuyardError as exc:
                sys.stderr.write(f"gpuyard: {exc.message}\n")
                failed = True
                continue
            if said is not None:
                sys.stdout.write(said.format(id=label(job)) + "\n")
    return 1 if failed else 0
