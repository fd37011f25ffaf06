"""The journal: the one place a job changes.

Every change goes the same way: written durably to the store, then put in the in-memory book,
then published to the observers registered when the journal was built. Two kinds:
- `in_order` observers are called under the journal's lock, in commit order, with every change
  (the scheduler's inbox, metrics, the live feed): they must be cheap and never block;
- `after` observers are called once the lock is released (stopping a process, saving a finished
  job's GPU stats): they may do I/O, and see changes of different jobs in any order.

A write that fails is not dropped: the change is kept as *unwritten* and retried
(`retry_unwritten`, on every controller tick) until it lands; only then is it put in the book
and published. Meanwhile `current()` answers with the intended version, so a later change of the
same job (a cancel while its end record waits for the disk) builds on it and replaces it. A
change made with `retry=False` (a start: the scheduler offers it again next pass) is simply not
made when its write fails.

Worked example: job 7 exits while the disk is full. Its FAILED record cannot be written, so it
stays RUNNING in the book and its GPUs stay held: nothing is published, nothing is forgotten.
The next tick retries; once the disk has room the record lands, the book holds FAILED, and the
scheduler hears `ended` and gives the GPUs to the next job.

One kind of change acts before it lands: `unwritten` observers hear a change kept waiting (once,
at its first failed write), so that a cancel of the job that filled the disk is signalled at
once and its record follows (the job's end is recorded, built on it, when there is room).

Changes made with `change` (a cancel, a stop, an end, a pid record) and `change_many` (`cancel
ID ID ...`, `scancel -u`) share their durable write. The lock is held across the write, so
changes made one by one went one group-commit round each: 50 clients cancelling waited in a
convoy (cancel p50 1.1 s in `bench/mixed_load.py`). Now a change is queued, and whichever caller
holds the lock next makes every queued change (each on its job's current version; one per job,
up to `ROUND_JOBS`, one `retry` kind per round) in one write, runs their observers, and wakes
their callers. Nothing else moves: changes are made under the lock, each durable before it is
in the book, published in commit order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from gpuyard.domain.job import Job
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.jobs.crashpoints import crash_point
from gpuyard.services.ports import JobStore

log = logging.getLogger("gpuyard.journal")


@dataclass(frozen=True, slots=True)
class JobChange:
    """One committed change: `before` None for a new job; `at` when it happened. `removed`:
    the finished job was forgotten (`gpuyard clean`), `before` and `after` both the job as it
    was, so an observer of state changes sees none (and one that keeps jobs drops it)."""

    before: Job | None
    after: Job
    at: float
    removed: bool = False


JobObserver = Callable[[JobChange], None]
Update = Callable[[Job], Job | None]  # a job's current version -> its next (None: no change)
# The most job changes one round of queued changes writes: the lock is held across the write, and
# a scheduler pass waits for it (a 10,000-task array's cancel goes in rounds of this many).
ROUND_JOBS = 1000


class _Ask:
    """One queued `Journal.change_many`: what to apply to which jobs, and once made, the jobs
    as they then are (or the error)."""

    __slots__ = ("answers", "at", "done", "error", "retry", "taken", "updates")

    def __init__(self, updates: dict[int, Update], at: float, retry: bool) -> None:
        self.updates = updates
        self.at = at
        self.retry = retry
        self.answers: dict[int, Job | None] = {}
        self.error: Exception | None = None
        self.taken = False  # by a round (under the journal's `_asks_guard`)
        self.done = threading.Event()  # set once made and its observers have run

    def update_of(self, tx: Transaction, job_id: int) -> tuple[Job | None, Job | None]:
        """The job's current version, and what this ask makes of it (None: no change)."""
        current = tx.current(job_id)
        return current, (None if current is None else self.updates[job_id](current))


class Transaction:
    """Changes made while holding the journal's lock (see `Journal.transaction`)."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self.published: list[JobChange] = []
        self.unwritten: list[JobChange] = []  # kept waiting for the store, told once

    def current(self, job_id: int) -> Job | None:
        return self._journal.current(job_id)

    def commit(self, jobs: Sequence[Job], at: float, *, retry: bool = True) -> list[Job]:
        """Write new versions of existing jobs (each built on `current()`); returns those that
        are durable now. With `retry`, those that are not are kept and retried."""
        return self._journal._commit(self, [(job, at) for job in jobs], retry)

    def commit_one(self, job: Job, at: float, *, retry: bool = True) -> bool:
        return bool(self.commit([job], at, retry=retry))


class Journal:
    """Durable write, then the book, then the observers; failed writes retried."""

    def __init__(
        self,
        book: JobBook,
        store: JobStore,
        *,
        in_order: Sequence[JobObserver] = (),
        after: Sequence[JobObserver] = (),
        unwritten: Sequence[JobObserver] = (),
    ) -> None:
        """`unwritten`: observers (as `after`, off the lock) of a change whose write failed
        and waits for a retry: what must not wait for the disk (a stop's signal)."""
        self.book = book
        self.store = store
        self.lock = book.mutation_lock  # one change of a job at a time
        self._in_order = tuple(in_order)
        self._after = tuple(after)
        self._on_unwritten = tuple(unwritten)
        # job id -> (intended version, at); changed only under `lock`
        self._unwritten: dict[int, tuple[Job, float]] = {}
        self._asks: list[_Ask] = []  # queued `change`s, made by the next holder of `lock`
        self._asks_guard = threading.Lock()

    # -- new jobs -------------------------------------------------------------------------
    def inserted(self, job: Job, at: float) -> None:
        """Publish a job the caller has just inserted durably. No lock: nobody can change a job
        whose id is not in the book yet, and observers hear of it before the book has it (a
        cancel, which needs the book, can never reach an observer before the submit)."""
        change = JobChange(None, job, at)
        self._publish(self._in_order, change)
        self.book.put(job)
        self._publish(self._after, change)

    def removed(self, job_ids: Iterable[int], at: float) -> None:
        """Forget finished jobs the store has just deleted (`gpuyard clean`), and publish each
        the book held as a removal. Under the lock: a job that ended just before the delete is
        in the book by now (the journal writes, then puts, under this lock), so it goes too;
        a pending or running one stays (the store deletes only finished rows)."""
        ids = list(job_ids)
        with self.transaction() as tx:
            gone = [job for job in map(self.book.get, ids) if job is not None]
            self.book.forget(ids)
            for job in gone:
                if self.book.get(job.id) is None:  # dropped (a finished one)
                    change = JobChange(job, job, at, removed=True)
                    self._publish(self._in_order, change)
                    tx.published.append(change)

    # -- changes --------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Hold the lock for a read-decide-write of several jobs; `after` observers run once it
        is released."""
        tx = Transaction(self)
        with self.lock:
            yield tx
        for change in tx.published:
            self._publish(self._after, change)
        for change in tx.unwritten:
            self._publish(self._on_unwritten, change)

    def change(self, job_id: int, update: Update, at: float, *, retry: bool = True) -> Job | None:
        """Apply `update` to the job's current version (None from it: no change) and commit.
        Returns the job as it now is (intended, if its write is waiting for a retry)."""
        return self.change_many({job_id: update}, at, retry=retry)[job_id]

    def change_many(
        self, updates: dict[int, Update], at: float, *, retry: bool = True
    ) -> dict[int, Job | None]:
        """`change` of several jobs (at most `ROUND_JOBS`), made in one round. Queued changes
        share one write (the module's docstring): an update may run on another caller's
        thread, so it must only compute the new version."""
        ask = _Ask(updates, at, retry)
        with self._asks_guard:
            self._asks.append(ask)
        while not ask.taken:  # else another caller's round made it: wait for its observers
            made: list[_Ask] = []
            try:
                with self.transaction() as tx:  # waits for the lock, and the write holding it
                    self._make_asks(tx, made)
            except Exception as exc:  # the store's bug, not a write refused: told to them all
                for each in made:
                    each.error = each.error or exc
            finally:
                for each in made:  # once their observers ran: a caller returns after them
                    each.done.set()
        ask.done.wait()
        if ask.error is not None:
            raise ask.error
        return ask.answers

    def _make_asks(self, tx: Transaction, made: list[_Ask]) -> None:
        """Make queued changes in one write: of one `retry` kind, none of a job already in the
        round, up to `ROUND_JOBS` jobs; the rest stay queued for the next round. `made`: the
        asks taken, filled at once."""
        with self._asks_guard:
            if not self._asks:
                return
            retry = self._asks[0].retry
            jobs: set[int] = set()
            left: list[_Ask] = []
            for ask in self._asks:
                fits = not made or len(jobs) + len(ask.updates) <= ROUND_JOBS
                if ask.retry is retry and fits and jobs.isdisjoint(ask.updates):
                    jobs.update(ask.updates)
                    ask.taken = True
                    made.append(ask)
                else:
                    left.append(ask)
            self._asks = left
        writes: list[tuple[Job, float]] = []
        for ask in made:
            try:
                news = [(job_id, ask.update_of(tx, job_id)) for job_id in ask.updates]
            except Exception as exc:  # raised to its caller, not to this round's maker
                ask.error = exc
                continue
            for job_id, (current, new) in news:
                ask.answers[job_id] = current
                if new is not None:
                    writes.append((new, ask.at))
        if writes:
            self._commit(tx, writes, retry)
            for ask in made:
                for job_id in ask.answers:
                    ask.answers[job_id] = tx.current(job_id) if retry else self.book.get(job_id)

    def current(self, job_id: int) -> Job | None:
        """The job's latest version: one waiting to be written, else the book's."""
        pending = self._unwritten.get(job_id)
        return pending[0] if pending is not None else self.book.get(job_id)

    def queued_count(self) -> int:
        """How many `change`s wait for a round (callers blocked behind the one writing)."""
        with self._asks_guard:
            return len(self._asks)

    def unwritten_count(self) -> int:
        return len(self._unwritten)

    def is_unwritten(self, job_id: int) -> bool:
        """Whether the job's latest change waits for its write to be retried (what a log line
        says of it must not be that it happened)."""
        return job_id in self._unwritten

    def retry_unwritten(self) -> int:
        """Write the changes whose write failed; returns how many are still waiting."""
        if not self._unwritten:
            return 0
        with self.transaction() as tx:
            waiting = list(self._unwritten.values())
            landed = []
            for job, at in waiting:  # one by one: one bad row must not hold back the others
                landed += self._commit(tx, [(job, at)], retry=True, quiet=True)
            if landed:
                log.info("recorded job(s) %s after retrying: %s",
                         ",".join(str(j.id) for j in landed),
                         ", ".join(f"{j.id} {j.state.value}" for j in landed))  # fmt: skip
            return len(self._unwritten)

    # -- the protocol ---------------------------------------------------------------------
    def _commit(
        self,
        tx: Transaction,
        changes: Sequence[tuple[Job, float]],
        retry: bool,
        quiet: bool = False,
    ) -> list[Job]:
        """Write `changes` (each a new version and when it happened) in one durable write."""
        timed = [(self._on_stored_version(job), at) for job, at in changes]
        news = [job for job, _ in timed]
        if not news:
            return []
        try:
            self.store.write([], news)
        except Exception as exc:  # the disk, the database: kept and retried, never dropped
            if not quiet:
                log.warning(
                    "recording job(s) %s failed (%s); %s",
                    ",".join(str(j.id) for j in news), exc,
                    "retrying until it lands" if retry else "not made",
                )  # fmt: skip
            if retry:
                for job, at in timed:
                    if not quiet:  # a first failure: its observers hear of it once
                        waited = self._unwritten.get(job.id)
                        before = waited[0] if waited else self.book.get(job.id)
                        tx.unwritten.append(JobChange(before, job, at))
                    self._unwritten[job.id] = (job, at)
            return []
        crash_point("journal_written")
        for job, at in timed:
            self._unwritten.pop(job.id, None)
            change = JobChange(self.book.get(job.id), job, at)
            self.book.put(job)
            self._publish(self._in_order, change)
            tx.published.append(change)
        return news

    def _on_stored_version(self, job: Job) -> Job:
        """A change built on an unwritten one replaces it: it is written as the next version
        of what the store holds (the book's version)."""
        stored = self.book.get(job.id)
        if job.id in self._unwritten and stored is not None:
            return replace(job, version=stored.version + 1)
        return job

    @staticmethod
    def _publish(observers: Sequence[JobObserver], change: JobChange) -> None:
        for observer in observers:
            try:
                observer(change)
            except Exception:  # one observer's bug must not lose the change for the others
                log.exception("an observer of job %s's change failed", change.after.id)
