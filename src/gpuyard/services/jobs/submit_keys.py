"""Idempotent submits: one job per owner and `Idempotency-Key`, however often it is sent.

A client that lost the answer to a submit (the connection dropped, the server restarted) sends
the same request again with the same key, and is answered the job that key made instead of a
second one. Where that job is looked for, in order: a submit with the key still in flight (not
yet durable: the later request waits for it and answers its job), the book (pending, running
and recently finished jobs), the store (a finished job the book no longer keeps). The store's
lookup runs off the event loop, outside `SubmitKeys` own lock, within the request's deadline
(a stalled database: 503, nothing claimed); then the memory lookups and the claim of a new key
are one critical section under that lock, so of two requests with one key exactly one
inserts; a claim is settled only once its job is in the book (found there from then on) or
certainly not written (the waiters then claim again).

A key is the owner's: another user's key never matches. The same key with another request (a
different job spec) is refused in one line rather than answered with a job that is not the one
asked for.

Worked example: ada's submit with key K is claimed and waits for the group commit; her client
times out and sends it again with K: the second request finds K in flight, waits for the first,
and both answer job 41 (the first 201, the retry 200). Tomorrow, after job 41 ended and the book
evicted it, K again: the store finds job 41.
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import Future
from dataclasses import dataclass

from gpuyard.domain.errors import (
    WRITES_PAUSED_RETRY_S,
    DatabaseStalled,
    GpuyardError,
    InvalidRequest,
)
from gpuyard.domain.job import Job, JobSpec
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.ports import JobStore
from gpuyard.services.store_calls import StoreCalls

KEY_FIELD = "Idempotency-Key"


@dataclass(frozen=True, slots=True)
class _Claim:
    """A submit with a key, not yet settled: the spec it asked for, and its job once queued
    (None: it was not written; a waiter claims the key again)."""

    spec: JobSpec
    done: Future[Job | None]


class SubmitKeys:
    """The claims of submits with an `Idempotency-Key` and the lookups of keys already used."""

    def __init__(self, book: JobBook, store: JobStore, store_calls: StoreCalls) -> None:
        self._book = book
        self._store = store
        self._store_calls = store_calls
        # Leaf lock (LOCKING): held for dict lookups only, on the event loop; the store's
        # lookup of a key the book does not know runs outside it, off the loop.
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], _Claim] = {}

    async def claim(self, owner: str, key: str, spec: JobSpec) -> Job | Future[Job | None] | None:
        """The job this owner's key made (a replay), the future of the submit with it still in
        flight, or None: the key is new and now the caller's, who must `settle` it.
        InvalidRequest if the key was used for another submission; DatabaseStalled if the
        store did not answer within the request's deadline (nothing claimed)."""
        found = self._known(owner, key, spec)
        if found is not None:
            return found
        # Off the event loop (a stalled database must not freeze the API), outside the lock.
        stored = await self._store_calls.run(self._stored, owner, key)
        with self._lock:  # meanwhile another request may have claimed it, or its job landed
            found = self._known_locked(owner, key, spec)
            if found is not None:
                return found
            if stored is not None:
                _check_same(stored.spec, spec, stored.id)
                return stored
            self._claims[(owner, key)] = _Claim(spec, Future())
            return None

    def _known(self, owner: str, key: str, spec: JobSpec) -> Job | Future[Job | None] | None:
        with self._lock:
            return self._known_locked(owner, key, spec)

    def _known_locked(self, owner: str, key: str, spec: JobSpec) -> Job | Future[Job | None] | None:
        """A claim in flight or the book's job for the key (the caller holds the lock)."""
        claim = self._claims.get((owner, key))
        if claim is not None:
            _check_same(claim.spec, spec, None)
            return claim.done
        job = self._book.by_idempotency_key(owner, key)
        if job is not None:
            _check_same(job.spec, spec, job.id)
        return job

    def _stored(self, owner: str, key: str) -> Job | None:
        try:
            return self._store.find_by_idempotency_key(owner, key)
        except GpuyardError:
            raise
        except Exception as exc:  # the database did not answer: no answer is safe to guess
            # Retry-After: a keyed submit is safe to send again, and the CLI and SDK send it
            # again only when told when (a database restarting answers this for a few seconds).
            raise DatabaseStalled(
                f"the server could not look up this {KEY_FIELD} (its database did not answer: "
                f"{type(exc).__name__}); nothing was queued, send the same request again",
                retry_after_s=WRITES_PAUSED_RETRY_S,
            ) from exc

    def settle(self, owner: str, key: str, job: Job | None) -> None:
        """End a claim: `job` is queued (in the book), or None: nothing was written."""
        with self._lock:
            claim = self._claims.pop((owner, key))
        claim.done.set_result(job)


def _check_same(made: JobSpec, asked: JobSpec, job_id: int | None) -> None:
    """A retry must ask for what the key's first submit asked for (the book keeps a finished
    job without its script copy, so the script is then not compared)."""
    if made.script is None and asked.script is not None:
        asked = dataclasses.replace(asked, script=None)
    if made.kind == "service" and asked.service_port == 0:  # `--port auto`: the server chose
        asked = dataclasses.replace(asked, service_port=made.service_port)
    if made != asked:
        which = f"job {job_id}" if job_id is not None else "a submit still in progress"
        raise InvalidRequest(
            f"this {KEY_FIELD} was already used for another submission ({which}); send a new "
            "key with a new job",
            field=KEY_FIELD,
        )
