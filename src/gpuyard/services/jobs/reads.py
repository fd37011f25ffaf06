"""Reading jobs: one job, an array's tasks, the queue and its history, a job's log.

What a caller sees is decided here, by the rules (`services/access/rules.py`): another user's
job does not exist for them when asked for by id (NotFound, in the words of a missing one);
in a listing it shows who, what size, which state and why (as `squeue`), its command and
working directory blanked (`redact_job`), and its log, GPU stats and health are not theirs to
see (`shows_details`). The routes only convert what these answer.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, BinaryIO

from gpuyard.domain.errors import Conflict, NotFound
from gpuyard.domain.job import Job
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.services.access.rules import may_see, redact_job, require_visible
from gpuyard.services.jobs.desk import JobDesk
from gpuyard.services.jobs.files import open_job_file

# Listing history: a page is at most this many jobs (the store pages through the rest).
MAX_PAGE = 10_000
_QUICK_PAGE = 1_000  # a history page up to this long: one request deadline
_LONG_PAGE_DEADLINES = 5.0  # a longer one waits this many (10 s)
MAX_JOB_ID = 2**63 - 1  # the store's integers: a larger id in a request is no job's
_TAIL_BLOCK = 1 << 16


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Part of a job's log: `data` from `offset`; `next_offset` to ask for the rest."""

    data: bytes
    offset: int
    next_offset: int
    state: JobState


class LogReader:
    """An open job log, read from `start` up to `end` (its size when opened): a log still
    being written is sent as it was then, and `end` is where to ask for the rest."""

    def __init__(self, file: BinaryIO | None, start: int, end: int, state: JobState) -> None:
        self._file = file
        self.start = start
        self.end = end
        self.state = state
        self._at = start

    def read(self, limit: int) -> bytes:
        """The next bytes, at most `limit`, never past `end` (b"": done)."""
        if self._file is None:
            return b""
        data = self._file.read(min(limit, self.end - self._at))
        self._at += len(data)
        return data

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class JobReads:
    """The read use cases, each with its actor; `log_path` names a job's log file."""

    def __init__(self, desk: JobDesk) -> None:
        self._desk = desk
        self.log_path = desk.log_path

    def get(self, job_id: int, actor: Principal) -> Job:
        """A job the actor may see. Another user's job is refused in the words of one that does
        not exist (a refused caller learns nothing), which say both ("not found, or not yours
        to see"), as the dashboard says it: `queue --all` lists it for everyone."""
        desk = self._desk
        # An id no job can have (past SQLite's 64-bit integers) is simply not found.
        job = desk.book.get(job_id) or (
            desk.store.get_job(job_id) if 0 < job_id <= MAX_JOB_ID else None
        )
        return self._visible(job_id, job, actor)

    async def get_async(self, job_id: int, actor: Principal) -> Job:
        """`get` for the event loop: a job the book keeps (live or recently finished) from
        memory, even while the database is stalled; an older one from the store off the loop,
        within the request's deadline (`services/store_calls.py`: DatabaseStalled past it)."""
        desk = self._desk
        job = desk.book.get(job_id)
        if job is None and 0 < job_id <= MAX_JOB_ID:
            job = await desk.store_calls.run(desk.store.get_job, job_id)
        return self._visible(job_id, job, actor)

    @staticmethod
    def _visible(job_id: int, job: Job | None, actor: Principal) -> Job:
        missing = (
            f"job {job_id} not found, or not yours to see (its details are its owner's and the "
            "admins'): `gpuyard queue --all` lists every job"
        )
        if job is None:
            raise NotFound(missing)
        require_visible(actor, job.owner, missing)
        return job

    def array_tasks(self, array_id: int, actor: Principal) -> list[Job]:
        """An array's tasks by index, as the actor may see them: the book's (pending, running,
        recently finished), the store's for those the book evicted. NotFound for no such
        array, or another user's."""
        book = self._desk.book
        kept = book.array_tasks(array_id)
        first = book.get(array_id)
        # Every task kept and none evicted: the book alone answers (no database read).
        stored: list[Job] = []
        if not kept or first is None or _maybe_evicted(kept):
            stored = self._desk.store.array_tasks(array_id) if 0 < array_id <= MAX_JOB_ID else []
        by_id = {job.id: job for job in stored}
        by_id.update((job.id, job) for job in kept)  # the book is never older than the store
        tasks = sorted(by_id.values(), key=lambda j: (j.array_task_id or 0, j.id))
        missing = (
            f"array {array_id} not found, or not yours to see: `gpuyard queue --all` lists "
            "every job (an array's id is its first task's)"
        )
        if not tasks:
            raise NotFound(missing)
        require_visible(actor, tasks[0].owner, missing)
        return tasks

    def list_jobs(
        self,
        actor: Principal,
        *,
        include_finished: bool,
        limit: int | None = None,
        before_id: int | None = None,
        since: float | None = None,
        states: Collection[JobState] | None = None,
        owner: str | None = None,
        name: str | None = None,
    ) -> list[Job]:
        """Pending and running jobs from memory; with `include_finished`, a page of history
        from the store (newest first by id up to `limit`, before `before_id`), returned in id
        order. Filters by submit time, state, owner and name. Each job as the actor may see it
        in a listing (`redact_job`)."""
        jobs = [redact_job(actor, job) for job in self._listed(
            include_finished, limit, before_id, since, states, owner, name
        )]  # fmt: skip
        if name is None:
            return jobs
        # By the name the actor sees: another's job named after its command is not found by
        # that name (the filter would tell what it runs).
        return [job for job in jobs if job.spec.name == name]

    async def list_jobs_async(
        self, actor: Principal, *, include_finished: bool, **filters: Any
    ) -> list[Job]:
        """`list_jobs` for the event loop, off it: the live queue in a plain thread (memory
        only: it answers while the database is stalled), a page of history in the store's
        (within the request's deadline)."""
        if include_finished:
            # A long page is many decoded rows (10,000 jobs: ~1 s, more on a loaded machine):
            # it waits longer before a silent store refuses it.
            limit = filters.get("limit") or MAX_PAGE
            times = 1.0 if limit <= _QUICK_PAGE else _LONG_PAGE_DEADLINES
            return await self._desk.store_calls.run_long(
                times, self.list_jobs, actor, include_finished=True, **filters
            )
        return await asyncio.to_thread(self.list_jobs, actor, include_finished=False, **filters)

    def _listed(
        self,
        include_finished: bool,
        limit: int | None,
        before_id: int | None,
        since: float | None,
        states: Collection[JobState] | None,
        owner: str | None,
        name: str | None,
    ) -> list[Job]:
        book = self._desk.book
        if not include_finished:
            if limit is not None and since is None and not states and owner is None and (
                name is None
            ):  # the first page: only its jobs (a deep queue is not sorted for 50 of them)
                return book.active_page(limit)
            jobs = book.jobs(include_finished=False)
            return [j for j in jobs if _matches(j, since, states, owner, name)][:limit]
        if before_id is not None:
            before_id = min(max(before_id, 0), MAX_JOB_ID)
        page = self._desk.store.page_jobs(
            limit=min(limit or MAX_PAGE, MAX_PAGE), before_id=before_id, since=since,
            states=states, owner=owner, name=name,
        )  # fmt: skip
        # The book is never older than the store (written first): prefer its version.
        return sorted((book.get(j.id) or j for j in page), key=lambda j: j.id)

    @staticmethod
    def shows_details(actor: Principal, job: Job) -> bool:
        """Whether a listed job's log, GPU stats, idleness and health are the actor's to see
        (its owner's and the admins'); everyone else sees what `redact_job` leaves."""
        return may_see(actor, job.owner)

    def reason(self, job: Job) -> str:
        """Why a job is in its state: the scheduler's reason for pending jobs."""
        if job.state is JobState.PENDING:
            return self._desk.scheduler.reason_for(job.id)
        return job.reason

    def counts(self) -> tuple[int, int]:
        """How many jobs are pending and running now (for /metrics)."""
        jobs = self._desk.book.jobs(include_finished=False)
        pending = sum(1 for job in jobs if job.state is JobState.PENDING)
        return pending, len(jobs) - pending

    def read_log(
        self, job_id: int, actor: Principal, offset: int = 0, limit: int | None = None
    ) -> LogChunk:
        """Part of a job's output, from `offset` (past the end: nothing, not an error)."""
        return self.read_job_log(self.get(job_id, actor), offset, limit)

    def read_job_log(self, job: Job, offset: int = 0, limit: int | None = None) -> LogChunk:
        """`read_log` of a job already found as the actor may see it."""
        with self.open_job_log(job, offset) as log:
            data = log.read(limit if limit is not None else log.end - log.start)
            return LogChunk(data, log.start, log.start + len(data), log.state)

    def open_log(
        self, job_id: int, actor: Principal, offset: int = 0, tail: int | None = None
    ) -> LogReader:
        """A job's log opened for streaming, from `offset` (clamped to its size) or, with
        `tail`, from its last `tail` lines, up to its size now. A job that never ran has an
        empty log; an ended job's log deleted, or replaced by something that is not a file, is
        an error that says so."""
        return self.open_job_log(self.get(job_id, actor), offset, tail)

    def open_job_log(self, job: Job, offset: int = 0, tail: int | None = None) -> LogReader:
        """`open_log` of a job already found as the actor may see it (`get_async`: found in
        memory while the database is stalled)."""
        job_id = job.id
        path = self.log_path(job_id)
        try:
            f = open_job_file(path)  # never through a link the job planted; LogReader owns it
        except FileNotFoundError:
            # Created by the job's supervisor, first thing: until a launched job has ended it
            # may not be there yet.
            if job.pid is None or not job.state.is_terminal:
                return LogReader(None, 0, 0, job.state)
            raise NotFound(
                f"job {job_id}'s log {path} is not on the server any more (deleted?), so its "
                "output is lost"
            ) from None
        except OSError as exc:
            raise Conflict(_unreadable_log(job_id, path, exc)) from None
        try:
            size = os.fstat(f.fileno()).st_size
            start = min(offset, size)
            if tail is not None:
                start = max(start, _tail_start(f, size, tail))
            f.seek(start)
        except OSError as exc:
            f.close()
            raise Conflict(_unreadable_log(job_id, path, exc)) from None
        return LogReader(f, start, size, job.state)


def _maybe_evicted(kept: list[Job]) -> bool:
    """Whether an array's tasks kept in memory may lack some the book evicted: its ids are
    consecutive from the array's, so a gap, or any finished task (the next to go), says so."""
    ids = [job.id for job in kept]
    first = kept[0].array_job_id
    return (
        min(ids) != first
        or max(ids) - min(ids) + 1 != len(ids)
        or any(job.state.is_terminal for job in kept)
    )


def _matches(
    job: Job,
    since: float | None,
    states: Collection[JobState] | None,
    owner: str | None,
    name: str | None,
) -> bool:
    return (
        (since is None or job.submitted_at >= since)
        and (not states or job.state in states)
        and (owner is None or job.owner == owner)
        and (name is None or job.spec.name == name)
    )


def _tail_start(f: BinaryIO, size: int, lines: int) -> int:
    """Where a file's last `lines` lines begin (a final newline ends a line, it does not start
    one): read backwards block by block, so a tail of a 200 MB log reads only its end."""
    if lines <= 0:
        return size
    pos, newlines = size, 0
    last = size - 1  # a newline here ends the last line
    while pos > 0:
        step = min(_TAIL_BLOCK, pos)
        pos -= step
        f.seek(pos)
        block = f.read(step)
        end = len(block)
        while (i := block.rfind(b"\n", 0, end)) >= 0:
            end = i
            if pos + i == last:
                continue
            newlines += 1
            if newlines == lines:
                return pos + i + 1
    return 0


def _unreadable_log(job_id: int, path: str, exc: OSError) -> str:
    if isinstance(exc, IsADirectoryError):
        what = "a directory, not a file"
    else:
        what = exc.strerror or str(exc)
    return (
        f"job {job_id}'s log {path} cannot be read ({what}); ask the server's admin to put "
        "the file back or move that away"
    )
